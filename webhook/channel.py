"""The local channel from the gunicorn workers that answer admission to the forwarder process.

A Unix datagram socket pair made by the gunicorn master before it forks anything: the
workers inherit the sending end, the forwarder process (``webhook.forwardproc``) the
receiving one. It has no name (no path, no port), so nothing but those processes can send
into it: a pod of the runtime cannot inject keys. It is bounded by the kernel (the
receiver's datagram queue and socket buffer); a worker's send never blocks: a full channel
is the admission outcome ``overflowed`` (the poller finds the change).

One datagram per forwarded admission: the queue entry's fields as a small JSON array
(``encode``/``decode``, pure), the Watch by name (the forwarder resolves it among the
Watches in force there; one no longer in force is dropped as ``out-of-scope``).
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from tether.base import tracing
from tether.wire import watches
from webhook import keyqueue

MAX_DATAGRAM = 4096  # names are at most 253 characters: an entry takes well under 1 KiB
BUFFER_BYTES = 1024 * 1024


class DecodeError(ValueError):
    """A datagram that is not a queue entry."""


def pair() -> tuple[socket.socket, socket.socket]:
    """(sending end, receiving end): unnamed, bounded, the sender non-blocking."""
    send, recv = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    for s in (send, recv):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, BUFFER_BYTES)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, BUFFER_BYTES)
    send.setblocking(False)
    recv.shutdown(socket.SHUT_WR)
    send.shutdown(socket.SHUT_RD)
    return send, recv


def encode(item: keyqueue.Item) -> bytes:
    return orjson.dumps(
        [
            item.namespace,
            item.name,
            item.uid,
            item.operation,
            item.old_resource_version,
            item.observed_at,
            item.admitted,  # CLOCK_MONOTONIC: one clock for every process of the host
            None if item.trace is None else item.trace.header(),
            item.watch.name,
        ]
    )


def decode(
    data: bytes, watch_of: Callable[[str], watches.Watch | None]
) -> tuple[keyqueue.Item | None, str]:
    """The entry a datagram carries and its Watch's name; the entry is None when that
    Watch is not in force here (``watch_of``). Raises ``DecodeError`` for anything else."""
    try:
        doc: Any = orjson.loads(data)
    except ValueError:
        raise DecodeError("not JSON") from None
    if not isinstance(doc, list) or len(doc) != 9:
        raise DecodeError("not an entry")
    ns, name, uid, op, old_rv, observed, admitted, trace, watch = doc
    if not all(isinstance(v, str) for v in (ns, name, uid, op, old_rv, watch)):
        raise DecodeError("not an entry")
    if op not in ("CREATE", "UPDATE", "DELETE"):
        raise DecodeError("not an operation")
    if not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in (observed, admitted)
    ):
        raise DecodeError("not an entry")
    if trace is not None and not isinstance(trace, str):
        raise DecodeError("not an entry")
    w = watch_of(watch)
    if w is None:
        return None, watch
    return (
        keyqueue.Item(
            namespace=ns,
            name=name,
            uid=uid,
            operation=op,
            old_resource_version=old_rv,
            observed_at=float(observed),
            admitted=float(admitted),
            trace=None if trace is None else tracing.parse(trace),
            watch=w,
        ),
        watch,
    )


class Sender:
    """The workers' end: ``put`` hands an entry to the forwarder process, never waiting
    (``webhook.services.Services.queue`` in a gunicorn worker)."""

    def __init__(self, sock: socket.socket, maxsize: int) -> None:
        self._sock = sock
        self.maxsize = maxsize  # the forwarder's queue (the overflow log names it)

    def put(self, item: keyqueue.Item) -> keyqueue.PutResult:
        try:
            self._sock.send(encode(item))
        except OSError:  # full (EAGAIN), or the forwarder is gone: left to the poller
            return "overflowed"
        return "enqueued"

    def __len__(self) -> int:
        return 0  # what waits is the forwarder process's (tether_webhook_queue_depth)


def in_force_by_name(
    in_force: Callable[[], Sequence[watches.Watch]],
) -> Callable[[str], watches.Watch | None]:
    def watch_of(name: str) -> watches.Watch | None:
        return next((w for w in in_force() if w.name == name), None)

    return watch_of
