"""Benchmark: the listener under abuse (issue 9), memory and fairness, ratios in one run.

Starts one KCP control plane and real listeners (`python -m listener.main`: gunicorn,
the bounded worker, mTLS, the least-privilege Role), with the Deployment's settings
(2 workers x 16 threads, 4 requests in flight per runtime) unless the flags say otherwise.

1. Memory per body shape. For each hostile shape a fresh listener (so that each worker's
   VmHWM, a process-lifetime high-water mark, belongs to that shape alone) gets RUNTIMES x
   CONNS concurrent connections (default 16 runtimes x 4 = 64, twice the 2 x 16 threads,
   so every thread of both workers serves a worst-case body at once) from separate
   processes, each posting a ~3 MiB body of the shape on keep-alive for SECONDS. Peak
   memory per worker (VmHWM at the end; VmRSS and Pss sampled every 50 ms by a separate
   process) and for the pod (the arbiter plus its workers) against the 768 MiB limit,
   the answers seen, and a legitimate request after each shape.
2. A legitimate runtime's latency. One listener with a low rate limit (RATE per second,
   burst BURST, per worker) so that a noisy runtime is 100x above it. A legitimate
   client in this process posts REQUESTS small records sequentially at LEGIT_RATE
   requests/s, round-robin over LEGIT runtimes (each far below its limit), in four
   conditions: alone; next to STALLED TCP connections that send the first bytes of a TLS
   ClientHello and wait (kept at STALLED by reopening what the listener closes at its
   handshake deadline); next to a noisy runtime sending small records from many threads
   as fast as it can (over 100x its limit); next to a runtime sending 3 MiB valid
   batches on every connection it may open. The conditions alternate over ROUNDS slices
   (load drift on a shared machine hits all alike). p50/p99 and their ratio to "alone",
   429s of the legitimate runtimes (must be 0) and of the noisy ones.

Load generators run in their own processes (spawn), so the legitimate client's timing is
not distorted by their GIL. Placement (``--placement split``, the default where the machine
has cpusets, testing/cpuset.py): the listener on the last core, this process (the legitimate
client) and the generators on the others, the KCP plane unpinned; the noisy generators run
at nice ``--nice`` (0) and the legitimate client's thread, while it measures, at
``--client-nice`` (-10, root only), so that on their shared core it goes first, as if the
generators were on another machine. The noisy runtime is paced at ``--noisy-times`` (100) times
its limit (RATE x workers). Per condition: the listener's CPU share and each core's busy
share. Prints the tables; writes bench/results/listener_abuse.json (``--out``) with the
placement, commit, load average and command (bench/provenance.py); ``--report`` prints the
tables of a result again.

    .venv/bin/python bench/listener_abuse.py [--short] [--workers 2] [--threads 16]
    .venv/bin/python bench/listener_abuse.py --shapes ""
        --out bench/results/listener_abuse_noisy.json
    .venv/bin/python bench/listener_abuse.py --report --out bench/results/listener_abuse_noisy.json
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import multiprocessing
import os
import pathlib
import queue
import selectors
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing.synchronize import Barrier as BarrierT
from multiprocessing.synchronize import Event as EventT
from typing import Any

import provenance
import requests
import skeleton

from testing import controlplane, cpuset
from testing import listenerenv as lt
from tether.wire import changes, conversion

MIB = 1024 * 1024
LIMIT_MIB = 768  # the Deployment's memory limit of the listener container (2 workers)
BODY = 3 * MIB - 4096  # just under the default 3 MiB body cap
CLIENT_HELLO_START = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"  # a TLS record, cut short
SHAPES = (
    "empty_objects",
    "empty_arrays",
    "many_keys",
    "short_strings",
    "big_string",
    "valid_batch",
    "brackets_in_string",
    "deep_nesting",
)
SPAWN = multiprocessing.get_context("spawn")


# -- bodies (pure) ----------------------------------------------------------------------


def _record(rid: str, name: str, rv: int, data: dict[str, str]) -> dict[str, Any]:
    return dict(
        conversion.from_configmap(
            {
                "metadata": {
                    "namespace": "team-a",
                    "name": name,
                    "uid": "u-" + name,
                    "resourceVersion": str(rv),
                },
                "data": data,
            },
            runtime_id=rid,
            source="webhook",
        )
    )


def _batch_of(items: bytes) -> bytes:
    head = json.dumps({"apiVersion": changes.API_VERSION, "kind": changes.LIST_KIND})[:-1]
    return head.encode() + b', "items": [' + items + b"]}"


def _repeat(item: bytes, room: int) -> bytes:
    return b",".join([item] * (room // (len(item) + 1)))


def _record_with_data(rid: str, data: bytes) -> bytes:
    rec = _record(rid, "hostile", 1, {})
    del rec["data"]
    return json.dumps(rec)[:-1].encode() + b', "data": {' + data + b"}}"


def body(shape: str, rid: str, size: int = BODY) -> bytes:
    """A body of about ``size`` bytes (never over it) of ``shape`` for runtime ``rid``."""
    room = size - 400
    if shape == "empty_objects":  # ~1 million {} in a batch's items
        return _batch_of(_repeat(b"{}", room))
    if shape == "empty_arrays":
        return _batch_of(_repeat(b"[]", room))
    if shape == "many_keys":  # one record whose data has ~240,000 distinct keys
        return _record_with_data(rid, b",".join(b'"k%07d":""' % i for i in range(room // 14)))
    if shape == "short_strings":  # ~630,000 distinct 2-character strings in items
        return _batch_of(_repeat(b'"ab"', room))
    if shape == "big_string":  # one data value of ~3 MiB
        return _record_with_data(rid, b'"k":"' + b"x" * (room - 8) + b'"')
    if shape == "brackets_in_string":  # three data values of ~1 MiB of "[" each
        third = room // 3 - 12
        return _record_with_data(
            rid, b",".join(b'"k%d":"' % i + b"[" * third + b'"' for i in range(3))
        )
    if shape == "deep_nesting":  # objects nested ~520,000 deep
        depth = room // 6
        return b'{"a":' * depth + b"1" + b"}" * depth
    if shape == "valid_batch":  # 500 records of ~6 KiB of data: a full, valid batch
        return valid_batch(rid, "full", 1, size)
    raise ValueError(shape)


def valid_batch(rid: str, prefix: str, rv: int, size: int = BODY) -> bytes:
    """The largest valid batch within ``size``: 500 records, 12 data values each."""
    length = size // 500 // 12
    while True:
        recs = [
            _record(rid, f"{prefix}-{i:03d}", rv, {f"key-{k:02d}": "v" * length for k in range(12)})
            for i in range(500)
        ]
        raw = json.dumps(changes.batch(recs)).encode()  # type: ignore[arg-type]
        if len(raw) <= size:
            return raw
        length -= max(1, (len(raw) - size) // 6000 + 1)


# -- load generators (each runs in its own process) --------------------------------------


def _session(rt: dict[str, str]) -> requests.Session:
    s = requests.Session()
    s.trust_env = False
    s.verify = rt["server_ca"]
    s.cert = (rt["cert"], rt["key"])
    return s


def _post(
    s: requests.Session,
    url: str,
    data: bytes,
    stats: collections.Counter[str],
    times: list[float] | None = None,
) -> None:
    t0 = time.perf_counter()
    try:
        r = s.post(url, data=data, headers={"Content-Type": "application/json"}, timeout=900)
        stats[str(r.status_code)] += 1
    except requests.RequestException as e:
        stats["error:" + type(e).__name__] += 1
        s.close()  # reconnect
    if times is not None:
        times.append(time.perf_counter() - t0)


def hammer(
    base_url: str,
    jobs: list[tuple[dict[str, str], str]],
    seconds: float,
    pace: float,
    barrier: BarrierT,
    stop: EventT,
    out: Any,
) -> None:
    """One thread per (runtime, body kind): post that body on one keep-alive connection,
    for ``seconds`` (> 0) or until ``stop`` is set; ``pace`` requests/s per thread (0: as
    fast as it can). Body kinds: a SHAPE, "small" (one small record, a new
    resourceVersion each time) or "valid" (the runtime's 3 MiB batch).
    Puts {statuses, count, seconds, latencies} on ``out``."""
    bodies: dict[tuple[str, str], bytes] = {}
    for rt, kind in jobs:
        if kind in SHAPES and (rt["id"], kind) not in bodies:
            bodies[(rt["id"], kind)] = body(kind, rt["id"])
        elif kind == "valid" and (rt["id"], kind) not in bodies:
            bodies[(rt["id"], kind)] = valid_batch(rt["id"], "noisy", 1)
    stats: collections.Counter[str] = collections.Counter()
    times: list[float] = []
    lock = threading.Lock()
    barrier.wait(timeout=120)
    t_start = time.monotonic()
    end = t_start + seconds if seconds > 0 else float("inf")

    def run(n: int, rt: dict[str, str], kind: str) -> None:
        s = _session(rt)
        url = f"{base_url}/v1/runtimes/{rt['id']}/changes"
        mine: collections.Counter[str] = collections.Counter()
        lat: list[float] = []
        rv = n * 10**9 + int(time.time() * 1000)
        nxt = time.monotonic()
        while time.monotonic() < end and not stop.is_set():
            if pace > 0:
                nxt += 1.0 / pace
                stop.wait(max(0.0, nxt - time.monotonic()))
            if kind == "small":
                rv += 1
                data = json.dumps(_record(rt["id"], f"noisy-{n % 50}", rv, {"v": "1"})).encode()
            else:
                data = bodies[(rt["id"], kind)]
            _post(s, url, data, mine, lat)
        s.close()
        with lock:
            stats.update(mine)
            times.extend(lat)

    threads = [
        threading.Thread(target=run, args=(i, rt, kind), daemon=True)
        for i, (rt, kind) in enumerate(jobs)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put(
        {
            "statuses": dict(stats),
            "count": sum(stats.values()),
            "seconds": time.monotonic() - t_start,
            "latencies": times,
        }
    )


def stall(port: int, target: int, barrier: BarrierT, stop: EventT, out: Any) -> None:
    """Keep ``target`` TCP connections open that sent the start of a ClientHello and wait;
    reopen each one the server closes. Puts {opened, closed_by_server, open_at_end}."""
    sel = selectors.DefaultSelector()
    opened = closed = 0

    def open_one() -> None:
        nonlocal opened
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(CLIENT_HELLO_START)
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ)
            opened += 1
        except OSError:
            time.sleep(0.01)

    barrier.wait(timeout=120)
    while len(sel.get_map()) < target and not stop.is_set():
        open_one()
    while not stop.is_set():
        for key, _ in sel.select(timeout=0.2):
            s = key.fileobj
            assert isinstance(s, socket.socket)
            try:
                gone = not s.recv(4096)
            except BlockingIOError:
                gone = False
            except OSError:
                gone = True
            if gone:
                sel.unregister(s)
                s.close()
                closed += 1
        while len(sel.get_map()) < target and not stop.is_set():
            open_one()
    n_open = len(sel.get_map())
    for key in list(sel.get_map().values()):
        key.fileobj.close()  # type: ignore[union-attr]
    out.put({"opened": opened, "closed_by_server": closed, "open_at_end": n_open})


def _proc_status(pid: int) -> dict[str, int]:
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0]) * 1024
            elif k == "Threads":
                out[k] = int(v)
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                out["Pss"] = int(line.split()[1]) * 1024
    return out


def sample(pids: list[int], interval: float, barrier: BarrierT, stop: EventT, out: Any) -> None:
    """Every ``interval`` s: VmRSS and Pss of each pid; the peak of each and of their sum."""
    peak: dict[int, dict[str, int]] = {p: {"VmRSS": 0, "Pss": 0, "Threads": 0} for p in pids}
    pod_rss = pod_pss = samples = 0
    barrier.wait(timeout=120)
    while not stop.is_set():
        rss = pss = 0
        for p in pids:
            try:
                st = _proc_status(p)
            except OSError:
                continue
            for k in ("VmRSS", "Pss", "Threads"):
                peak[p][k] = max(peak[p][k], st.get(k, 0))
            rss += st.get("VmRSS", 0)
            pss += st.get("Pss", 0)
        pod_rss, pod_pss = max(pod_rss, rss), max(pod_pss, pss)
        samples += 1
        stop.wait(interval)
    out.put({"per_pid": peak, "pod_rss": pod_rss, "pod_pss": pod_pss, "samples": samples})


def niced(nice: int, fn: Callable[..., None], *args: Any) -> None:
    """``fn(*args)`` at ``nice`` (a load generator yields its core to the measuring client)."""
    os.nice(nice)
    fn(*args)


class Background:
    """Processes started together behind one barrier, stopped by one event; ``nice``: the
    processes' nice value."""

    def __init__(
        self, targets: list[tuple[Callable[..., None], tuple[Any, ...]]], nice: int = 0
    ) -> None:
        self.stop = SPAWN.Event()
        self.out: Any = SPAWN.Queue()
        barrier = SPAWN.Barrier(len(targets) + 1)
        self.procs = [
            SPAWN.Process(
                target=niced, args=(nice, fn, *args, barrier, self.stop, self.out), daemon=True
            )
            for fn, args in targets
        ]
        for p in self.procs:
            p.start()
        barrier.wait(timeout=90)
        self.started = time.monotonic()

    def finish(self, timeout: float = 300, stop: bool = True) -> list[dict[str, Any]]:
        """The processes' results; ``stop=False`` lets them end by themselves."""
        if stop:
            self.stop.set()
        results = []
        deadline = time.monotonic() + timeout
        for _ in self.procs:
            try:
                results.append(self.out.get(timeout=max(1.0, deadline - time.monotonic())))
            except queue.Empty:
                break
        for p in self.procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
        return results


def merge(results: list[dict[str, Any]]) -> dict[str, Any]:
    stats: collections.Counter[str] = collections.Counter()
    lat: list[float] = []
    for r in results:
        stats.update(r["statuses"])
        lat.extend(r["latencies"])
    secs = max((r["seconds"] for r in results), default=0.0)
    return {
        "statuses": dict(sorted(stats.items())),
        "requests": sum(stats.values()),
        "seconds": round(secs, 1),
        "per_s": round(sum(stats.values()) / secs, 1) if secs else 0.0,
        "latency_p50_ms": round(pct(lat, 50) * 1000, 1) if lat else None,
        "latency_max_ms": round(max(lat) * 1000, 1) if lat else None,
    }


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(p / 100 * len(s) + 0.5) - 1))]


