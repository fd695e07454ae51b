"""Which addresses a runtime's API server may not have (pure).

A runtime's kubeconfig names its API server; a hostile tenant names an address inside the
management plane instead (its Pods and Services, the cloud's metadata service, loopback) and
reads the answers back through conditions and errors (server-side request forgery). Every
address a runtime's server name resolves to is checked against the denied networks before a
connection is opened (``tether.kube.gateway.bounded``); a literal IP already when its kubeconfig is
parsed (``tether.kube.gateway.kubeconfig``).

``DEFAULT_DENIED``: loopback, link-local (the metadata addresses 169.254.169.254 and
fd00:ec2::254 among them), unspecified, multicast, carrier-grade NAT (100.64.0.0/10: Gardener's
default Pod and Service ranges, 100.96.0.0/11 and 100.64.0.0/13) and the private ranges
(RFC 1918, RFC 4193) a KCP's Pod and Service ranges come from. A landscape whose runtimes'
API servers are on private addresses sets ``TETHER_RUNTIME_DENIED_NETWORKS`` to its own list
(the KCP's ranges, loopback and metadata at least); local planes (tests, the demo) run on
loopback and set it without 127.0.0.0/8.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

DEFAULT_DENIED_TEXT = (
    "127.0.0.0/8",
    "::1/128",  # loopback
    "0.0.0.0/8",
    "::/128",  # unspecified ("this host")
    "169.254.0.0/16",
    "fe80::/10",  # link-local, metadata 169.254.169.254
    "fd00:ec2::254/128",  # AWS metadata over IPv6
    "100.64.0.0/10",  # carrier-grade NAT: Gardener Pod/Service ranges
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "fc00::/7",  # private ranges
    "224.0.0.0/4",
    "ff00::/8",  # multicast
)


class NetworkError(ValueError):
    """A network of the deny-list is not a CIDR."""


def networks(texts: Iterable[str]) -> tuple[Network, ...]:
    """The networks of CIDR texts (``10.0.0.0/8``, ``::1``); ``NetworkError`` names a bad one."""
    out = []
    for text in texts:
        text = text.strip()
        if not text:
            continue
        try:
            out.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            raise NetworkError(f"{text!r} is not an IP network (CIDR)") from None
    return tuple(out)


DEFAULT_DENIED = networks(DEFAULT_DENIED_TEXT)


def denied(address: Address | str, deny: Sequence[Network]) -> bool:
    """Whether ``address`` lies in one of ``deny`` (an IPv4-mapped IPv6 address counts as
    its IPv4 address)."""
    ip = ipaddress.ip_address(address) if isinstance(address, str) else address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip.version == n.version and ip in n for n in deny)
