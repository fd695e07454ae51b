"""The coalescing key queue and the read-back decision (pure / in-process; the queue's
decisions with a fake clock)."""

from __future__ import annotations

import threading
import time

import pytest

from tether.runtime import sender
from tether.wire import listenerapi
from webhook import forwarder, keyqueue, readback


class Clock:
    """A fake monotonic clock: time moves only when told."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def item(
    name: str,
    op: keyqueue.Operation = "UPDATE",
    rv: str = "1",
    uid: str = "u",
    admitted: float = 0.0,
) -> keyqueue.Item:
    return keyqueue.Item("ns", name, uid, op, rv, 0.0, admitted=admitted)


def test_coalesces_by_key_and_keeps_arrival_order() -> None:
    q = keyqueue.KeyQueue(10)
    assert q.put(item("a", rv="1")) == "enqueued"
    assert q.put(item("b")) == "enqueued"
    assert q.put(item("a", "DELETE", rv="2", uid="u2")) == "coalesced"
    got = q.take(10, 0)
    assert [i.name for i in got] == ["a", "b"]
    a = got[0]
    assert (a.operation, a.old_resource_version, a.uid, a.merged) == ("DELETE", "1", "u2", 2)
    assert len(q) == 0


def test_bounded() -> None:
    q = keyqueue.KeyQueue(2)
    assert [q.put(item(n)) for n in "abc"] == ["enqueued", "enqueued", "overflowed"]
    assert q.put(item("a")) == "coalesced"  # a waiting key still merges when full
    assert [i.name for i in q.take(1, 0)] == ["a"]
    assert q.put(item("c")) == "enqueued"


def test_settle_holds_fresh_items_until_closed() -> None:
    q = keyqueue.KeyQueue(10, settle=3600)
    q.put(keyqueue.Item("ns", "a", "u", "CREATE", "", 0.0))
    assert q.take(10, 0.01) == []
    q.close()
    assert [i.name for i in q.take(10, 0.01)] == ["a"]  # drain ignores settle
    assert q.take(10, 5) == []  # closed and empty: returns at once


def test_take_wakes_on_put() -> None:
    q = keyqueue.KeyQueue(10)
    got: list[keyqueue.Item] = []
    t = threading.Thread(target=lambda: got.extend(q.take(5, 10)))
    t.start()
    q.put(item("a"))
    t.join(10)
    assert [i.name for i in got] == ["a"]


def test_readback_judgement() -> None:
    cm = {"metadata": {"resourceVersion": "5"}}
    assert readback.judge(item("a", rv="4"), cm, False).result == "live"
    assert readback.judge(item("a", rv="5"), cm, False).result == "wait"
    assert readback.judge(item("a", rv="5"), cm, True).result == "unchanged"
    assert readback.judge(item("a", "CREATE", rv=""), None, False).result == "wait"
    assert readback.judge(item("a", "CREATE", rv=""), None, True).result == "rejected"
    assert readback.judge(item("a", "CREATE", rv=""), cm, False).result == "live"
    assert readback.judge(item("a", "DELETE", rv="5"), None, False).result == "tombstone"
    assert readback.judge(item("a", "UPDATE", rv="5"), None, False).result == "tombstone"
    assert readback.judge(item("a", "DELETE", rv="5"), cm, True).result == "unchanged"


def test_a_burst_waits_for_its_newest_write_not_only_for_a_change() -> None:
    """Writes 2 and 3 of a burst merged into one entry (old versions 1 and 2) while write 2
    is persisted (version 2) and write 3 is admitted, not yet persisted: sending version 2
    would leave write 3 to the poller (a skew test's last write was lost so). The entry
    waits until the object has passed version 2, and at the deadline sends what it read."""
    q = keyqueue.KeyQueue(10)
    q.put(item("a", rv="1"))
    q.put(item("a", rv="2", uid="u3"))
    (burst,) = q.take(10, 0)
    assert (burst.old_resource_version, burst.newest_old_resource_version) == ("1", "2")
    at = lambda rv: {"metadata": {"resourceVersion": rv}}  # noqa: E731
    assert readback.judge(burst, at("2"), False).result == "wait"  # write 3 not visible
    assert readback.judge(burst, at("3"), False).result == "live"
    assert readback.judge(burst, at("1"), False).result == "wait"
    assert readback.judge(burst, at("2"), True) == readback.Judgement("live", at("2"))
    assert readback.judge(burst, at("1"), True).result == "unchanged"
    assert readback.judge(burst, None, False).result == "tombstone"
    # three merged: the newest admission's old version is the one waited for
    three = keyqueue.merge(burst, item("a", rv="3"))
    assert (three.old_resource_version, three.newest_old_resource_version) == ("1", "3")
    assert readback.judge(three, at("3"), False).result == "wait"
    # the read-back's deadline counts from the newest admission
    assert (burst.admitted, burst.last_admitted) == (0.0, 0.0)
    later = keyqueue.merge(burst, item("a", rv="3", admitted=7.0))
    assert (later.admitted, later.last_admitted) == (0.0, 7.0)
    # one admission: as before (the newest is its own old version)
    assert item("a", rv="1").newest_old_resource_version is None
    assert readback.judge(item("a", rv="1"), at("2"), False).result == "live"


def test_hot_keys_wait_for_the_min_interval_others_do_not() -> None:
    q = keyqueue.KeyQueue(10, settle=0.0, min_interval=3600)
    q.put(keyqueue.Item("ns", "hot", "u", "UPDATE", "1", 0.0))
    assert [i.name for i in q.take(10, 0)] == ["hot"]
    q.put(keyqueue.Item("ns", "hot", "u", "UPDATE", "2", 0.0))  # just handed out: held back
    q.put(keyqueue.Item("ns", "cold", "u", "UPDATE", "1", 0.0))
    assert [i.name for i in q.take(10, 0.01)] == ["cold"]
    assert q.take(10, 0.01) == []
    assert len(q) == 1
    q.close()
    assert [i.name for i in q.take(10, 0)] == ["hot"]


def test_lookahead_batches_hot_keys_but_never_before_settle() -> None:
    q = keyqueue.KeyQueue(10, settle=0.0, min_interval=0.2, lookahead=3600)
    for n in ("a", "b"):
        q.put(keyqueue.Item("ns", n, "u", "UPDATE", "1", 0.0))
    assert len(q.take(10, 0)) == 2
    q.done(
        [keyqueue.key_of("ns", "a"), keyqueue.key_of("ns", "b")]
    )  # sent (else they would be held as in flight)
    q.put(keyqueue.Item("ns", "a", "u", "UPDATE", "2", 0.0))  # held back by min_interval
    q.put(keyqueue.Item("ns", "b", "u", "UPDATE", "2", 0.0))
    q.put(keyqueue.Item("ns", "c", "u", "UPDATE", "1", 0.0))  # ready now
    assert sorted(i.name for i in q.take(10, 0)) == ["a", "b", "c"]  # a and b pulled early
    s = keyqueue.KeyQueue(10, settle=3600, lookahead=3600)
    s.put(keyqueue.Item("ns", "x", "u", "UPDATE", "1", 0.0, admitted=time.monotonic() - 7200))
    s.put(keyqueue.Item("ns", "y", "u", "UPDATE", "1", 0.0))  # admitted now: must settle
    assert [i.name for i in s.take(10, 0)] == ["x"]
    assert len(s) == 1


# -- leading edge, in flight, hot keys (fake clock) ----------------------------------------


def queue(
    clock: Clock, maxsize: int = 100, settle: float = 0.0, min_interval: float = 0.5
) -> keyqueue.KeyQueue:
    return keyqueue.KeyQueue(maxsize, settle, min_interval, min_interval / 4, clock=clock)


def at(clock: Clock, name: str, rv: str = "1", op: keyqueue.Operation = "UPDATE") -> keyqueue.Item:
    return keyqueue.Item("ns", name, "u", op, rv, 0.0, admitted=clock())


def test_a_first_admission_is_ready_at_once() -> None:
    c = Clock()
    q = queue(c)
    assert q.put(at(c, "a", op="CREATE", rv="")) == "enqueued"
    got = q.take(10, 0)  # no time has passed: leading edge, no window
    assert [(i.name, i.operation) for i in got] == [("a", "CREATE")]
    assert q.in_flight() == 1 and len(q) == 0


def test_an_admission_while_in_flight_coalesces_and_is_ready_after_the_finish() -> None:
    c = Clock()
    q = queue(c, min_interval=0.0)
    q.put(at(c, "a", rv="1"))
    assert len(q.take(10, 0)) == 1
    c.advance(0.01)
    assert q.put(at(c, "a", rv="2")) == "enqueued"  # one held entry ...
    assert q.put(at(c, "a", rv="3")) == "coalesced"  # ... standing for all that follow
    c.advance(10)
    assert q.take(10, 0) == []  # however long the send takes: not while it is in flight
    q.done([keyqueue.key_of("ns", "a")])
    got = q.take(10, 0)
    assert [(i.old_resource_version, i.merged) for i in got] == [("2", 2)]


def test_the_held_entry_waits_for_the_hot_key_interval_after_a_quick_send() -> None:
    c = Clock()
    q = queue(c, min_interval=0.5)
    q.put(at(c, "a"))
    q.take(10, 0)
    c.advance(0.01)
    q.put(at(c, "a", rv="2"))
    c.advance(0.02)
    q.done([keyqueue.key_of("ns", "a")])  # the send took 30 ms
    assert q.take(10, 0) == []  # handed out 30 ms ago: hot
    c.advance(0.5 - 0.03 - 0.001)
    assert q.take(10, 0) == []
    c.advance(0.002)
    assert [i.old_resource_version for i in q.take(10, 0)] == ["2"]


def test_a_burst_of_1000_on_one_key_ends_in_at_most_3_sends_with_the_final_state() -> None:
    c = Clock()
    q = queue(c, min_interval=0.5)
    sends: list[keyqueue.Item] = []
    state = 0  # the persisted version; a send reads it back when it is handed out
    read: list[int] = []
    for i in range(1000):
        state = i + 1
        q.put(at(c, "burst", rv=str(i)))
        c.advance(0.0005)  # 2,000 admissions/s: 0.5 s in all
        for it in q.take(10, 0):
            sends.append(it)
            read.append(state)
            q.done([it.key])
    while len(q) or q.in_flight():
        c.advance(0.05)
        for it in q.take(10, 0):
            sends.append(it)
            read.append(state)
            q.done([it.key])
    assert 2 <= len(sends) <= 3, [(i.old_resource_version, i.merged) for i in sends]
    assert sum(i.merged for i in sends) == 1000  # every admission is accounted for
    assert read[-1] == 1000  # the last send reads the final state
    assert sends[0].merged == 1  # the first went out alone, at once


def test_a_cold_key_is_not_delayed_by_a_hot_one() -> None:
    c = Clock()
    q = queue(c, min_interval=0.5)
    q.put(at(c, "hot"))
    q.take(10, 0)
    q.done([keyqueue.key_of("ns", "hot")])
    c.advance(0.1)
    q.put(at(c, "hot", rv="2"))  # handed out 0.1 s ago: waits until 0.5
    q.put(at(c, "cold"))
    assert [i.name for i in q.take(10, 0)] == ["cold"]
    c.advance(0.4)
    assert [i.name for i in q.take(10, 0)] == ["hot"]
    q.done([keyqueue.key_of("ns", "hot"), keyqueue.key_of("ns", "cold")])
    c.advance(0.6)  # quiet for longer than the interval: leading edge again
    q.put(at(c, "hot", rv="3"))
    assert [i.name for i in q.take(10, 0)] == ["hot"]


def test_overflow_is_bounded_and_held_entries_count() -> None:
    c = Clock()
    q = queue(c, maxsize=2)
    q.put(at(c, "a"))
    q.take(10, 0)  # a in flight, nothing waiting
    assert q.put(at(c, "a", rv="2")) == "enqueued"  # held: counts against the bound
    assert q.put(at(c, "b")) == "enqueued"
    assert q.put(at(c, "c")) == "overflowed"
    assert q.put(at(c, "a", rv="3")) == "coalesced"  # a waiting key still merges when full
    assert q.put(at(c, "b", rv="2")) == "coalesced"
    assert len(q) == 2
    assert [i.name for i in q.take(10, 0)] == ["b"]  # a is still in flight
    assert q.put(at(c, "c")) == "enqueued"


def test_close_drains_held_entries_too() -> None:
    c = Clock()
    q = queue(c)
    q.put(at(c, "a"))
    q.take(10, 0)
    q.put(at(c, "a", rv="2"))  # held behind the send in flight
    q.close()
    assert [i.old_resource_version for i in q.take(10, 0)] == ["2"]


def test_settle_restores_the_trailing_window() -> None:
    c = Clock()
    q = queue(c, settle=0.1, min_interval=0.5)
    q.put(at(c, "a", rv="1"))
    c.advance(0.05)
    assert q.put(at(c, "a", rv="2")) == "coalesced"
    assert q.take(10, 0) == []
    c.advance(0.051)
    assert [(i.old_resource_version, i.merged) for i in q.take(10, 0)] == [("1", 2)]


def test_reread_delay_starts_small_and_doubles_to_the_poll_interval() -> None:
    delays = [forwarder.reread_delay(0.005, 0.05, n) for n in range(6)]
    assert delays == [0.005, 0.01, 0.02, 0.04, 0.05, 0.05]
    assert forwarder.reread_delay(0.005, 0.05, 10_000) == 0.05


def test_read_error_delay_doubles_to_two_seconds_with_jitter() -> None:
    top = [readback.error_delay(n, rand=lambda: 1.0) for n in range(6)]
    assert top == pytest.approx([0.2, 0.4, 0.8, 1.6, 2.0, 2.0])
    bottom = [readback.error_delay(n, rand=lambda: 0.0) for n in range(6)]
    assert bottom == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    assert readback.error_delay(10_000) <= 2.0


@pytest.mark.parametrize(
    ("status", "error", "split"),
    [
        (400, "schema", True),
        (413, "record too large", True),
        (422, "invalid", True),
        (
            403,
            listenerapi.WATCH_REFUSAL,
            True,
        ),  # one record its Watch (as the KCP holds it) refuses
        (403, "forbidden", False),  # the runtime itself is refused: every record would be
        (401, "unauthorized", False),
        (409, "epoch", False),
    ],
)
def test_a_refused_batch_is_resent_record_by_record_when_the_refusal_may_concern_one(
    status: int, error: str, split: bool
) -> None:
    outcome = sender.Outcome("permanent", status, f"http-{status}", error=error)
    assert forwarder.per_record(outcome) is split
