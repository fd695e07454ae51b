"""Certificate files that are re-read when they change (Secrets are updated in place).

``Watched`` holds a value built from some files (an ``ssl.SSLContext``, a
``requests.Session``) and rebuilds it when a file's (inode, size, mtime) changes, checked
at most every ``check_interval`` seconds on use. A rebuild that fails (e.g. a half-written
rotation: new certificate, old key) keeps the previous value and is retried at the next
check, so a running process never loses a working TLS setup; a first load that fails
raises ``LoadError``. Error messages name the files, never their content.
"""

from __future__ import annotations

import os
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
Signature = tuple[tuple[int, int, int], ...]


class LoadError(RuntimeError):
    """The files could not be loaded; the message names them and the reason."""


def signature(paths: Sequence[str]) -> Signature:
    out = []
    for p in paths:
        try:
            st = os.stat(p)  # follows the ..data symlink of a mounted Secret
            out.append((st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError:
            out.append((0, -1, 0))
    return tuple(out)


class Watched(Generic[T]):
    def __init__(
        self,
        paths: Sequence[str],
        loader: Callable[[], T],
        *,
        check_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.paths = tuple(paths)
        self._loader = loader
        self._interval = check_interval
        self._clock = clock
        self._lock = threading.Lock()
        self._value: T | None = None
        self._sig: Signature | None = None
        self._checked = float("-inf")
        self.last_error = ""
        self.reloads = 0

    def _refresh(self) -> None:
        sig = signature(self.paths)
        if sig == self._sig and self._value is not None:
            return
        try:
            value = self._loader()
        except (OSError, ValueError, ssl.SSLError) as e:
            self.last_error = f"cannot load {', '.join(self.paths)}: {type(e).__name__}: {e}"
            return
        if self._value is not None:
            self.reloads += 1
        self._value, self._sig, self.last_error = value, sig, ""

    def get(self) -> T:
        now = self._clock()
        with self._lock:
            if now - self._checked >= self._interval or self._value is None:
                self._checked = now
                self._refresh()
            if self._value is None:
                raise LoadError(self.last_error or f"cannot load {', '.join(self.paths)}")
            return self._value

    def loaded(self) -> bool:
        try:
            self.get()
        except LoadError:
            return False
        return True

    def close(self) -> None:
        with self._lock:
            self._value = None
            self._sig = None


def server_context(
    cert_file: str, key_file: str, client_ca_file: str | None = None
) -> ssl.SSLContext:
    """A TLS 1.2+ server context; requires client certificates when ``client_ca_file``."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    if client_ca_file:
        ctx.load_verify_locations(client_ca_file)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx
