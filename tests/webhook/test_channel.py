"""The local channel from the workers to the forwarder process (``webhook.channel``): entries
survive the trip, anything else is refused, it is bounded, and nothing outside the
processes that inherit it can reach it."""

from __future__ import annotations

import socket

import pytest

from tether.base import tracing
from tether.wire import conversion, watches
from webhook import channel, keyqueue


def _item(name: str = "cfg", **kw: object) -> keyqueue.Item:
    base: dict[str, object] = {
        "namespace": "team-a",
        "name": name,
        "uid": "u-1",
        "operation": "UPDATE",
        "old_resource_version": "41",
        "observed_at": 1_800_000_000.25,
        "admitted": 123.5,
    }
    return keyqueue.Item(**{**base, **kw})  # type: ignore[arg-type]


def _builtin(name: str) -> watches.Watch | None:
    return conversion.BUILTIN if name == conversion.BUILTIN_NAME else None


def test_an_entry_survives_the_trip() -> None:
    trace = tracing.TraceParent(0x1234, 0x56, True)
    item = _item(trace=trace)
    got, watch = channel.decode(channel.encode(item), _builtin)
    assert watch == conversion.BUILTIN_NAME
    assert got == item  # every field, the admission's monotonic time and the trace too


def test_an_entry_of_a_watch_not_in_force_is_none() -> None:
    got, watch = channel.decode(channel.encode(_item()), lambda name: None)
    assert got is None and watch == conversion.BUILTIN_NAME


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xff\xfe",
        b"{}",
        b"[]",
        b'["ns","n","u","UPDATE","1",1.0,2.0,null]',  # a field short
        b'["ns","n","u","PATCH","1",1.0,2.0,null,"w"]',  # no such operation
        b'["ns","n","u","UPDATE","1",true,2.0,null,"w"]',  # a bool for a time
        b'["ns",7,"u","UPDATE","1",1.0,2.0,null,"w"]',
        b'["ns","n","u","UPDATE","1",1.0,2.0,{"x":1},"w"]',
    ],
)
def test_anything_else_is_refused(data: bytes) -> None:
    with pytest.raises(channel.DecodeError):
        channel.decode(data, _builtin)


def test_the_channel_has_no_name_and_is_bounded() -> None:
    send, recv = channel.pair()
    try:
        # unnamed: no path in any filesystem, no abstract name, no port; only a process
        # that inherits one of these descriptors can use it (a pod cannot reach it)
        assert send.family == recv.family == socket.AF_UNIX
        assert send.getsockname() == recv.getsockname() == ""
        sender = channel.Sender(send, maxsize=10)
        outcomes = [sender.put(_item(f"cm-{i}")) for i in range(100_000)]
        assert outcomes[0] == "enqueued"
        assert outcomes[-1] == "overflowed"  # full: the worker never waits
        taken = 0
        recv.setblocking(False)
        while True:
            try:
                got, _ = channel.decode(recv.recv(channel.MAX_DATAGRAM), _builtin)
            except BlockingIOError:
                break
            assert got is not None and got.name == f"cm-{taken}"  # in order, none mixed
            taken += 1
        assert taken == outcomes.count("enqueued") > 0
    finally:
        send.close()
        recv.close()


def test_a_gone_forwarder_is_an_overflow_not_an_error() -> None:
    send, recv = channel.pair()
    recv.close()
    try:
        assert channel.Sender(send, maxsize=10).put(_item()) == "overflowed"
    finally:
        send.close()
