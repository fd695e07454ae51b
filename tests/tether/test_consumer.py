"""The consumer library on a real KCP plane of its own (its API server is restarted and its
etcd compacted here): list then watch, order per key, deletions, resume from a saved
position, 410 → relist, the API server restarted mid-stream, the bounds."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from testing import consumerenv, controlplane
from testing.consumerenv import Collector, Store, compact, synced
from tether.kube import gateway
from tether.runtime import consumer

pytestmark = pytest.mark.processes  # starts processes of its own (testing/tiers.py)

WATCH = "configuration"


@pytest.fixture(scope="module")
def own() -> Iterator[tuple[controlplane.ControlPlane, gateway.Kube]]:
    with consumerenv.own_kcp() as got:
        yield got


@pytest.fixture
def plane(own: tuple[controlplane.ControlPlane, gateway.Kube]) -> controlplane.ControlPlane:
    return own[0]


@pytest.fixture
def kcp(own: tuple[controlplane.ControlPlane, gateway.Kube]) -> gateway.Kube:
    return own[1]


@pytest.fixture
def ns(kcp: gateway.Kube) -> str:
    return consumerenv.fresh_namespace(kcp)


def make(kcp: gateway.Kube, ns: str, **kw: object) -> consumer.Consumer:
    kw.setdefault("watch_seconds", 30)
    return consumer.Consumer(kcp, namespace=ns, watch=WATCH, stop=threading.Event(), **kw)  # type: ignore[arg-type]


def keyed(changes: list[consumer.Change]) -> list[tuple[str, int, bool]]:
    return [(c.name, c.revision, c.live) for c in changes]


def assert_in_order(changes: list[consumer.Change]) -> None:
    """Per key the revisions never go down (a relist may repeat the last one)."""
    last: dict[str, int] = {}
    for c in changes:
        assert c.revision >= last.get(c.name, 0), (c.name, c.revision, last)
        last[c.name] = c.revision


def test_list_then_watch_in_order(kcp: gateway.Kube, ns: str) -> None:
    store = Store(kcp, ns, WATCH)
    r_a = store.put("rt-1", "team", "a", data={"k": "1"}, kyma="kyma-1")
    r_b = store.put("rt-1", "team", "b", data={"k": "2"}, kyma="kyma-1")
    Store(kcp, ns, "other").put("rt-1", "team", "x", kyma="kyma-1")  # another Watch's
    c = Collector(make(kcp, ns))
    try:
        c.wait(lambda evs: any(True for _ in synced(evs)))
        first = c.events()
        assert sorted(keyed(first[:2])) == [("a", r_a, True), ("b", r_b, True)]  # type: ignore[arg-type]
        assert all(
            isinstance(e, consumer.Change) and e.resync and e.kyma == "kyma-1" and e.watch == WATCH
            for e in first[:2]
        )
        assert first[2] == consumer.Synced(first[2].revision, False) and len(first) == 3
        assert first[0].record and first[0].record["data"] in ({"k": "1"}, {"k": "2"})  # type: ignore[union-attr]

        r_a2 = store.put("rt-1", "team", "a", data={"k": "3"}, kyma="kyma-1")
        r_c = store.put("rt-2", "team", "c", kyma="kyma-2")
        store.remove("rt-1", "team", "b")
        r_a3 = store.put("rt-1", "team", "a", data={"k": "4"}, kyma="kyma-1", deleted=True)
        c.wait(lambda evs: len(evs) >= 7)
        watched = c.changes()[2:]
        assert [(x.name, x.resync) for x in watched] == [
            ("a", False),
            ("c", False),
            ("b", False),
            ("a", False),
        ]
        assert watched[0].revision == r_a2 and watched[0].record["data"] == {"k": "3"}  # type: ignore[index]
        assert (
            watched[1].revision == r_c
            and watched[1].runtime_id == "rt-2"
            and watched[1].kyma == "kyma-2"
        )
        assert watched[2].record is None and not watched[2].live and watched[2].revision > r_c
        assert watched[3].revision == r_a3 and watched[3].record is not None and not watched[3].live
        assert c.source.position >= r_a3
    finally:
        c.stop()


def test_one_runtime_only(kcp: gateway.Kube, ns: str) -> None:
    store = Store(kcp, ns, WATCH)
    store.put("rt-1", "team", "a")
    store.put("rt-2", "team", "b")
    c = Collector(make(kcp, ns, runtime="rt-2"))
    try:
        c.wait(lambda evs: any(True for _ in synced(evs)))
        store.put("rt-1", "team", "a2")
        store.put("rt-2", "team", "b2")
        store.put("rt-2", "team", "last")  # written last: what came before arrives before it
        c.wait(lambda evs: any(getattr(e, "name", None) == "last" for e in evs))
        assert [(x.runtime_id, x.name) for x in c.changes()] == [
            ("rt-2", "b"),
            ("rt-2", "b2"),
            ("rt-2", "last"),
        ]
    finally:
        c.stop()


def test_resume_from_position_gets_exactly_what_followed(kcp: gateway.Kube, ns: str) -> None:
    store = Store(kcp, ns, WATCH)
    for i in range(3):
        store.put("rt-1", "team", f"k{i}")
    first = make(kcp, ns)
    got: list[consumer.Event] = []
    for ev in first:  # stop consuming mid-stream: after the list and two watch events
        got.append(ev)
        if isinstance(ev, consumer.Synced):
            store.put("rt-1", "team", "k0", data={"v": "1"})
            store.put("rt-1", "team", "k1", data={"v": "1"})
            store.put("rt-1", "team", "k2", data={"v": "1"})
        if len(got) == 6:
            break
    position = first.position
    assert [e.name for e in got[4:] if isinstance(e, consumer.Change)] == ["k0", "k1"]
    assert position == got[-1].revision
    later = [store.put("rt-1", "team", "k3"), store.put("rt-1", "team", "k0", data={"v": "2"})]
    store.remove("rt-1", "team", "k1")
    store.put("rt-1", "team", "last")  # written last: what came before arrives before it
    c = Collector(make(kcp, ns, since=position))
    try:
        c.wait(lambda evs: any(getattr(e, "name", None) == "last" for e in evs))
        evs = c.events()
        assert not list(synced(evs))  # no relist: the history still holds the position
        assert [(e.name, e.live, e.resync) for e in evs] == [  # type: ignore[union-attr]
            ("k2", True, False),
            ("k3", True, False),
            ("k0", True, False),
            ("k1", False, False),
            ("last", True, False),
        ]
        assert [e.revision for e in evs[1:3]] == later
        assert_in_order(c.changes())
    finally:
        c.stop()


def test_expired_history_relists_and_reports_what_is_gone(
    kcp: gateway.Kube, ns: str, plane: controlplane.ControlPlane
) -> None:
    store = Store(kcp, ns, WATCH)
    store.put("rt-1", "team", "a", kyma="kyma-1")
    store.put("rt-1", "team", "b", kyma="kyma-1")
    source = make(kcp, ns)
    c = Collector(source)
    c.wait(lambda evs: any(True for _ in synced(evs)))
    c.stop()
    store.remove("rt-1", "team", "b")
    r_c = store.put("rt-1", "team", "c", kyma="kyma-1")
    compact(plane)
    plane.stop_apiserver()  # its watch cache starts again at the current revision
    plane.start_apiserver()
    source.stop = threading.Event()  # iterate the same Consumer again: it resumes from position
    c2 = Collector(source)
    try:
        c2.wait(lambda evs: any(True for _ in synced(evs)), timeout=60)
        evs = c2.events()
        assert evs[-1] == consumer.Synced(evs[-1].revision, True)
        got = {(e.name, e.live) for e in evs[:-1]}  # type: ignore[union-attr]
        assert got == {("a", True), ("c", True), ("b", False)}
        gone = [e for e in evs if isinstance(e, consumer.Change) and e.name == "b"][0]
        assert gone.resync and gone.kyma == "kyma-1" and gone.record is None
        assert [e.revision for e in evs if isinstance(e, consumer.Change) and e.name == "c"] == [
            r_c
        ]
    finally:
        c2.stop()


def test_a_resume_from_a_compacted_revision_gets_the_whole_state(
    kcp: gateway.Kube, ns: str, plane: controlplane.ControlPlane
) -> None:
    store = Store(kcp, ns, WATCH)
    store.put("rt-1", "team", "a")
    store.put("rt-1", "team", "b")
    c = Collector(make(kcp, ns, since=1))
    try:
        c.wait(lambda evs: any(True for _ in synced(evs)), timeout=60)
        evs = c.events()
        assert evs[-1] == consumer.Synced(evs[-1].revision, True)
        assert sorted(e.name for e in evs[:-1]) == ["a", "b"]  # type: ignore[union-attr]
        assert all(e.resync for e in evs[:-1])  # type: ignore[union-attr]
    finally:
        c.stop()


def test_api_server_restart_mid_stream_loses_nothing(
    kcp: gateway.Kube, ns: str, plane: controlplane.ControlPlane
) -> None:
    store = Store(kcp, ns, WATCH)
    final: dict[str, int] = {}
    for i in range(5):
        final[f"k{i}"] = store.put("rt-1", "team", f"k{i}")
    c = Collector(make(kcp, ns))
    try:
        c.wait(lambda evs: any(True for _ in synced(evs)))
        final["k0"] = store.put("rt-1", "team", "k0", data={"v": "1"})
        plane.stop_apiserver()
        plane.start_apiserver()
        final["k1"] = controlplane.retry_busy(
            lambda: store.put("rt-1", "team", "k1", data={"v": "2"})
        )
        store.remove("rt-1", "team", "k2")
        final.pop("k2")
        final["k5"] = store.put("rt-1", "team", "k5")

        def converged(evs: list[consumer.Event]) -> bool:
            state: dict[str, int] = {}
            for e in evs:
                if isinstance(e, consumer.Change):
                    if e.record is None:
                        state.pop(e.name, None)
                    else:
                        state[e.name] = e.revision
            return state == final

        c.wait(converged, timeout=90)
        assert_in_order(c.changes())
        assert c.source.watches >= 2
    finally:
        c.stop()


def test_an_event_over_the_bound_stops_the_consumer(kcp: gateway.Kube, ns: str) -> None:
    store = Store(kcp, ns, WATCH)
    c = Collector(make(kcp, ns, max_event_bytes=4096))
    try:
        c.wait(lambda evs: any(True for _ in synced(evs)))
        store.put("rt-1", "team", "big", pad=8192)
        deadline = time.monotonic() + 30
        while c.error is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert isinstance(c.error, consumer.ConsumerError)
        assert "4096 bytes" in str(c.error) and f"watch {WATCH} in {ns}" in str(c.error)
        assert "xxxx" not in str(c.error)
    finally:
        c.stop()


def test_more_keys_than_the_bound_is_a_clear_error(kcp: gateway.Kube, ns: str) -> None:
    store = Store(kcp, ns, WATCH)
    for i in range(3):
        store.put("rt-1", "team", f"k{i}")
    with pytest.raises(consumer.TooManyKeys, match=rf"watch {WATCH} in {ns}: more than 2 keys"):
        list(make(kcp, ns, max_keys=2))
    small = make(kcp, ns, max_keys=3)
    c = Collector(small)
    try:
        c.wait(lambda evs: any(True for _ in synced(evs)))
        store.put("rt-1", "team", "k3")
        deadline = time.monotonic() + 30
        while c.error is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert isinstance(c.error, consumer.TooManyKeys)
    finally:
        c.stop()


def test_bookmarks_advance_the_position_without_a_change(kcp: gateway.Kube, ns: str) -> None:
    c = Collector(make(kcp, ns, watch_seconds=4))  # the server bookmarks before a watch ends
    try:
        c.wait(lambda evs: any(True for _ in synced(evs)))
        listed = c.source.position
        other = Store(kcp, consumerenv.fresh_namespace(kcp), WATCH)
        written = other.put("rt-1", "team", "elsewhere")
        deadline = time.monotonic() + 20
        while c.source.position < written and time.monotonic() < deadline:
            time.sleep(0.1)
        assert c.source.position >= written > listed
        assert len(c.events()) == 1  # only the Synced: a bookmark is not a change
    finally:
        c.stop()


def test_stop_returns_a_blocked_consumer_at_once(kcp: gateway.Kube, ns: str) -> None:
    c = Collector(make(kcp, ns, watch_seconds=300))
    c.wait(lambda evs: any(True for _ in synced(evs)))
    time.sleep(0.3)  # blocked reading the watch
    t0 = time.monotonic()
    c.stop(timeout=5)
    assert time.monotonic() - t0 < 2.0


def test_nudger_coalesces_per_kyma_cr(kcp: gateway.Kube, ns: str) -> None:
    store = Store(kcp, ns, WATCH)
    calls: list[tuple[str, float]] = []
    stop = threading.Event()
    nudger = consumer.Nudger(lambda kyma: calls.append((kyma, time.monotonic())), 1.0)
    listed = threading.Event()

    def changes() -> Iterator[consumer.Event]:  # the consumer's, noting its first Synced
        for ev in consumer.consume(kcp, namespace=ns, watch=WATCH, stop=stop):
            if isinstance(ev, consumer.Synced):
                listed.set()
            yield ev

    t = threading.Thread(target=nudger.run, args=(changes(), stop), daemon=True)
    t.start()
    try:
        assert listed.wait(30), "the consumer never listed"  # the writes below are watch events
        t0 = time.monotonic()
        for i in range(6):
            store.put("rt-1", "team", "a", data={"v": str(i)}, kyma="kyma-1")
        written = time.monotonic()
        store.put("rt-2", "team", "b", kyma="kyma-2")
        time.sleep(2.5)  # the window observed: calls coalesced per 1 s interval, none extra
        k1 = [at for k, at in calls if k == "kyma-1"]
        assert len(k1) >= 2, calls  # the first change at once, the rest at the interval's end
        assert all(b - a >= 0.95 for a, b in zip(k1, k1[1:], strict=False)), k1
        assert len(k1) <= 2 + int(written - t0), (k1, written - t0)  # coalesced, not 6 calls
        assert k1[-1] > written  # the last change was stored before: a call after it
        assert [k for k, _ in calls].count("kyma-2") == 1
    finally:
        stop.set()
        t.join(5)
    assert not t.is_alive()