# -- the listener ------------------------------------------------------------------------


@contextlib.contextmanager
def priority(nice: int) -> Iterator[None]:
    """The calling thread at ``nice`` (Linux: per thread), back to its own after."""
    before = os.getpriority(os.PRIO_PROCESS, 0)
    try:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    except PermissionError:  # not root: a negative nice is not allowed; measured unchanged
        nice = before
    try:
        yield
    finally:
        if nice != before:
            os.setpriority(os.PRIO_PROCESS, 0, before)


def cpu_times(listener: int) -> dict[str, float]:
    """CPU seconds so far: the listener's processes, and each core busy in all (``cpuN``),
    with the wall clock (``at``)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {"at": time.monotonic(), "listener": 0.0}
    for pid in [listener, *workers_of(listener)]:
        try:
            fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out["listener"] += (int(fields[11]) + int(fields[12])) / tick
    for line in pathlib.Path("/proc/stat").read_text().splitlines():
        name, *values = line.split()
        if name.startswith("cpu") and name != "cpu":
            v = [int(x) for x in values[:8]]
            out[name] = (sum(v) - v[3] - v[4]) / tick
    return out


def cpu_share(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Per second of a slice: the listener's CPU seconds and each core's busy share."""
    wall = max(after["at"] - before["at"], 1e-6)
    return {k: (after[k] - before[k]) / wall for k in after if k != "at" and k in before}


