"""8 concurrent senders, two listener processes, interleaved and out-of-order records for
the same objects: the KCP ends with exactly the newest record of every object."""

from __future__ import annotations

import collections
import random
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from testing.listenerenv import Env, ListenerProcess, Runtime, metric_value
from tether.wire import changes

OBJECTS = 6
VERSIONS = 30
SENDERS = 8


@pytest.fixture(scope="module")
def second_listener(listener_env: Env) -> Iterator[ListenerProcess]:
    p = ListenerProcess(listener_env, "second")
    yield p
    p.stop()


def test_concurrent_out_of_order_senders_end_with_newest_state(
    listener: ListenerProcess,
    second_listener: ListenerProcess,
    runtime: Callable[..., Runtime],
) -> None:
    rt = runtime()
    rng = random.Random(4242)
    names = [f"obj-{i}" for i in range(OBJECTS)]
    # resourceVersions interleave across objects like one apiserver's counter would
    all_records: list[dict[str, Any]] = []
    rv = 1000
    newest: dict[str, dict[str, Any]] = {}
    for v in range(VERSIONS):
        for name in names:
            rv += rng.randint(1, 3)
            deleted = name == "obj-0" and v == VERSIONS - 1  # obj-0 ends deleted
            rec = rt.record(name, rv, deleted=deleted, data=None if deleted else {"v": str(rv)})
            all_records.append(rec)
            newest[name] = rec
    # every record goes to two random senders; each sender shuffles its share
    shares: list[list[dict[str, Any]]] = [[] for _ in range(SENDERS)]
    for rec in all_records:
        for i in rng.sample(range(SENDERS), 2):
            shares[i].append(rec)
    for share in shares:
        rng.shuffle(share)

    statuses: collections.Counter[int] = collections.Counter()
    outcomes: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()
    errors: list[BaseException] = []
    barrier = threading.Barrier(SENDERS)

    def send(i: int) -> None:
        try:
            target = listener if i % 2 == 0 else second_listener
            s = rt.session()
            share = shares[i]
            barrier.wait(timeout=30)
            pos = 0
            while pos < len(share):
                n = rng.choice((1, 1, 3, 8))
                chunk = share[pos : pos + n]
                body: Any = chunk[0] if len(chunk) == 1 else changes.batch(chunk)  # type: ignore[arg-type]
                for _attempt in range(20):  # a real sender retries 503/429
                    r = s.post(f"{target.url}/v1/runtimes/{rt.id}/changes", json=body, timeout=60)
                    with lock:
                        statuses[r.status_code] += 1
                    if r.status_code == 200:
                        with lock:
                            outcomes.update(x["outcome"] for x in r.json()["results"])
                        break
                    assert r.status_code in (429, 503), r.text
                else:
                    raise AssertionError("never accepted")
                pos += n
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(SENDERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors[0]
    assert sum(outcomes.values()) == 2 * len(all_records)
    assert outcomes["persisted"] >= OBJECTS
    assert outcomes["stale"] + outcomes["duplicate"] > 0

    stored = {o["spec"]["name"]: o["spec"] for o in rt.env.stored(rt.id)}
    assert set(stored) == set(names)
    for name in names:
        want = newest[name]
        got = stored[name]
        assert got["resourceVersion"] == want["resourceVersion"], name
        assert got["deleted"] == want["deleted"]
        assert got.get("data", {}) == want.get("data", {})
        assert got["observedAt"] == want["observedAt"]
    conflicts = sum(
        metric_value(p.metrics(), "tether_listener_write_conflicts_total", path=path)
        for p in (listener, second_listener)
        for path in ("cached", "read")
    )
    print(f"outcomes {dict(outcomes)}, statuses {dict(statuses)}, write conflicts {conflicts}")
