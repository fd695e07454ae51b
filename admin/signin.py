"""Two decisions of signing in and out (pure): where the browser may be sent afterwards, and
whether the form was posted by the admin's own pages.

``safe_next``: ``next`` is accepted only as the path of one of the admin's pages (the caller
says which paths are pages: the app matches them against its own routes), judged after the
path is fully percent-decoded, so no encoding, tab, backslash or scheme can turn it into
another site (``/%09/evil.example``, ``//evil.example``, ``/\\evil.example``,
``%2F%2Fevil.example``, ``https://evil.example``). What is returned is rebuilt from the
decoded parts (path re-encoded, query re-encoded pair by pair, no fragment); anything else
is ``/fleet``.

``cross_site``: a sign-in or sign-out must come from the admin's own origin: a
``Sec-Fetch-Site`` other than ``same-origin`` or an ``Origin`` other than the admin's own is
refused (a missing header is not: clients other than browsers send neither, and they cannot
carry a victim's cookie).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable

DEFAULT = "/fleet"
MAX_NEXT = 2000
MAX_QUERY_PAIRS = 20
_DECODE_ROUNDS = 4
_DEFAULT_PORTS = {"https": "443", "http": "80"}


def _clean(text: str) -> bool:
    """Printable ASCII without space or backslash."""
    return text.isascii() and all(" " < c < "\x7f" and c != "\\" for c in text)


def _decoded(path: str) -> str | None:
    """``path`` percent-decoded until nothing changes (None if it keeps changing)."""
    for _ in range(_DECODE_ROUNDS):
        once = urllib.parse.unquote(path, errors="strict")
        if once == path:
            return path
        path = once
    return None


def safe_next(raw: str, is_page: Callable[[str], bool]) -> str:
    """``raw`` rebuilt if its path is a page of the admin (``is_page``), else ``/fleet``."""
    if not raw or len(raw) > MAX_NEXT or not _clean(raw):
        return DEFAULT
    try:
        parts = urllib.parse.urlsplit(raw)
        path = _decoded(parts.path)
        pairs = urllib.parse.parse_qsl(
            parts.query, keep_blank_values=True, max_num_fields=MAX_QUERY_PAIRS
        )
    except (ValueError, UnicodeDecodeError):
        return DEFAULT
    if parts.scheme or parts.netloc or path is None or not _clean(path):
        return DEFAULT
    if not path.startswith("/") or path.startswith("//"):
        return DEFAULT
    if any(segment in (".", "..") for segment in path.split("/")):
        return DEFAULT
    if not is_page(path):
        return DEFAULT
    query = urllib.parse.urlencode(pairs)
    return urllib.parse.quote(path, safe="/") + ("?" + query if query else "")


def origin_of(url: str) -> str | None:
    """``scheme://host[:port]`` lower-cased, the scheme's default port left out; None when
    ``url`` is no origin (``null``, a path, credentials, a bad port)."""
    try:
        parts = urllib.parse.urlsplit(url.strip().lower())
        port = parts.port
    except ValueError:
        return None
    host = parts.hostname
    if (
        parts.scheme not in _DEFAULT_PORTS
        or not host
        or parts.username is not None
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
    ):
        return None
    if ":" in host:
        host = f"[{host}]"
    if port is None or str(port) == _DEFAULT_PORTS[parts.scheme]:
        return f"{parts.scheme}://{host}"
    return f"{parts.scheme}://{host}:{port}"


def cross_site(origin: str | None, fetch_site: str | None, own: str) -> str | None:
    """Why a sign-in/sign-out with these headers is not the admin's own, or None."""
    if fetch_site is not None and fetch_site.strip().lower() != "same-origin":
        return (
            f"the request came from another site (Sec-Fetch-Site: {fetch_site[:32]}); "
            "sign in and out from the admin pages themselves"
        )
    theirs = origin_of(origin) if origin is not None else None
    if origin is not None and (theirs is None or theirs != origin_of(own)):
        return (
            f"the request came from another origin ({origin[:100]}, not {own}); "
            "sign in and out from the admin pages themselves"
        )
    return None
