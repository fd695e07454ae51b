"""The session cookie's value: who signed in, until when, and a session ID, sealed with
AES-256-GCM under a key every replica holds (a mounted Secret), so that any replica, and the
same replica after a restart, reads it, and nobody without the key can read or make one.

Value: ``v1.<key id>.<base64url(nonce || ciphertext)>``; the plaintext is compact JSON
(``s`` session ID, ``u`` user, ``i`` uid, ``g`` groups, ``x`` extra, ``t`` issued, ``e``
expires: seconds since the epoch), the associated data names the format and the key id, the
nonce is 12 random bytes per cookie. The key id is 8 hex digits of a SHA-256 of the key (it
picks the key without trying each; it says nothing usable about the key).

Keys (``parse_keys``): a file of one or more keys, one a line, each 32 random bytes in
base64 (``openssl rand -base64 32``); the first seals new cookies, every one opens them. To
rotate: put a new key on the first line and keep the old one below it for one session
lifetime, then drop it. A cookie sealed with a key no longer listed is worth nothing.

Never holds the token. ``open_`` reads only values up to ``MAX_VALUE`` characters and returns
None for anything it cannot open (wrong key, altered, expired, malformed): a forged or stale
cookie is no session, nothing else."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from collections.abc import Sequence
from typing import Any, NamedTuple

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from admin import auth

FORMAT = "v1"
KEY_BYTES = 32
NONCE_BYTES = 12
MAX_KEYS = 4
# a browser keeps 4,096 bytes of a cookie, its name and attributes included
MAX_VALUE = 3600


class TooLarge(ValueError):
    """The identity does not fit a cookie (too many groups or extras)."""


class Claims(NamedTuple):
    sid: str
    who: auth.Identity
    issued: float  # seconds since the epoch
    expires: float


def parse_keys(text: str, source: str) -> tuple[bytes, ...]:
    """The keys of a key file (``source`` names it in errors; never a key's content)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        raise ValueError(f"{source}: no key (one a line: openssl rand -base64 32)")
    if len(lines) > MAX_KEYS:
        raise ValueError(f"{source}: {len(lines)} keys, at most {MAX_KEYS}")
    keys = []
    for n, line in enumerate(lines, 1):
        try:
            key = base64.b64decode(line, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"{source}: line {n} is not base64") from None
        if len(key) != KEY_BYTES:
            raise ValueError(f"{source}: line {n} holds {len(key)} bytes, not {KEY_BYTES}")
        keys.append(key)
    return tuple(keys)


def read_keys(path: str) -> tuple[bytes, ...]:
    with open(path, encoding="ascii", errors="replace") as f:
        return parse_keys(f.read(4096), path)


def ephemeral() -> tuple[bytes, ...]:
    """A key of this process alone (no key file set): sessions end with the process."""
    return (os.urandom(KEY_BYTES),)


def key_id(key: bytes) -> str:
    return hashlib.sha256(b"tether-admin-session-key\0" + key).hexdigest()[:8]


def _aad(kid: str) -> bytes:
    return f"tether-admin-session/{FORMAT}/{kid}".encode()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def seal(key: bytes, claims: Claims) -> str:
    """The cookie value of ``claims``; ``TooLarge`` when it would not fit a cookie."""
    who = claims.who
    plain = json.dumps(
        {
            "s": claims.sid,
            "u": who.user,
            "i": who.uid,
            "g": list(who.groups),
            "x": {k: list(v) for k, v in who.extra},
            "t": round(claims.issued, 3),
            "e": round(claims.expires, 3),
        },
        separators=(",", ":"),
    ).encode()
    kid = key_id(key)
    nonce = os.urandom(NONCE_BYTES)
    value = f"{FORMAT}.{kid}.{_b64(nonce + AESGCM(key).encrypt(nonce, plain, _aad(kid)))}"
    if len(value) > MAX_VALUE:
        raise TooLarge(
            f"the identity ({len(who.groups)} groups) makes a cookie of {len(value)} "
            f"characters, more than {MAX_VALUE}"
        )
    return value


def _strings(value: Any) -> tuple[str, ...] | None:
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        return None
    return tuple(value)


def _claims(data: Any) -> Claims | None:
    if not isinstance(data, dict):
        return None
    sid, user, uid = data.get("s"), data.get("u"), data.get("i")
    groups, extra = _strings(data.get("g")), data.get("x")
    issued, expires = data.get("t"), data.get("e")
    if not (isinstance(sid, str) and isinstance(user, str) and isinstance(uid, str)):
        return None
    if groups is None or not isinstance(extra, dict):
        return None
    if not all(isinstance(t, int | float) and not isinstance(t, bool) for t in (issued, expires)):
        return None
    pairs = []
    for k, v in extra.items():
        values = _strings(v)
        if values is None:
            return None
        pairs.append((str(k), values))
    who = auth.Identity(user, uid, groups, tuple(sorted(pairs)))
    return Claims(sid, who, float(issued), float(expires))  # type: ignore[arg-type]


def open_(keys: Sequence[bytes], value: str, now: float) -> Claims | None:
    """The claims of a cookie value sealed by one of ``keys`` that has not expired at
    ``now``, else None."""
    if not value or len(value) > MAX_VALUE:
        return None
    fmt, _, rest = value.partition(".")
    kid, _, sealed = rest.partition(".")
    if fmt != FORMAT or not sealed:
        return None
    key = next((k for k in keys if key_id(k) == kid), None)
    if key is None:
        return None
    try:
        raw = _unb64(sealed)
        if len(raw) <= NONCE_BYTES:
            return None
        plain = AESGCM(key).decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], _aad(kid))
        claims = _claims(json.loads(plain))
    except (InvalidTag, ValueError, binascii.Error):
        return None
    if claims is None or claims.expires <= now:
        return None
    return claims
