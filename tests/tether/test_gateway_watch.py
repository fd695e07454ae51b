"""Streaming watches (``Kube.watch``, ``tether.kube.gateway.stream``): the line splitting and its
bound and the ERROR events as plain data; on a real KCP plane: events as served, a bookmark,
410 for a version the server no longer holds, an HTTP error, and closing a watch early
releasing its connection."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator

import pytest

from testing import consumerenv, controlplane, localnet
from tether.kube import apitypes, gateway
from tether.kube.gateway import stream

pytestmark = pytest.mark.processes  # starts processes of its own (testing/tiers.py)

RCM = apitypes.RUNTIME_CONFIGMAPS


def test_lines_are_split_across_pieces_and_a_broken_last_line_is_dropped() -> None:
    pieces = iter([b'{"a"', b':1}\n{"b":2}\n\n{"c"', b':3}\n{"d"'])
    assert list(stream.lines(pieces, 100, "w")) == [b'{"a":1}', b'{"b":2}', b'{"c":3}']


@pytest.mark.parametrize(
    "pieces",
    [
        [b"x" * 40],  # one piece over the bound, no newline yet
        [b"x" * 20, b"x" * 20, b"\n"],  # grown over the bound across pieces
        [b"x" * 33 + b"\n"],  # a complete line over the bound
    ],
)
def test_a_line_over_the_bound_is_too_large(pieces: list[bytes]) -> None:
    with pytest.raises(gateway.TooLarge, match="larger than the 32 bytes allowed"):
        list(stream.lines(iter(pieces), 32, "watch x"))
    assert list(stream.lines(iter([b"y" * 32 + b"\n"]), 32, "w")) == [b"y" * 32]


def ev(kind: str, obj: object) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode()


def test_error_events_are_gateway_errors_with_the_status_message() -> None:
    gone = ev("ERROR", {"kind": "Status", "code": 410, "message": "too old resource version: 1"})
    with pytest.raises(gateway.Gone, match="watch x: too old resource version: 1"):
        stream.event_of(gone, "watch x")
    with pytest.raises(gateway.Unavailable):
        stream.event_of(ev("ERROR", {"code": 500, "message": "etcd"}), "w")
    with pytest.raises(gateway.GatewayError) as got:
        stream.event_of(ev("ERROR", {"code": 403, "message": "m" * 1000}), "w")
    assert got.value.status == 403 and len(str(got.value)) <= 300
    for bad in (b"not json", b"[]", ev("ADDED", "a string"), b'{"object": {}}'):
        with pytest.raises(gateway.Unavailable):
            stream.event_of(bad, "w")
    assert stream.event_of(ev("ADDED", {"a": 1}), "w") == {"type": "ADDED", "object": {"a": 1}}


def test_watch_query() -> None:
    assert stream.query(resource_version="7", timeout_seconds=30, bookmarks=True) == [
        ("watch", "true"),
        ("timeoutSeconds", "30"),
        ("resourceVersion", "7"),
        ("allowWatchBookmarks", "true"),
    ]
    assert stream.query(resource_version="", timeout_seconds=5, bookmarks=False) == [
        ("watch", "true"),
        ("timeoutSeconds", "5"),
    ]


# -- on a real plane -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def own() -> Iterator[tuple[controlplane.ControlPlane, gateway.Kube]]:
    with consumerenv.own_kcp() as got:
        yield got


@pytest.fixture
def kcp(own: tuple[controlplane.ControlPlane, gateway.Kube]) -> gateway.Kube:
    return own[1]


def test_events_as_served_and_a_bookmark_before_the_end(kcp: gateway.Kube) -> None:
    ns = consumerenv.fresh_namespace(kcp)
    store = consumerenv.Store(kcp, ns, "w")
    elsewhere = consumerenv.Store(kcp, consumerenv.fresh_namespace(kcp), "w")
    rv = kcp.list(RCM, ns)["metadata"]["resourceVersion"]
    done = threading.Event()

    def write() -> None:
        time.sleep(0.3)  # (a write before the watch opens is served too: from rv)
        store.put("rt-1", "team", "a")
        store.put("rt-1", "team", "a", data={"k": "v"})
        store.remove("rt-1", "team", "a")
        for i in range(40):  # the KCP's revision moves on (the server bookmarks only then)
            if done.wait(0.5):
                return
            elsewhere.put("rt-1", "team", f"x{i}")

    threading.Thread(target=write, daemon=True).start()
    try:
        t0 = time.monotonic()
        got = list(kcp.watch(RCM, ns, resource_version=rv, timeout_seconds=6))
        took = time.monotonic() - t0
        for _ in range(2):  # a loaded machine may miss the bookmark of one watch
            if got[3:]:
                break
            got += list(kcp.watch(RCM, ns, resource_version=rv, timeout_seconds=6))[3:]
    finally:
        done.set()
    names = [(e["type"], e["object"].get("spec", {}).get("name")) for e in got]
    assert names[:3] == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
    assert 5.0 <= took < 10.0  # held open until the server's timeout
    revisions = [int(e["object"]["metadata"]["resourceVersion"]) for e in got]
    assert names[3:] and all(kind == "BOOKMARK" for kind, _ in names[3:])
    assert max(revisions[3:]) > revisions[2]  # a bookmark: the revision moved on elsewhere


def test_a_version_the_server_no_longer_holds_is_gone(kcp: gateway.Kube) -> None:
    ns = consumerenv.fresh_namespace(kcp)
    with pytest.raises(gateway.Gone, match="watch runtimeconfigmaps: too old resource version"):
        next(iter(kcp.watch(RCM, ns, resource_version="1", timeout_seconds=5)))


def test_an_http_error_is_raised_at_the_first_next(kcp: gateway.Kube) -> None:
    missing = apitypes.Resource("nothing.example.com", "v1", "nothings")
    events = kcp.watch(missing, "default", resource_version="0", timeout_seconds=5)
    with pytest.raises(gateway.NotFound, match="watch nothings: HTTP 404"):
        next(iter(events))


def test_a_closed_watch_releases_its_connection_and_stop_ends_a_blocked_one(
    kcp: gateway.Kube,
) -> None:
    ns = consumerenv.fresh_namespace(kcp)
    store = consumerenv.Store(kcp, ns, "w")
    store.put("rt-1", "team", "a")
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        events = kcp.watch(RCM, ns, resource_version="0", timeout_seconds=60)
        # the server may send a bookmark before the initial ADDED (seen under load)
        first = next(e for e in events if e["type"] != "BOOKMARK")
        assert first["type"] == "ADDED"  # then the caller stops iterating
        events.close()
    assert len(os.listdir("/proc/self/fd")) <= before + 2
    stop = threading.Event()
    rv = kcp.list(RCM, ns)["metadata"]["resourceVersion"]
    threading.Timer(0.5, stop.set).start()
    t0 = time.monotonic()
    assert list(kcp.watch(RCM, ns, resource_version=rv, timeout_seconds=60, stop=stop)) == []
    assert time.monotonic() - t0 < 0.5 + stream.STOP_POLL + 1.0


def test_an_event_over_the_bound_stops_the_watch(kcp: gateway.Kube) -> None:
    ns = consumerenv.fresh_namespace(kcp)
    store = consumerenv.Store(kcp, ns, "w")
    store.put("rt-1", "team", "big", pad=10_000)
    with pytest.raises(gateway.TooLarge, match="an event is larger than the 8192 bytes"):
        list(kcp.watch(RCM, ns, resource_version="0", timeout_seconds=5, max_event_bytes=8192))


def test_a_runtime_gateway_watches_too(own: tuple[controlplane.ControlPlane, gateway.Kube]) -> None:
    plane, kcp = own
    ns = consumerenv.fresh_namespace(kcp)
    kcp.create(gateway.CONFIGMAPS, ns, {"metadata": {"name": "cm"}, "data": {"k": "v"}})
    limits = gateway.Limits(max_bytes=1024 * 1024, max_connections=2, denied=localnet.DENIED)
    runtime = gateway.from_runtime_kubeconfig(plane.kubeconfig.read_bytes(), limits, timeout=2.0)
    try:
        events = runtime.watch(gateway.CONFIGMAPS, ns, resource_version="0", timeout_seconds=5)
        first = next(events)
        events.close()
        assert first["type"] == "ADDED" and first["object"]["metadata"]["name"] == "cm"
    finally:
        runtime.close()