def workers_of(pid: int) -> list[int]:
    try:
        text = pathlib.Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return sorted(int(p) for p in text.split())


def start_listener(
    env: lt.Env, name: str, args: argparse.Namespace, **extra: str
) -> tuple[lt.ListenerProcess, list[int]]:
    prom = env.dir / f"prom-{name}"
    prom.mkdir()
    kind = lt.ConfinedListenerProcess if args.limits == "on" else lt.ListenerProcess
    proc = kind(
        env,
        name,
        TETHER_LISTENER_WORKERS=str(args.workers),
        TETHER_LISTENER_THREADS=str(args.threads),
        TETHER_LISTENER_MAX_IN_FLIGHT_PER_RUNTIME=str(args.in_flight),
        # the test fixture's overrides back to the product's defaults
        TETHER_LISTENER_KCP_TIMEOUT_SECONDS="",
        TETHER_LISTENER_RETRY_AFTER_SECONDS="",
        PROMETHEUS_MULTIPROC_DIR=str(prom),
        **extra,
    )
    args.placed.to_part(proc.proc.pid)  # the arbiter: the workers it forks later follow it
    deadline = time.monotonic() + 30
    pids = workers_of(proc.proc.pid)
    while len(pids) < args.workers and time.monotonic() < deadline:
        time.sleep(0.2)
        pids = workers_of(proc.proc.pid)
    args.placed.to_part(proc.proc.pid)  # and the workers forked before it was placed
    return proc, pids


