"""The coalescing key queue and the read-back decision (pure / in-process)."""

from __future__ import annotations

import threading
import time

from webhook import keyqueue, readback


def item(name: str, op: keyqueue.Operation = "UPDATE", rv: str = "1", uid: str = "u",
         admitted: float = 0.0) -> keyqueue.Item:
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


def test_hot_keys_wait_for_the_min_interval_others_do_not() -> None:
    q = keyqueue.KeyQueue(10, settle=0.0, min_interval=3600)
    q.put(keyqueue.Item("ns", "hot", "u", "UPDATE", "1", 0.0))
    assert [i.name for i in q.take(10, 0)] == ["hot"]
    q.put(keyqueue.Item("ns", "hot", "u", "UPDATE", "2", 0.0))   # just handed out: held back
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
    q.put(keyqueue.Item("ns", "a", "u", "UPDATE", "2", 0.0))  # held back by min_interval
    q.put(keyqueue.Item("ns", "b", "u", "UPDATE", "2", 0.0))
    q.put(keyqueue.Item("ns", "c", "u", "UPDATE", "1", 0.0))  # ready now
    assert sorted(i.name for i in q.take(10, 0)) == ["a", "b", "c"]  # a and b pulled early
    s = keyqueue.KeyQueue(10, settle=3600, lookahead=3600)
    s.put(keyqueue.Item("ns", "x", "u", "UPDATE", "1", 0.0, admitted=time.monotonic() - 7200))
    s.put(keyqueue.Item("ns", "y", "u", "UPDATE", "1", 0.0))  # admitted now: must settle
    assert [i.name for i in s.take(10, 0)] == ["x"]
    assert len(s) == 1
