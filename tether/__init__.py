"""Shared library of Tether: what two or more parts use, in floors.

A floor imports only the floors below it (setup.cfg, the ``tether-floors`` contract):

    tether.runtime | tether.http   the elected runtime and the clients above it | the HTTP worker
    tether.wire                    the wire contract: records, schemas, state hashes, Watches
    tether.kube                    the Kubernetes client (gateway) and the API types
    tether.base                    process and settings: config, logs, times, certificates

What one part alone uses lives in that part. Modules are small and named for what they hold;
import the module, not its names (``from tether.base import certs`` then
``certs.CertificateAuthority``).
"""
