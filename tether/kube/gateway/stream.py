"""Streaming watches: ``Kube.watch`` reads the API server's chunked answer event by event.

    for event in kcp.watch(RECORDS, ns, label_selector="a=b", resource_version="1234",
                           timeout_seconds=300):
        event["type"], event["object"]       # ADDED MODIFIED DELETED BOOKMARK, as served

Bounds: the answer is read in pieces of at most ``CHUNK`` bytes; a line (one event) larger
than ``max_event_bytes`` stops the watch with ``errors.TooLarge`` before more than the bound
is held; ``read_timeout`` bounds the silence between two pieces (the server ends the watch
after ``timeout_seconds``; bookmarks and events come in between). A ``stop`` event, when
given, closes the connection within ``STOP_POLL`` seconds of being set, so a caller blocked
in the iteration returns (one small thread per open watch waits for it).

Errors: HTTP 410, or an ``ERROR`` event whose Status has code 410 (the resourceVersion is
older than the server's history), raise ``errors.Gone``; another ``ERROR`` event raises
``errors.GatewayError`` (``Unavailable`` for a 5xx or 429 code) with the Status's message
(bounded); a broken connection raises ``errors.Unavailable``. Closing the generator (the
caller stops iterating) closes the connection: a watch's connection is never reused.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

from tether.base import logs
from tether.kube.gateway import bounded, errors

CHUNK = 64 * 1024
MAX_EVENT_BYTES = 8 * 1024 * 1024
STOP_POLL = 0.5


def query(*, resource_version: str, timeout_seconds: int, bookmarks: bool) -> list[tuple[str, str]]:
    """The watch parameters of a list query (pure)."""
    out = [("watch", "true"), ("timeoutSeconds", str(int(timeout_seconds)))]
    if resource_version:
        out.append(("resourceVersion", resource_version))
    if bookmarks:
        out.append(("allowWatchBookmarks", "true"))
    return out


def pieces(resp: Any) -> Iterator[bytes]:
    """The body as it arrives, in pieces of at most ``CHUNK`` bytes (never waiting for a
    piece to fill: a chunked answer yields what each HTTP chunk holds)."""
    if getattr(resp, "chunked", False) and hasattr(resp, "read_chunked"):
        yield from resp.read_chunked(CHUNK, decode_content=True)
        return
    while True:
        piece = resp.read1(CHUNK) if hasattr(resp, "read1") else resp.read(CHUNK)
        if not piece:
            return
        yield piece


def lines(chunks: Iterator[bytes], max_bytes: int, what: str) -> Iterator[bytes]:
    """Complete lines of ``chunks`` (pure), each at most ``max_bytes`` (else
    ``errors.TooLarge``: nothing more than the bound and one piece is held). A last line
    without its newline is dropped (the stream broke inside it)."""
    buf = bytearray()
    for chunk in chunks:
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                buf += chunk[start:]
                if len(buf) > max_bytes:
                    raise errors.TooLarge(
                        f"{what}: an event is larger than the {max_bytes} bytes allowed"
                    )
                break
            buf += chunk[start:end]
            if len(buf) > max_bytes:
                raise errors.TooLarge(
                    f"{what}: an event is larger than the {max_bytes} bytes allowed"
                )
            if buf.strip():
                yield bytes(buf)
            buf.clear()
            start = end + 1


def event_of(line: bytes, what: str) -> dict[str, Any]:
    """One watch event (pure); raises for an ``ERROR`` event or a line that is not one."""
    try:
        event = json.loads(line)
    except ValueError:
        raise errors.Unavailable(f"{what}: an event is not JSON") from None
    if (
        not isinstance(event, dict)
        or not isinstance(event.get("type"), str)
        or not isinstance(event.get("object"), dict)
    ):
        raise errors.Unavailable(f"{what}: an event is not a watch event")
    if event["type"] == "ERROR":
        status = event["object"]
        code = status.get("code")
        message = status.get("message")
        text = f"{what}: {logs.bounded(message, 300)}" if isinstance(message, str) else what
        code = code if isinstance(code, int) else 0
        if code == 410:
            raise errors.Gone(text, 410)
        if code >= 500 or code == 429:
            raise errors.Unavailable(text, code)
        raise errors.GatewayError(text, code or None)
    return event


@contextlib.contextmanager
def closed_on(stop: threading.Event | None, close: Callable[[], None]) -> Iterator[None]:
    """While inside, ``close()`` is called (once) if ``stop`` gets set."""
    if stop is None:
        yield
        return
    done = threading.Event()

    def wait() -> None:
        while not done.is_set():
            if stop.wait(STOP_POLL):
                if not done.is_set():
                    close()
                return

    t = threading.Thread(target=wait, name="tether-watch-stop", daemon=True)
    t.start()
    try:
        yield
    finally:
        done.set()


def shutdown(resp: Any) -> None:
    """Break the answer's connection from another thread (a blocked read returns)."""
    conn = getattr(resp, "connection", None)
    sock = getattr(conn, "sock", None)
    with contextlib.suppress(Exception):
        if sock is not None:
            sock.shutdown(2)  # socket.SHUT_RDWR


def events(
    resp: Any, *, max_event_bytes: int, what: str, stop: threading.Event | None = None
) -> Iterator[dict[str, Any]]:
    """The events of an open watch answer ``resp`` (2xx, ``preload_content=False``); the
    connection is closed when the generator ends, fails or is closed."""
    try:
        with closed_on(stop, lambda: shutdown(resp)):
            for line in lines(pieces(resp), max_event_bytes, what):
                if stop is not None and stop.is_set():
                    return
                yield event_of(line, what)
    except errors.GatewayError:
        raise
    except errors.TRANSPORT as e:
        if stop is not None and stop.is_set():
            return
        raise errors.Unavailable(f"{what}: the watch broke ({type(e).__name__})") from e
    finally:
        bounded.discard(resp)
