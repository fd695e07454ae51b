"""The runtime address policy of local planes: every test and demo plane listens on
127.0.0.1, which the product's default deny-list refuses (``tether.kube.gateway.addresses``).

``DENIED`` is the default list with only 127.0.0.1 taken out of loopback (127.0.0.2 and
the rest of 127.0.0.0/8 stay denied, so a test can still point a kubeconfig at a denied
loopback address); ``DENIED_TEXT`` is it as ``TETHER_RUNTIME_DENIED_NETWORKS`` takes it, for
processes; ``policy(**over)`` a ``skr_clients.Policy`` with it, for parts built in-process.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from tether.kube import skr_clients
from tether.kube.gateway import addresses

_LOOPBACK = ipaddress.IPv4Network("127.0.0.0/8")
DENIED: tuple[addresses.Network, ...] = tuple(
    n
    for d in addresses.DEFAULT_DENIED
    for n in (
        _LOOPBACK.address_exclude(ipaddress.IPv4Network("127.0.0.1/32")) if d == _LOOPBACK else [d]
    )
)
DENIED_TEXT = ",".join(str(n) for n in DENIED)
ENV = {"TETHER_RUNTIME_DENIED_NETWORKS": DENIED_TEXT}


def policy(**over: Any) -> skr_clients.Policy:
    return skr_clients.Policy(**{"denied": DENIED, **over})