def limits_held(proc: lt.ListenerProcess) -> dict[str, Any]:
    """The cgroup's peak and OOM kills of a confined listener (after it stopped)."""
    u = proc.usage
    if u is None:
        return {"cgroup": "not confined"}
    return {
        "cgroup": u.text(),
        "cgroup_oom_kills": u.oom_kills,
        "cgroup_peak_mib": None if u.peak is None else round(u.peak / MIB, 1),
    }


def log_findings(proc: lt.ListenerProcess, workers: int) -> dict[str, Any]:
    text = proc.log_file.read_text(errors="replace")
    lines = text.splitlines()
    bad = [
        ln[:300]
        for ln in lines
        if "Traceback" in ln
        or "WORKER TIMEOUT" in ln
        or "was sent" in ln
        or '"status": 500' in ln
        or "Exception" in ln
    ]
    boots = sum("Booting worker" in ln for ln in lines)
    return {
        "worker_boots": boots,
        "worker_restarts": max(0, boots - workers),
        "suspicious_log_lines": bad[:20],
    }


def probe(proc: lt.ListenerProcess, rt: lt.Runtime, name: str) -> dict[str, Any]:
    """One legitimate POST (new connection): status and seconds."""
    s = rt.session()
    t0 = time.perf_counter()
    try:
        r = s.post(f"{proc.url}/v1/runtimes/{rt.id}/changes", json=rt.record(name, 1), timeout=60)
        status: int | str = r.status_code
    except requests.RequestException as e:
        status = "error:" + type(e).__name__
    finally:
        s.close()
    return {"status": status, "seconds": round(time.perf_counter() - t0, 3)}


def rt_spec(rt: lt.Runtime) -> dict[str, str]:
    return {
        "id": rt.id,
        "cert": str(rt.cert_file),
        "key": str(rt.key_file),
        "server_ca": str(rt.env.server_ca_file),
    }


def split(jobs: list[Any], parts: int) -> list[list[Any]]:
    return [p for p in (jobs[i::parts] for i in range(parts)) if p]


