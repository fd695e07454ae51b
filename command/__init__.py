"""The ``tether`` command and its kubectl plugin: the floor above the parts.

``command.cli`` starts each part by name (``tether listener ...``); ``command.kubectl`` offers the
operator commands as ``kubectl tether``. No part imports this package (setup.cfg, the
``product-floors`` contract).
"""
