"""``listener.storage.batch``: a request's records of different keys at once (plain data and
threads; no KCP): per-key order, the bound per request and per worker, the failure named."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from listener.storage import batch


def recs(names: list[str]) -> list[dict[str, Any]]:
    return [
        {"runtimeId": "rt", "watch": "w", "namespace": "ns", "name": n, "resourceVersion": str(i)}
        for i, n in enumerate(names)
    ]


class Meter:
    """What ``fn`` saw: the order per key, the most at once, the threads it ran on."""

    def __init__(self, fail: frozenset[int] = frozenset(), pause: float = 0.002) -> None:
        self.lock = threading.Lock()
        self.now = self.most = 0
        self.order: list[int] = []
        self.threads: set[int] = set()
        self.fail, self.pause = fail, pause

    def __call__(self, rec: Any) -> str:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
            self.threads.add(threading.get_ident())
        time.sleep(self.pause)
        with self.lock:
            self.now -= 1
            self.order.append(int(rec["resourceVersion"]))
        if int(rec["resourceVersion"]) in self.fail:
            raise ValueError(f"record {rec['resourceVersion']}")
        return "persisted-" + str(rec["resourceVersion"])


def test_groups_keep_batch_order_per_key() -> None:
    assert batch.groups(["a", "b", "a", "c", "b", "a"]) == [[0, 2, 5], [1, 4], [3]]
    assert batch.groups([]) == []


def test_every_record_once_and_a_keys_records_in_batch_order() -> None:
    names = [f"k{i % 7}" for i in range(60)]
    m = Meter()
    done = batch.Pool(4).run(recs(names), m)
    assert done.failures == [] and done.failed is None
    assert [f.outcome if f else None for f in done.outcomes] == [
        f"persisted-{i}" for i in range(60)
    ]
    assert sorted(m.order) == list(range(60))
    for k in range(7):  # each key's records ran one after another, in batch order
        mine = [i for i in m.order if i % 7 == k]
        assert mine == sorted(mine)
    assert m.most <= 4


def test_concurrency_one_runs_on_the_request_thread_one_at_a_time() -> None:
    m = Meter()
    done = batch.Pool(1).run(recs([f"k{i}" for i in range(10)]), m)
    assert all(f is not None for f in done.outcomes)
    assert m.order == list(range(10)) and m.most == 1
    assert m.threads == {threading.get_ident()}


def test_a_worker_holds_at_most_its_concurrency_in_extra_threads_whatever_the_requests() -> None:
    pool = batch.Pool(3)
    m = Meter(pause=0.005)
    callers: set[int] = set()

    def request(r: int) -> None:
        callers.add(threading.get_ident())
        done = pool.run(recs([f"r{r}-k{i}" for i in range(12)]), m)
        assert all(f is not None for f in done.outcomes)

    threads = [threading.Thread(target=request, args=(r,)) for r in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(m.order) == 72
    assert m.most <= 3 and len(m.threads - callers) <= 3


def test_a_failure_stops_new_records_and_the_earliest_failing_is_named() -> None:
    names = [f"k{i}" for i in range(40)]
    m = Meter(fail=frozenset({5, 30}))
    done = batch.Pool(4).run(recs(names), m)
    assert done.failed is not None and done.failed.position == 5
    assert isinstance(done.failed.error, ValueError)
    assert done.outcomes[5] is None
    tried = set(m.order)
    assert 5 in tried and len(tried) < 40  # records after the failure were not started
    assert all(
        (done.outcomes[i] is not None) == (i in tried and i not in (5, 30)) for i in range(40)
    )


def test_a_failed_records_later_records_of_its_key_are_not_tried() -> None:
    m = Meter(fail=frozenset({0}))
    done = batch.Pool(1).run(recs(["a", "a", "a"]), m)
    assert m.order == [0] and done.outcomes == [None, None, None]
    assert done.failed is not None and done.failed.position == 0


def test_concurrency_below_one_is_refused() -> None:
    with pytest.raises(ValueError):
        batch.Pool(0)
