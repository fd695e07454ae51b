"""Cost bounded before it is paid, and capacity reserved per runtime (real listener, real KCP).

* A noisy runtime far above its rate limit, and one posting maximum-size bodies on every
  connection it may open, never get a well-behaved runtime a 429 or a failure.
* Every thread of a worker parsing a worst-case body at once keeps the worker's peak memory
  under its share of the container limit (768 MiB for the Deployment's 2 workers).
Latency ratios are measured by bench/listener_abuse.py, not asserted here. The listeners run
under the Deployment's memory limit (a cgroup, as a kubelet runs them) and are never
OOM-killed (checked when each stops).
"""

from __future__ import annotations

import json
import pathlib
import threading
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
import requests

from testing import cgroups
from testing.listenerenv import ConfinedListenerProcess, Env, ListenerProcess, Runtime

pytestmark = pytest.mark.processes  # starts processes of its own (testing/tiers.py)

MIB = 1024 * 1024
POD_LIMIT = 768 * MIB
WORKERS_PER_POD = 2
BODY = 3 * MIB


@pytest.fixture(scope="module")
def shared(listener_env: Env) -> Iterator[ListenerProcess]:
    p = ConfinedListenerProcess(
        listener_env,
        "fair",
        TETHER_LISTENER_THREADS="6",
        TETHER_LISTENER_RATE_PER_SECOND="5",
        TETHER_LISTENER_RATE_BURST="5",
        TETHER_LISTENER_MAX_IN_FLIGHT_PER_RUNTIME="2",
    )
    yield p
    p.stop()
    cgroups.held(p.usage, "fair listener")


def test_a_noisy_neighbour_never_gets_a_quiet_runtime_a_429(
    shared: ListenerProcess, runtime: Callable[..., Runtime]
) -> None:
    noisy, quiet = runtime(), runtime()
    stop = threading.Event()
    noisy_codes: Counter[int] = Counter()
    lock = threading.Lock()
    url = f"{shared.url}/v1/runtimes/{noisy.id}/changes"
    big = json.dumps(noisy.record("big", 1, data={"k": "x" * (BODY - 4096)})).encode()

    def hammer(body: bytes | None) -> None:
        s = noisy.session()
        n = 0
        while not stop.is_set():
            n += 1
            data = body if body is not None else json.dumps(noisy.record(f"n{n % 50}", n)).encode()
            try:
                r = s.post(url, data=data, headers={"Content-Type": "application/json"}, timeout=30)
                code = r.status_code
            except requests.RequestException:
                code = 0  # the connection was closed (a cap), counted apart
            with lock:
                noisy_codes[code] += 1

    threads = [threading.Thread(target=hammer, args=(None,), daemon=True) for _ in range(6)]
    threads += [threading.Thread(target=hammer, args=(big,), daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        s = quiet.session()
        for i in range(12):  # ~3 per second, below its own rate of 5/s
            r = s.post(
                f"{shared.url}/v1/runtimes/{quiet.id}/changes",
                json=quiet.record(f"q{i}", 1),
                timeout=30,
            )
            assert r.status_code == 200, (i, r.status_code, r.text)
            stop.wait(0.3)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    assert noisy_codes[429] > 0, noisy_codes  # the noisy one was limited...
    stored = {o["spec"]["name"] for o in quiet.env.stored(quiet.id)}
    assert stored == {f"q{i}" for i in range(12)}  # ...the quiet one lost nothing


def worker_peaks(listener: ListenerProcess) -> list[int]:
    """VmHWM (peak resident memory) of each gunicorn worker of ``listener``, in bytes."""
    pid = listener.proc.pid
    children = pathlib.Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    peaks = []
    for child in children:
        for line in pathlib.Path(f"/proc/{child}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                peaks.append(int(line.split()[1]) * 1024)
    assert peaks, "no gunicorn worker found"
    return peaks


def _envelope(items: bytes) -> bytes:
    return (
        b'{"apiVersion":"tether.kyma-project.io/v1","kind":"ConfigMapChangeList","items":['
        + items
        + b"]}"
    )


def worst_case_bodies(rt: Runtime) -> dict[str, bytes]:
    n = BODY // 5
    return {
        "empty_objects": _envelope(b",".join([b"{}"] * (BODY // 3 - 40))),
        "empty_arrays": _envelope(b",".join([b"[]"] * (BODY // 3 - 40))),
        "two_char_strings": _envelope(b",".join(b'"%02d"' % (i % 100) for i in range(n - 30))),
        "map_of_10000_keys": json.dumps(
            rt.record("m", 1, data={f"k{i:05d}": "v" * 280 for i in range(10_000)})
        ).encode(),
        "full_valid_batch": json.dumps(
            {
                "apiVersion": "tether.kyma-project.io/v1",
                "kind": "ConfigMapChangeList",
                "items": [rt.record(f"b{i}", 1, data={"k": "v" * 5800}) for i in range(500)],
            }
        ).encode(),
        "brackets_in_a_string": json.dumps(
            rt.record("s", 1, data={"k": "[" * (BODY - 4096)})
        ).encode(),
    }


@pytest.fixture(scope="module")
def deployed_worker(listener_env: Env) -> Iterator[ListenerProcess]:
    """One worker with the deployed threads and limits (the Deployment runs 2 per pod)."""
    p = ConfinedListenerProcess(
        listener_env,
        "memory",
        TETHER_LISTENER_THREADS="16",
        TETHER_LISTENER_MAX_IN_FLIGHT_PER_RUNTIME="4",
        TETHER_LISTENER_KCP_TIMEOUT_SECONDS="30",
    )
    yield p
    p.stop()
    cgroups.held(p.usage, "memory listener")


def test_every_thread_parsing_a_worst_case_body_stays_under_the_memory_limit(
    deployed_worker: ListenerProcess, runtime: Callable[..., Runtime]
) -> None:
    senders = [runtime() for _ in range(4)]  # 4 runtimes x 4 in flight = all 16 threads
    bodies = worst_case_bodies(senders[0])
    for shape, body in bodies.items():
        assert len(body) <= BODY, (shape, len(body))
        codes: Counter[int] = Counter()
        lock = threading.Lock()

        rounds = 1 if shape == "full_valid_batch" else 2  # 8,000 KCP writes per round

        def post(
            rt: Runtime,
            body: bytes = body,
            codes: Counter[int] = codes,
            lock: threading.Lock = lock,
            rounds: int = rounds,
        ) -> None:
            s = rt.session()
            data = body.replace(senders[0].id.encode(), rt.id.encode())
            for _ in range(rounds):
                r = s.post(
                    f"{deployed_worker.url}/v1/runtimes/{rt.id}/changes",
                    data=data,
                    headers={"Content-Type": "application/json"},
                    timeout=120,
                )
                with lock:
                    codes[r.status_code] += 1

        threads = [threading.Thread(target=post, args=(rt,)) for rt in senders for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        assert set(codes) <= {200, 400, 413, 503}, (shape, codes)  # never a crash or a 500
        peak = max(worker_peaks(deployed_worker))
        print(f"{shape}: codes {dict(codes)}, worker peak {peak / MIB:.0f} MiB")
        assert peak < POD_LIMIT // WORKERS_PER_POD, (shape, peak / MIB)
    # and a legitimate request is served right after
    rt = runtime()
    r = rt.session().post(
        f"{deployed_worker.url}/v1/runtimes/{rt.id}/changes", json=rt.record("after", 1), timeout=30
    )
    assert r.status_code == 200, r.text
