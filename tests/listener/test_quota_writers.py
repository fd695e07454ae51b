"""The quota with other writers about (``listener.storage.quota``, ``writers`` > 1): every
growing write counts afresh, and a worker's growing writes of one runtime go one at a time.
Plain data: the count is a function over a dict that stands for the KCP."""

from __future__ import annotations

import threading

import pytest

from listener.storage import quota, rules

LIMITS = rules.Limits(records=3, bytes=1000)


class Kcp:
    """What the other workers stored, as the count reads it."""

    def __init__(self) -> None:
        self.used = rules.Used(0, 0)
        self.counts = 0

    def load(self, runtime_id: str) -> rules.Used:
        self.counts += 1
        return self.used


def test_one_writer_trusts_its_count_more_writers_count_every_growing_write() -> None:
    kcp = Kcp()
    alone = quota.Usage(LIMITS, ttl=600, load=kcp.load, clock=lambda: 0.0)
    alone.reserve("rt", None, 10).commit()
    kcp.used = rules.Used(3, 30)  # another worker filled the quota: unseen for the ttl
    alone.reserve("rt", None, 10).commit()
    assert kcp.counts == 1
    kcp2 = Kcp()
    shared = quota.Usage(LIMITS, ttl=600, load=kcp2.load, clock=lambda: 0.0, writers=2)
    shared.reserve("rt", None, 10).commit()
    kcp2.used = rules.Used(3, 30)
    with pytest.raises(quota.Exceeded) as e:
        shared.reserve("rt", None, 10)
    assert e.value.refusal.limit == "records" and kcp2.counts == 2
    shared.reserve("rt", 10, 5).commit()  # a write that does not grow: no count, admitted
    assert kcp2.counts == 2


def test_growing_writes_of_a_runtime_wait_for_the_one_in_flight() -> None:
    kcp = Kcp()
    usage = quota.Usage(LIMITS, ttl=600, load=kcp.load, writers=2)
    first = usage.reserve("rt", None, 10)
    got: list[str] = []

    def second() -> None:
        try:
            usage.reserve("rt", None, 10).commit()
            got.append("admitted")
        except quota.Exceeded:
            got.append("refused")

    t = threading.Thread(target=second)
    t.start()
    t.join(0.3)
    assert t.is_alive() and got == []  # waits for the first write's end
    kcp.used = rules.Used(3, 30)  # the first write and two more landed meanwhile
    first.commit()
    t.join(5)
    assert got == ["refused"]  # counted after the first ended: the quota is full
    # a failed write releases the runtime too
    kcp.used = rules.Used(0, 0)
    usage.reserve("rt", None, 10).cancel()
    usage.reserve("rt", None, 10).commit()
