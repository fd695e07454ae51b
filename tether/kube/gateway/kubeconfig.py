"""A runtime's kubeconfig, parsed by an allow-list into a ``Connection`` (pure: no file is
read, no command run, no address resolved).

A runtime's kubeconfig Secret is tenant input (for a bring-your-own cluster its owner writes
it), so it is never handed to the ``kubernetes`` client's loader, which honours ``exec``
(runs a command), ``auth-provider`` (``cmd-path``), ``tokenFile`` and every path field (reads
any file of the KCP pod, e.g. its own ServiceAccount token, and sends it to the tenant's
server). What is accepted:

* one context: ``current-context``, or the only context there is;
* its cluster: an ``https://`` ``server`` with a host, ``certificate-authority-data``
  (else the system's trust store), ``tls-server-name``;
* its user: ``client-certificate-data`` with ``client-key-data``, and/or a static ``token``;
* ``extensions``, ``namespace``, ``disable-compression`` and ``preferences`` are ignored.

Everything else is refused with ``Refused``, whose ``field`` names the field as a path
(``users[0].user.exec``) and whose message says why, never a value. A server given as a
literal IP address is checked against the denied networks here already
(``addresses.denied``); a host name is checked when it is resolved, at each connection
(``tether.kube.gateway.bounded``).
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import urllib.parse
from collections.abc import Sequence
from typing import Any, NamedTuple

import yaml

from tether.kube.gateway import addresses

MAX_BYTES = 256 * 1024  # a kubeconfig with one cluster and one user is a few KiB

_IGNORED = {"extensions", "disable-compression"}
_CLUSTER_FIELDS = {"server", "certificate-authority-data", "tls-server-name", *_IGNORED}
_USER_FIELDS = {"client-certificate-data", "client-key-data", "token", *_IGNORED}
_CONTEXT_FIELDS = {"cluster", "user", "namespace", *_IGNORED}
_TOP_FIELDS = {
    "apiVersion",
    "kind",
    "clusters",
    "users",
    "contexts",
    "current-context",
    "preferences",
    *_IGNORED,
}
# why a known field is refused (others: "not allowed")
_WHY = {
    "exec": "runs a command",
    "auth-provider": "runs a command or reads files",
    "tokenFile": "reads a file",
    "client-certificate": "a file path (give client-certificate-data)",
    "client-key": "a file path (give client-key-data)",
    "certificate-authority": "a file path (give certificate-authority-data)",
    "insecure-skip-tls-verify": "turns certificate checks off",
    "proxy-url": "sends the requests through another address",
    "username": "basic authentication is not supported",
    "password": "basic authentication is not supported",
    "as": "impersonation is not supported",
    "as-groups": "impersonation is not supported",
    "as-uid": "impersonation is not supported",
    "as-user-extra": "impersonation is not supported",
}


class KubeConfigError(ValueError):
    """A kubeconfig could not be loaded; the message says which and why (never its content)."""


class Refused(KubeConfigError):
    """The kubeconfig holds something the allow-list refuses; ``field`` names it."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"kubeconfig field {field} refused: {why}")
        self.field = field
        self.why = why


class Connection(NamedTuple):
    """What a gateway needs to reach one API server; the PEMs and the token are secrets
    (never in a log line or ``repr`` of an error)."""

    server: str  # https://host[:port][/path], no trailing slash
    host: str  # as in the URL (an IP literal without brackets)
    port: int
    ca_pem: bytes | None  # None: the system's trust store
    cert_pem: bytes | None
    key_pem: bytes | None
    token: str | None
    tls_server_name: str | None

    def __repr__(self) -> str:  # the credentials stay out of tracebacks
        return f"Connection(server={self.server!r})"