def memory_shape(
    env: lt.Env,
    args: argparse.Namespace,
    shape: str,
    attackers: list[lt.Runtime],
    legit: lt.Runtime,
) -> dict[str, Any]:
    proc, pids = start_listener(
        env,
        f"mem-{shape}",
        args,
        TETHER_LISTENER_RATE_PER_SECOND="100000",
        TETHER_LISTENER_RATE_BURST="100000",
    )
    try:
        all_pids = [proc.proc.pid, *pids]
        sampler = Background([(sample, (all_pids, 0.05))])
        jobs = [(rt_spec(rt), shape) for rt in attackers for _ in range(args.conns)]
        load = Background(
            [(hammer, (proc.url, part, args.seconds, 0.0)) for part in split(jobs, args.procs)]
        )
        attack = merge(load.finish(timeout=args.shape_timeout, stop=False))
        after = probe(proc, legit, "after-" + shape.replace("_", "-"))
        peaks = sampler.finish()[0]
        hwm = {}
        for p in pids:
            try:
                hwm[p] = _proc_status(p)
            except OSError:
                hwm[p] = {}
        alive = proc.proc.poll() is None
        still = workers_of(proc.proc.pid)
    finally:
        proc.stop()
    per_worker = []
    for p in pids:
        pk = peaks["per_pid"].get(p, {})
        per_worker.append(
            {
                "pid": p,
                "vm_hwm_mib": round(hwm[p].get("VmHWM", 0) / MIB, 1),
                "rss_peak_sampled_mib": round(pk.get("VmRSS", 0) / MIB, 1),
                "pss_peak_sampled_mib": round(pk.get("Pss", 0) / MIB, 1),
                "threads_at_end": hwm[p].get("Threads"),
            }
        )
    arbiter = peaks["per_pid"].get(proc.proc.pid, {})
    hwm_sum = sum(w["vm_hwm_mib"] for w in per_worker) + arbiter.get("VmRSS", 0) / MIB
    return {
        "shape": shape,
        "body_bytes": len(body(shape, attackers[0].id)),
        "connections": len(jobs),
        "attack": attack,
        "legit_after": after,
        "workers": per_worker,
        "arbiter_rss_mib": round(arbiter.get("VmRSS", 0) / MIB, 1),
        "pod_hwm_sum_mib": round(hwm_sum, 1),
        "pod_rss_peak_sampled_mib": round(peaks["pod_rss"] / MIB, 1),
        "pod_pss_peak_sampled_mib": round(peaks["pod_pss"] / MIB, 1),
        "pod_vs_limit": round(hwm_sum / LIMIT_MIB, 3),
        "samples": peaks["samples"],
        "listener_alive": alive,
        "workers_replaced": sorted(set(still) - set(pids)),
        **log_findings(proc, args.workers),
        **limits_held(proc),
    }


def legit_run(
    proc: lt.ListenerProcess,
    pool: list[lt.Runtime],
    sessions: list[requests.Session],
    tag: str,
    n: int,
    rate: float,
    lat: list[float],
    stats: collections.Counter[str],
) -> None:
    """``n`` sequential POSTs of one small record, paced at ``rate``/s, round-robin over the
    legitimate runtimes; latencies and statuses are added to ``lat`` and ``stats``."""
    interval = 1.0 / rate
    nxt = time.monotonic()
    for i in range(n):
        rt, s = pool[i % len(pool)], sessions[i % len(pool)]
        rec = json.dumps(rt.record(f"legit-{tag}-{i}", 1)).encode()
        _post(s, f"{proc.url}/v1/runtimes/{rt.id}/changes", rec, stats, lat)
        nxt += interval
        time.sleep(max(0.0, nxt - time.monotonic()))


