"""Shared library of Tether: what two or more parts use.

Modules are small and named for what they hold; import the module, not its names
(``from tether import certs`` then ``certs.CertificateAuthority``).
"""