def load(data: bytes | str) -> dict[str, Any]:
    """The kubeconfig content as a mapping (``KubeConfigError`` when it is none)."""
    if len(data) > MAX_BYTES:
        raise KubeConfigError(f"kubeconfig content is larger than {MAX_BYTES} bytes")
    try:
        # libyaml's safe loader when present: the pure-Python one was a third of compass's
        # CPU per new runtime (profiled at 300 Kyma CRs); same safe constructors, same errors
        doc: Any = yaml.load(data, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        raise KubeConfigError("kubeconfig content is not valid YAML") from None
    if not isinstance(doc, dict):
        raise KubeConfigError("kubeconfig content is not a mapping")
    return doc


def parse(
    data: bytes | str, *, denied: Sequence[addresses.Network] = addresses.DEFAULT_DENIED
) -> Connection:
    """The connection a kubeconfig describes, or ``Refused``/``KubeConfigError``."""
    doc = load(data)
    _only(doc, _TOP_FIELDS, "")
    context_name, context = _context(doc)
    cluster_at, cluster = _named(
        doc,
        "clusters",
        "cluster",
        _str(context.get("cluster"), f"contexts[{context_name}].context.cluster"),
    )
    user_at, user = _named(
        doc, "users", "user", _str(context.get("user"), f"contexts[{context_name}].context.user")
    )
    _only(cluster, _CLUSTER_FIELDS, f"{cluster_at}.cluster.")
    _only(user, _USER_FIELDS, f"{user_at}.user.")
    server, host, port = _server(cluster.get("server"), f"{cluster_at}.cluster.server", denied)
    ca = _pem_data(cluster, "certificate-authority-data", f"{cluster_at}.cluster.")
    cert = _pem_data(user, "client-certificate-data", f"{user_at}.user.")
    key = _pem_data(user, "client-key-data", f"{user_at}.user.")
    if (cert is None) != (key is None):
        missing = "client-key-data" if key is None else "client-certificate-data"
        raise Refused(
            f"{user_at}.user.{missing}",
            "a client certificate needs its key and the other way round",
        )
    token = user.get("token")
    if token is not None and (
        not isinstance(token, str) or not token.strip() or any(c in token for c in "\r\n")
    ):
        raise Refused(f"{user_at}.user.token", "not a single-line string")
    if cert is None and token is None:
        raise Refused(
            f"{user_at}.user",
            "no credential (client-certificate-data with client-key-data, or token)",
        )
    sni = cluster.get("tls-server-name")
    if sni is not None and (not isinstance(sni, str) or not sni):
        raise Refused(f"{cluster_at}.cluster.tls-server-name", "not a host name")
    return Connection(server, host, port, ca, cert, key, token.strip() if token else None, sni)


# -- pieces ----------------------------------------------------------------------------------


def _only(section: Any, allowed: set[str], prefix: str) -> None:
    if not isinstance(section, dict):
        raise Refused(prefix.rstrip(".") or "(top)", "not a mapping")
    for key in sorted(section, key=str):
        if key not in allowed:
            if key == "insecure-skip-tls-verify" and section[key] is False:
                continue  # says what is true anyway
            raise Refused(f"{prefix}{key}", _WHY.get(str(key), "not allowed"))


def _str(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise Refused(field, "missing or not a string")
    return value


def _context(doc: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    contexts = doc.get("contexts") or []
    if not isinstance(contexts, list):
        raise Refused("contexts", "not a list")
    current = doc.get("current-context") or ""
    if not current:
        if len(contexts) != 1:
            raise Refused(
                "current-context",
                f"unset, and there are {len(contexts)} contexts (exactly one context is used)",
            )
        current = (contexts[0] or {}).get("name") if isinstance(contexts[0], dict) else ""
    found = [c for c in contexts if isinstance(c, dict) and c.get("name") == current]
    if len(found) != 1:
        raise Refused("current-context", "names no single context")
    index = contexts.index(found[0])
    _only(found[0], {"name", "context"}, f"contexts[{index}].")
    context = found[0].get("context")
    _only(context, _CONTEXT_FIELDS, f"contexts[{index}].context.")
    assert isinstance(context, dict)
    return str(index), context


def _named(doc: dict[str, Any], plural: str, key: str, name: str) -> tuple[str, dict[str, Any]]:
    entries = doc.get(plural) or []
    if not isinstance(entries, list):
        raise Refused(plural, "not a list")
    found = [i for i, e in enumerate(entries) if isinstance(e, dict) and e.get("name") == name]
    if len(found) != 1:
        raise Refused(plural, f"the context's {key} is not defined exactly once")
    at = f"{plural}[{found[0]}]"
    _only(entries[found[0]], {"name", key}, f"{at}.")
    section = entries[found[0]].get(key)
    if not isinstance(section, dict):
        raise Refused(f"{at}.{key}", "not a mapping")
    return at, section


def _server(value: Any, field: str, denied: Sequence[addresses.Network]) -> tuple[str, str, int]:
    if not isinstance(value, str):
        raise Refused(field, "missing or not a string")
    try:
        url = urllib.parse.urlsplit(value.strip())
        port = url.port or 443
    except ValueError:
        raise Refused(field, "not a URL") from None
    if url.scheme != "https":
        raise Refused(field, "not an https:// URL")
    if not url.hostname:
        raise Refused(field, "has no host")
    if url.username is not None or url.password is not None or url.query or url.fragment:
        raise Refused(field, "only https://host[:port][/path] is allowed")
    host = url.hostname
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    if ip is not None and addresses.denied(ip, denied):
        raise Refused(
            field, f"the address {ip} is in a denied network (TETHER_RUNTIME_DENIED_NETWORKS)"
        )
    netloc = f"[{host}]" if ip is not None and ip.version == 6 else host
    return f"https://{netloc}:{port}{url.path.rstrip('/')}", host, port


def _pem_data(section: dict[str, Any], key: str, prefix: str) -> bytes | None:
    value = section.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise Refused(f"{prefix}{key}", "not base64 text")
    try:
        raw = base64.b64decode(value, validate=False)
    except (binascii.Error, ValueError):
        raise Refused(f"{prefix}{key}", "not base64") from None
    if b"-----BEGIN " not in raw:
        raise Refused(f"{prefix}{key}", "not PEM")
    return raw