def fairness(
    env: lt.Env,
    args: argparse.Namespace,
    pool: list[lt.Runtime],
    noisy: lt.Runtime,
    greedy: lt.Runtime,
) -> dict[str, Any]:
    """The conditions alternate over ROUNDS slices of the legitimate requests (alone,
    stalled, noisy, greedy, alone, stalled, ...), so that drift of the shared machine's
    load hits all of them alike."""
    proc, pids = start_listener(
        env,
        "fairness",
        args,
        TETHER_LISTENER_RATE_PER_SECOND=str(args.rate),
        TETHER_LISTENER_RATE_BURST=str(args.burst),
    )
    noisy_jobs = [(rt_spec(noisy), "small")] * args.noisy_threads
    greedy_jobs = [(rt_spec(greedy), "valid")] * args.greedy_conns
    # paced at NOISY_TIMES x the runtime's limit (rate x workers), or as fast as it can (0)
    pace = args.noisy_times * args.rate * args.workers / args.noisy_threads
    paced = f", paced at {args.noisy_times:g}x its limit" if pace else ", as fast as it can"
    every: list[tuple[str, str, Callable[[], Background | None], float]] = [
        ("alone", "alone", lambda: None, 0.0),
        (
            "stalled",
            f"{args.stalled} stalled handshakes",
            lambda: Background([(stall, (proc.port, args.stalled))], args.nice),
            1.0,
        ),
        (
            "noisy-rate",
            f"noisy: {args.noisy_threads} threads of small records{paced}",
            lambda: Background(
                [(hammer, (proc.url, part, 0, pace)) for part in split(noisy_jobs, 3)], args.nice
            ),
            1.0,
        ),
        (
            "noisy-bodies",
            f"noisy: 3 MiB batches on {args.greedy_conns} connections",
            lambda: Background(
                [(hammer, (proc.url, part, 0, 0.0)) for part in split(greedy_jobs, 4)], args.nice
            ),
            2.0,
        ),
    ]
    conditions = [c for c in every if c[0] == "alone" or c[0] in args.conditions.split(",")]
    lat: dict[str, list[float]] = {c[0]: [] for c in conditions}
    rounds_p99: dict[str, list[float]] = {c[0]: [] for c in conditions}
    stats: dict[str, collections.Counter[str]] = {c[0]: collections.Counter() for c in conditions}
    background: dict[str, list[dict[str, Any]]] = {c[0]: [] for c in conditions}
    cpu: dict[str, list[dict[str, float]]] = {c[0]: [] for c in conditions}
    per_slice = max(1, args.requests // args.rounds)
    try:
        sampler = Background([(sample, ([proc.proc.pid, *pids], 0.2))])
        sessions = [rt.session() for rt in pool]
        for i, (rt, s) in enumerate(zip(pool, sessions, strict=True)):  # connect
            s.post(
                f"{proc.url}/v1/runtimes/{rt.id}/changes",
                json=rt.record(f"warm-{i}", 1),
                timeout=60,
            ).raise_for_status()
        legit_run(
            proc, pool, sessions, "warm", 2 * len(pool), args.legit_rate, [], collections.Counter()
        )
        for rnd in range(args.rounds):
            for key, _, start, settle in conditions:
                bg = start()
                time.sleep(settle)
                mine: list[float] = []
                cpu0 = cpu_times(proc.proc.pid)
                with priority(args.client_nice):  # this thread only: nothing forks meanwhile
                    legit_run(
                        proc,
                        pool,
                        sessions,
                        f"{key}-{rnd}",
                        per_slice,
                        args.legit_rate,
                        mine,
                        stats[key],
                    )
                cpu[key].append(cpu_share(cpu0, cpu_times(proc.proc.pid)))
                lat[key].extend(mine)
                rounds_p99[key].append(round(pct(mine, 99) * 1000, 1))
                if bg is not None:
                    res = bg.finish()
                    background[key].append(res[0] if key == "stalled" else merge(res))
                print(
                    f"  round {rnd} {key}: p50 {pct(mine, 50) * 1000:.1f} ms "
                    f"p99 {pct(mine, 99) * 1000:.1f} ms",
                    flush=True,
                )
        for s in sessions:
            s.close()
        peaks = sampler.finish()[0]
    finally:
        proc.stop()
    rows: list[dict[str, Any]] = []
    for key, label, _, _ in conditions:
        v = lat[key]
        row: dict[str, Any] = {
            "condition": label,
            "key": key,
            "requests": len(v),
            "statuses": dict(sorted(stats[key].items())),
            "p50_ms": round(pct(v, 50) * 1000, 2),
            "p99_ms": round(pct(v, 99) * 1000, 2),
            "mean_ms": round(statistics.fmean(v) * 1000, 2),
            "max_ms": round(max(v) * 1000, 2),
            "p99_ms_per_round": rounds_p99[key],
            "legit_429": stats[key].get("429", 0),
            "cpu_busy": {
                k: round(statistics.fmean(c[k] for c in cpu[key]), 2) for k in cpu[key][0]
            },
        }
        bgs = background[key]
        if key == "stalled":
            row["background"] = {k: sum(b[k] for b in bgs) for k in ("opened", "closed_by_server")}
            row["background"]["open_at_end"] = [b["open_at_end"] for b in bgs]
        elif bgs:
            st: collections.Counter[str] = collections.Counter()
            for b in bgs:
                st.update(b["statuses"])
            secs = sum(b["seconds"] for b in bgs)
            per_s = round(sum(st.values()) / secs, 1)
            row["background"] = {
                "statuses": dict(sorted(st.items())),
                "seconds": round(secs, 1),
                "per_s": per_s,
                "times_its_limit": round(per_s / (args.rate * args.workers), 1),
            }
        rows.append(row)
    base = rows[0]
    for r in rows:
        r["p50_ratio"] = round(r["p50_ms"] / base["p50_ms"], 2)
        r["p99_ratio"] = round(r["p99_ms"] / base["p99_ms"], 2)
    return {
        "rows": rows,
        "rounds": args.rounds,
        "pod_rss_peak_sampled_mib": round(peaks["pod_rss"] / MIB, 1),
        "pod_pss_peak_sampled_mib": round(peaks["pod_pss"] / MIB, 1),
        **log_findings(proc, args.workers),
        **limits_held(proc),
    }


def _arguments() -> argparse.Namespace:
    ap = skeleton.options("listener_abuse")
    ap.add_argument(
        "--short", action="store_true", help="a quick check: 2 s per shape, 100 legitimate requests"
    )
    ap.add_argument(
        "--placement",
        choices=cpuset.KINDS,
        default="split",
        help="split: the listener on the last core, this process and its load "
        "generators on the others (cgroup cpusets); none: unpinned",
    )
    ap.add_argument(
        "--limits",
        choices=("on", "off"),
        default="on",
        help="on: every listener in a cgroup with the Deployment's memory limit "
        "(768Mi); its peak and OOM kills in the results",
    )
    ap.add_argument(
        "--kcp-placement",
        choices=("unpinned", "part"),
        default="unpinned",
        help="the KCP plane's processes: unpinned, or on the listener's core",
    )
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--in-flight", type=int, default=4, help="MAX_IN_FLIGHT_PER_RUNTIME")
    ap.add_argument("--runtimes", type=int, default=16, help="attacking runtimes per shape")
    ap.add_argument("--conns", type=int, default=4, help="connections per attacking runtime")
    ap.add_argument("--seconds", type=float, default=6.0, help="attack per shape")
    ap.add_argument("--shape-timeout", type=float, default=900.0)
    ap.add_argument("--procs", type=int, default=4, help="load generator processes")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument(
        "--conditions",
        default="stalled,noisy-rate,noisy-bodies",
        help="next to 'alone', which always runs",
    )
    ap.add_argument("--requests", type=int, default=300, help="legitimate, per condition")
    ap.add_argument("--rounds", type=int, default=3, help="slices the conditions alternate over")
    ap.add_argument("--legit", type=int, default=20, help="legitimate runtimes, round-robin")
    ap.add_argument("--legit-rate", type=float, default=10.0, help="legitimate requests/s")
    ap.add_argument("--rate", type=float, default=2.0, help="RATE_PER_SECOND (fairness)")
    ap.add_argument("--burst", type=int, default=4, help="RATE_BURST (fairness)")
    ap.add_argument("--stalled", type=int, default=500)
    ap.add_argument("--noisy-threads", type=int, default=24)
    ap.add_argument(
        "--noisy-times",
        type=float,
        default=100.0,
        help="the noisy runtime's pace, x its limit (RATE x workers); 0: flat out",
    )
    ap.add_argument("--nice", type=int, default=0, help="the noisy generators' nice value")
    ap.add_argument(
        "--client-nice",
        type=int,
        default=-10,
        help="the legitimate client's thread while it measures (root): on the "
        "generators' core it goes first, as if they were on another machine",
    )
    ap.add_argument(
        "--greedy-conns", type=int, default=128, help="MAX_CONNECTIONS_PER_RUNTIME (64) x workers"
    )
    args = skeleton.parse(ap, report)
    if args.short:
        args.seconds, args.requests = 2.0, 100
    return args


def main() -> int:
    args = _arguments()
    shapes = [s for s in args.shapes.split(",") if s]
    started = time.monotonic()
    began = provenance.start()
    with (
        tempfile.TemporaryDirectory(prefix="tether-abuse-") as tmp,
        controlplane.ControlPlane("kcp") as kcp,
    ):
        # after the KCP plane started: it stays unpinned (in a cluster it has nodes of its own)
        args.placed = cpuset.placement(args.placement, "listener-abuse")
        try:
            args.placed.to_generator(os.getpid())  # and the generators it spawns from now on
            if args.kcp_placement == "part":  # the KCP apiserver and etcd next to the listener
                assert kcp._apiserver is not None and kcp._etcd is not None
                args.placed.to_part(kcp._apiserver.popen.pid)
                args.placed.to_part(kcp._etcd.popen.pid)
            print(args.placed.text(), flush=True)
            fair, memory = run(kcp, pathlib.Path(tmp), args, shapes)
        finally:
            args.placed.close()
    placed = args.placed.describe()
    settings = {k: v for k, v in vars(args).items() if k not in ("placed", "out", "report")}
    doc = {
        "machine": skeleton.machine(kube_apiserver=controlplane.kube_apiserver_version()),
        "placement": placed,
        "settings": {
            **settings,
            "limit_mib": LIMIT_MIB,
            "body_bytes": BODY,
            "memory_phase_rate": "100000/s, burst 100000 (rate never refuses)",
            "memory_sampling": "VmHWM per worker at the end (fresh listener per "
            "shape); VmRSS and Pss every 50 ms",
        },
        "memory": memory,
        "fairness": fair,
        "seconds_total": round(time.monotonic() - started, 1),
    }
    report(skeleton.write(args.out, "listener_abuse", began, doc))
    return 0


def run(
    kcp: controlplane.ControlPlane, d: pathlib.Path, args: argparse.Namespace, shapes: list[str]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    api = kcp.api_client()
    controlplane.install_crds(api, controlplane.KYMA_CRD, *lt.CRD_FILES)
    env = lt.make_env(kcp, api, d, "abuse")

    def runtime(rid: str) -> lt.Runtime:
        return lt.add_runtime(env, rid)

    attackers = [runtime(f"rt-attack-{i:02d}") for i in range(args.runtimes if shapes else 0)]
    pool = [runtime(f"rt-legit-{i:02d}") for i in range(args.legit)]
    noisy, greedy = runtime("rt-noisy"), runtime("rt-greedy")
    fair = fairness(env, args, pool, noisy, greedy)  # first: on a KCP no shape has loaded
    memory = []
    for shape in shapes:
        t0 = time.monotonic()
        memory.append(memory_shape(env, args, shape, attackers, pool[0]))
        memory[-1]["seconds_total"] = round(time.monotonic() - t0, 1)
        print(
            f"  {shape}: {memory[-1]['attack']['statuses']} "
            f"pod {memory[-1]['pod_hwm_sum_mib']} MiB",
            flush=True,
        )
    api.close()
    return fair, memory


def report(doc: dict[str, Any]) -> None:
    """The tables of a result (``--report`` prints them again from the JSON)."""
    st = doc["settings"]
    if doc["memory"]:
        print(
            f"\nMemory per body shape ({st['workers']} workers x {st['threads']} threads; "
            f"{st['runtimes']} runtimes x {st['conns']} connections; limit {LIMIT_MIB} MiB)"
        )
        print(
            f"{'shape':20} {'body MiB':>8} {'requests':>8} {'p50 ms':>7}  {'answers':32} "
            f"{'worker HWM MiB':>16} {'pod MiB':>8} {'/limit':>6} {'pod Pss':>7} {'after':>6}"
        )
    for m in doc["memory"]:
        hw = "/".join(f"{w['vm_hwm_mib']:.0f}" for w in m["workers"])
        ans = " ".join(f"{k}:{v}" for k, v in m["attack"]["statuses"].items())
        print(
            f"{m['shape']:20} {m['body_bytes'] / MIB:8.2f} {m['attack']['requests']:8d} "
            f"{m['attack']['latency_p50_ms'] or 0:7.0f}  {ans:32} {hw:>16} "
            f"{m['pod_hwm_sum_mib']:8.0f} {m['pod_vs_limit']:6.2f} "
            f"{m['pod_pss_peak_sampled_mib']:7.0f} "
            f"{m['legit_after']['status']!s:>6}"
        )
    print(
        f"\nA legitimate runtime's latency ({st['requests']} sequential POSTs at "
        f"{st['legit_rate']:g}/s over {st['legit']} runtimes; rate limit {st['rate']:g}/s, "
        f"burst {st['burst']} per worker x {st['workers']} workers)"
    )
    print(
        "| condition | p50 ms | p99 ms | p50 × alone | p99 × alone | p99 per round ms | 429 "
        "| listener CPU | cores busy | background |"
    )
    print("|---|---:|---:|---:|---:|---|---:|---:|---|---|")
    for r in doc["fairness"]["rows"]:
        bgd = r.get("background", {})
        note = ""
        if "statuses" in bgd:
            note = f"{bgd['per_s']}/s = {bgd['times_its_limit']}× its limit; " + ", ".join(
                f"{v} × {k}" for k, v in bgd["statuses"].items()
            )
        elif bgd:
            note = f"reopened {bgd['opened']}, closed by server {bgd['closed_by_server']}"
        rounds = ", ".join(f"{x:g}" for x in r["p99_ms_per_round"])
        busy = r.get("cpu_busy", {})
        cores = " / ".join(f"{k} {v:.0%}" for k, v in sorted(busy.items()) if k.startswith("cpu"))
        share = f"{busy['listener']:.0%}" if "listener" in busy else "-"
        print(
            f"| {r['condition']} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['p50_ratio']:.2f} | "
            f"{r['p99_ratio']:.2f} | {rounds} | {r['legit_429']} | {share} | {cores} | {note} |"
        )
    for m in doc["memory"]:
        print(f"  {m['shape']}: {m.get('cgroup', 'not recorded')}")
    print(f"  fairness listener: {doc['fairness'].get('cgroup', 'not recorded')}")
    placed = doc.get("placement", {"kind": "none", "reason": "not recorded"})
    kcp = "on the listener's core" if st.get("kcp_placement") == "part" else "unpinned"
    where = (
        f"split: listener on cpu {placed['part_cpus']}, generators on cpu "
        f"{placed['generator_cpus']}, KCP plane {kcp}"
        if placed["kind"] == "split"
        else f"none ({placed['reason']})"
    )
    print(f"\nplacement: {where}")
    print(provenance.footer(doc))


if __name__ == "__main__":
    sys.exit(main())
