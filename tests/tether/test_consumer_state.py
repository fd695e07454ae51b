"""The consumer library's decisions as plain data: what an object is, what a key remembers and
when an event is dropped, the nudge schedule and the Nudger on a fake clock."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from tether.kube import apitypes
from tether.runtime import consumer, consumerstate
from tether.wire import watches


def obj(
    name: str, rv: str, *, runtime: str = "rt-1", kyma: str | None = "kyma-1", **spec: Any
) -> dict[str, Any]:
    labels = {watches.WATCH_LABEL: "w"}
    if kyma is not None:
        labels[apitypes.KYMA_NAME_LABEL] = kyma
    return {
        "metadata": {"name": f"rcm-{name}", "resourceVersion": rv, "labels": labels},
        "spec": {
            "runtimeId": runtime,
            "watch": "w",
            "namespace": "team",
            "name": name,
            "deleted": False,
            **spec,
        },
    }


def item(name: str, rv: int) -> consumerstate.Item:
    got = consumerstate.parse(obj(name, str(rv)), "w")
    assert got is not None
    return got


def test_parse_takes_the_key_kyma_and_revision() -> None:
    got = consumerstate.parse(obj("a", "17", data={"k": "v"}), "w")
    assert got == consumerstate.Item(
        ("rt-1", "team", "a"), "w", "kyma-1", obj("a", "17", data={"k": "v"})["spec"], 17
    )
    assert consumerstate.parse(obj("a", "17", kyma=None), "w").kyma == ""  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "bad",
    [
        None,
        [],
        {"metadata": {"resourceVersion": "1"}},  # no spec
        {"metadata": {"resourceVersion": "1"}, "spec": {"runtimeId": "r", "namespace": "n"}},
        {
            "metadata": {"resourceVersion": "1"},
            "spec": {"runtimeId": 3, "namespace": "n", "name": "x"},
        },
        {
            "metadata": {"resourceVersion": "x1"},
            "spec": {"runtimeId": "r", "namespace": "n", "name": "x"},
        },
        {"metadata": {}, "spec": {"runtimeId": "r", "namespace": "n", "name": "x"}},
        {"spec": {"runtimeId": "r", "namespace": "n", "name": "x"}},
    ],
)
def test_an_object_that_is_not_a_record_is_ignored(bad: Any) -> None:
    assert consumerstate.parse(bad, "w") is None


def test_an_event_at_or_below_the_known_revision_is_dropped() -> None:
    known = consumerstate.Known(10, "scope")
    assert known.listed(item("a", 5))
    assert known.listed(item("a", 5))  # a relist repeats the same revision: delivered
    assert not known.listed(item("a", 4))  # never an older one
    assert not known.event(item("a", 5))  # a watch event at the known revision: dropped
    assert known.event(item("a", 6)) and known.revision(("rt-1", "team", "a")) == 6
    assert not known.deleted(item("a", 3))  # an older deletion
    assert known.deleted(item("a", 7)) and len(known) == 0
    assert known.event(item("a", 8))  # created again


def test_a_relist_reports_the_known_keys_it_lacks_once() -> None:
    known = consumerstate.Known(10, "scope")
    for n in ("a", "b", "c"):
        known.listed(item(n, 1))
    assert known.missing([("rt-1", "team", "b")]) == [
        (("rt-1", "team", "a"), "kyma-1"),
        (("rt-1", "team", "c"), "kyma-1"),
    ]
    assert known.missing([("rt-1", "team", "b")]) == []
    assert len(known) == 1


def test_more_keys_than_the_bound_raise_naming_the_scope() -> None:
    known = consumerstate.Known(2, "watch w in kcp-system")
    known.event(item("a", 1))
    known.event(item("b", 1))
    known.event(item("b", 2))  # a known key never counts twice
    with pytest.raises(consumerstate.TooManyKeys, match="watch w in kcp-system: more than 2 keys"):
        known.event(item("c", 1))
    assert issubclass(consumer.TooManyKeys, consumer.ConsumerError)


def test_schedule_first_at_once_then_one_call_at_the_interval_end() -> None:
    s = consumerstate.Schedule(10.0)
    s.offer("k", 100.0)
    assert s.due(100.0) == ["k"] and s.next_at() is None
    for t in (101.0, 103.0, 109.0):
        s.offer("k", t)
    assert s.next_at() == 110.0 and s.pending() == 1
    assert s.due(109.9) == []
    assert s.due(110.0) == ["k"]
    s.offer("k", 125.0)  # an interval after the last call: at once
    assert s.due(125.0) == ["k"]


def test_schedule_per_kyma_cr_and_forgets_the_idle() -> None:
    s = consumerstate.Schedule(5.0)
    s.offer("a", 0.0)
    s.offer("b", 1.0)
    assert s.due(1.0) == ["a", "b"]
    s.offer("a", 2.0)
    assert s.due(3.0) == [] and s.next_at() == 6.0
    assert s.due(7.0) == ["a"]
    assert s.due(20.0) == [] and not s._last  # nothing pending, the last calls long ago


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def change(kyma: str, name: str = "a") -> consumer.Change:
    return consumer.Change("rt-1", "w", "team", name, kyma, {"deleted": False}, 1, False)


def test_nudger_coalesces_and_survives_a_failing_handler() -> None:
    clock, calls = Clock(), []

    def handler(kyma: str) -> None:
        calls.append((kyma, clock.now))
        if kyma == "bad":
            raise RuntimeError("secret value")

    n = consumer.Nudger(handler, 2.0, clock=clock)
    n.offer(change("bad"))
    n.offer(change("good"))
    n.offer(change(""))  # no Kyma CR name: not nudged
    assert n.fire() is None
    assert calls == [("bad", 0.0), ("good", 0.0)] and n.failures == 1
    clock.now = 0.5
    n.offer(change("good", "b"))
    n.offer(change("good", "c"))
    assert n.fire() == 2.0 and len(calls) == 2
    clock.now = 2.0
    n.fire()
    assert calls[-1] == ("good", 2.0) and len(calls) == 3 and n.calls == 3


def test_nudger_run_ends_on_stop_and_raises_a_failed_stream() -> None:
    def failing() -> Any:
        yield change("k")
        raise consumer.TooManyKeys("scope: more than 1 keys")

    calls: list[str] = []
    with pytest.raises(consumer.TooManyKeys):
        consumer.Nudger(calls.append, 1.0).run(failing(), threading.Event())
    stop = threading.Event()
    stop.set()
    consumer.Nudger(calls.append, 1.0).run(iter(()), stop)


def test_memory_per_key_is_bounded() -> None:
    # what docs/consumers.md promises: about 300 bytes a remembered key (not its record);
    # a runtime's keys share one copy of its ID, namespaces and Kyma CR name
    import tracemalloc

    def stored(i: int) -> Any:
        return json.loads(
            json.dumps(
                obj(
                    f"app-config-{i}",
                    str(1000 + i),
                    runtime=f"{i % 50:036d}",
                    kyma=f"kyma-{i % 50:036d}",
                    data={"value": "v" * 1000},
                )
            )
        )

    known = consumerstate.Known(20_000, "scope")
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(20_000):
            got = consumerstate.parse(stored(i), "w")
            assert got is not None and known.listed(got)
        per_key = (tracemalloc.get_traced_memory()[0] - before) / 20_000
    finally:
        tracemalloc.stop()
    assert len(known) == 20_000
    assert per_key < 400, per_key


def test_an_unreachable_kcp_is_retried_with_a_growing_backoff_and_stop_ends_it() -> None:
    import socket
    import time

    from tether.kube import gateway

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kubeconfig = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "c",
            "clusters": [
                {
                    "name": "c",
                    "cluster": {
                        "server": f"https://127.0.0.1:{port}",
                        "insecure-skip-tls-verify": True,
                    },
                }
            ],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        }
    )
    kcp = gateway.from_kubeconfig_bytes(kubeconfig, timeout=1.0)
    stop = threading.Event()
    c = consumer.Consumer(kcp, namespace="ns", watch="w", stop=stop)
    t = threading.Thread(target=lambda: list(c), daemon=True)
    t.start()
    time.sleep(3.0)
    stop.set()
    t0 = time.monotonic()
    t.join(2.0)
    assert not t.is_alive() and time.monotonic() - t0 < 1.0  # stop cuts the backoff short
    # 0.25 s doubling (±20 %): about 4 attempts in 3 s, not a tight loop
    assert 3 <= c.failures <= 6, c.failures
    kcp.close()
