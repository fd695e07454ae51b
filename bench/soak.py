"""Soak (not in CI): steady load with random faults from the fault suite; memory, open
files and CPU of every process sampled throughout; a flatness verdict per process.

The stack is the fault suite's (``testing.faultstack.Stack``, composed here, not copied):
an SKR and a KCP plane of their own (real etcd + kube-apiserver each), the real listener
(gunicorn, mTLS) behind the partition proxy, the real webhook (gunicorn, TLS) registered
with ``failurePolicy: Ignore``, two leader-elected ``tether poller`` processes (interval
3 s), and ``tether compass`` (``faultstack.CompassProcess``) against the Director stand-in
(in this process, so it can be stopped) for a few Kyma CRs whose token Secrets live in the
SKR plane.

Load: a customer (``faultstack.Workload``) writing ConfigMaps at ``--rate`` writes/s
(default 4) over 40 names, one write at a time, for the whole run; on every Director fault
one Kyma CR is created and the oldest deleted (provisioning's churn).

Faults: from minute 2, every ``--fault-every`` seconds (default 180, ±20 s jitter), one of
the suite's set, picked by a seeded RNG (``--seed``) as shuffled rounds of all kinds so
each comes up; the schedule is printed before the run. After each fault has healed, the
convergence check: the KCP holds exactly the runtime's ConfigMaps
(``Stack.difference() == ''``), and for the Director fault the Director exactly the Kyma
CRs (each Ready, registered once, a valid token in its runtime), timed from the heal. The
check runs while the customer keeps writing; if it has not matched after 30 s the customer
is paused until it does (``paused`` in the results; never needed in the runs so far).

Samples: every ``--sample-every`` seconds (default 5), for every process (both etcds and
kube-apiservers, the listener's arbiter and workers, the webhook's arbiter and workers,
both pollers, compass, and this driver: proxy, Director stand-in, customer): RSS
(VmRSS of /proc/<pid>/status), open files (entries of /proc/<pid>/fd), threads and CPU
(utime+stime of /proc/<pid>/stat over the interval). A restarted process (new pid) goes on
as the same series; workers are series by their rank among the arbiter's children.

Flatness: per process, the median of the last window against the median of the window
after warm-up (minutes 5–10 and the last 5 minutes of a 30-minute run; for shorter runs
windows of a sixth of the run each, at a third and at the end); flagged when RSS grew by
more than 10 % and 8 MiB, or open files by more than 20 % and 5.

Writes bench/results/soak.json and docs/images/soak-memory.png, soak-open-files.png.

    .venv/bin/python bench/soak.py [--minutes 30] [--seed 1] [--rate 4] [--fault-every 180]
    .venv/bin/python bench/soak.py --report bench/results/soak.json   # tables, plots again

About 32 minutes for the default 30 (planes and stack ~30 s, the final checks ~10 s).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime
import logging
import os
import pathlib
import platform
import random
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import provenance
import skeleton
from kubernetes import client

from compass import model
from standins.director import server as server_mod
from standins.director import store as store_mod
from testing import compassenv, controlplane, faultstack, listenerenv, localnet

IMAGES = skeleton.REPO / "docs" / "images"
KINDS = (
    "listener killed",
    "webhook killed",
    "KCP apiserver restarted",
    "SKR apiserver restarted",
    "poller leader killed",
    "listener black-holed",
    "Director down",
)
RSS_GROWTH, RSS_MIB = 0.10, 8.0
FD_GROWTH, FD_ABS = 0.20, 5
CLK = os.sysconf("SC_CLK_TCK")


def log(msg: str) -> None:
    print(f"[{datetime.datetime.now(datetime.UTC):%H:%M:%S}] {msg}", flush=True)


# -- the customer, pausable ------------------------------------------------------------


class Customer(faultstack.Workload):
    """``Workload`` with a pause (for a convergence check that cannot match under load)."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.running = threading.Event()
        self.running.set()

    def _step(self) -> faultstack.Write:
        self.running.wait()
        return super()._step()


# -- compass and the Director ---------------------------------------------------------


class Fleet:
    """Kyma CRs in one KCP namespace for compass, their token Secrets in the SKR plane."""

    def __init__(
        self,
        kcp_api: client.ApiClient,
        skr: controlplane.ControlPlane,
        director: compassenv.Director,
    ) -> None:
        self.kcp_api, self.skr, self.director = kcp_api, skr, director
        self.ns, self.secret_ns = f"sc-{uuid.uuid4().hex[:8]}", f"ss-{uuid.uuid4().hex[:8]}"
        client.CoreV1Api(kcp_api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=self.ns))
        )
        self.skr_api = skr.api_client()
        self.skr_core = client.CoreV1Api(self.skr_api)
        self.live: list[str] = []
        self.deleted: list[str] = []
        self.n = 0

    def create(self) -> str:
        name = f"k-{self.n:03d}"
        self.n += 1
        compassenv.create_kubeconfig_secret(self.kcp_api, self.ns, name, self.skr)
        compassenv.create_kyma(
            self.kcp_api, self.ns, name, compassenv.kyma_labels("ga-soak", f"{name}-{self.ns}")
        )
        self.live.append(name)
        return name

    def delete_oldest(self) -> str:
        name = self.live.pop(0)
        compassenv.delete_kyma(self.kcp_api, self.ns, name)
        client.CoreV1Api(self.kcp_api).delete_namespaced_secret(f"kubeconfig-{name}", self.ns)
        self.deleted.append(name)
        return name

    def difference(self) -> str:
        """'' when the Director and the runtime hold exactly what the Kyma CRs ask for."""
        problems = []
        store = self.director.store
        try:
            for n in self.live:
                ref = f"{self.ns}.{n}"
                regs = [r for r in store.all_runtimes() if r.labels.get(model.KYMA_REF) == ref]
                m = compassenv.get_mapping(self.kcp_api, self.ns, n) or {}
                state = (m.get("status") or {}).get("state", "")
                tok = self._token(n)
                if state != "Ready" or len(regs) != 1:
                    problems.append(f"{n}: {state or 'no mapping'}, {len(regs)} registrations")
                elif (
                    tok is None
                    or tok.get("RUNTIME_ID") != regs[0].id
                    or store.token_state(tok.get("TOKEN", "")) != "valid"
                ):
                    problems.append(f"{n}: no valid token in its runtime")
            for n in self.deleted:
                ref = f"{self.ns}.{n}"
                if (
                    any(r.labels.get(model.KYMA_REF) == ref for r in store.all_runtimes())
                    or compassenv.get_mapping(self.kcp_api, self.ns, n) is not None
                ):
                    problems.append(f"{n}: deleted but still registered or mapped")
        except Exception as e:  # noqa: BLE001 - an apiserver restarting: not yet
            return f"cannot compare: {type(e).__name__}: {str(e)[:200]}"
        return "; ".join(problems)

    def _token(self, name: str) -> dict[str, str] | None:
        try:
            sec: Any = self.skr_core.read_namespaced_secret(f"compass-agent-{name}", self.secret_ns)
        except client.ApiException as e:
            if e.status == 404:
                return None
            raise
        return {k: base64.b64decode(v).decode() for k, v in (sec.data or {}).items()}


def compass_env(fleet: Fleet, d: compassenv.Director, secret_file: pathlib.Path) -> dict[str, str]:
    """The fault suite's compass settings (tests/faults/test_director_down.py), interval 2 s."""
    return {
        **localnet.ENV,
        "TETHER_KCP_NAMESPACE": fleet.ns,
        "TETHER_COMPASS_LEASE_NAMESPACE": fleet.ns,
        "TETHER_COMPASS_DIRECTOR_URL": d.graphql_url,
        "TETHER_COMPASS_OAUTH_TOKEN_URL": d.token_url,
        "TETHER_COMPASS_OAUTH_CLIENT_ID": d.store.client_id,
        "TETHER_COMPASS_OAUTH_CLIENT_SECRET_FILE": str(secret_file),
        "TETHER_COMPASS_DIRECTOR_CA_FILE": str(d.ca_file),
        "TETHER_COMPASS_INTERVAL_SECONDS": "2",
        "TETHER_COMPASS_AGENT_SECRET_NAMESPACE": fleet.secret_ns,
        "TETHER_COMPASS_AGENT_SECRET_NAME": "compass-agent-{kyma}",
        "TETHER_COMPASS_DIRECTOR_TIMEOUT_SECONDS": "2",
        "TETHER_COMPASS_SKR_TIMEOUT_SECONDS": "5",
        "TETHER_COMPASS_BACKOFF_BASE_SECONDS": "0.5",
        "TETHER_COMPASS_BACKOFF_CAP_SECONDS": "2",
        "TETHER_COMPASS_BREAKER_THRESHOLD": "3",
        "TETHER_COMPASS_BREAKER_OPEN_SECONDS": "1",
        "TETHER_COMPASS_BREAKER_MAX_OPEN_SECONDS": "2",
    }


# -- sampling ---------------------------------------------------------------------------


def read_proc(pid: int) -> dict[str, float] | None:
    """RSS (MiB), open files, threads and CPU seconds of ``pid``; None if it is gone."""
    try:
        status = pathlib.Path(f"/proc/{pid}/status").read_text()
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    if stat[0] == "Z":
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return {
        "rss_mib": int(fields["VmRSS"].split()[0]) / 1024,
        "fds": fds,
        "threads": int(fields["Threads"]),
        "cpu_s": (int(stat[11]) + int(stat[12])) / CLK,
    }


class Sampler:
    """Samples every process of ``roots()`` (series name -> root pid or None) and the
    root's children as '<name> worker i', in a thread."""

    def __init__(
        self,
        roots: Callable[[], dict[str, int | None]],
        every: float,
        t0: float,
        leaves: frozenset[str] = frozenset(),
    ) -> None:
        self.roots, self.every, self.t0, self.leaves = roots, every, t0, leaves
        self.samples: list[dict[str, Any]] = []
        self._last: dict[str, tuple[int, float, float]] = {}  # series -> pid, cpu_s, at
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _pids(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for name, pid in self.roots().items():
            if pid is None or read_proc(pid) is None:
                continue
            out[name] = pid
            if name in self.leaves:
                continue
            kids = sorted(p for p in faultstack.descendants(pid) if read_proc(p) is not None)
            for i, k in enumerate(kids, 1):
                out[f"{name} worker {i}"] = k
        return out

    def sample(self) -> None:
        now = time.monotonic()
        row: dict[str, Any] = {"t": round(now - self.t0, 2), "procs": {}}
        for name, pid in self._pids().items():
            p = read_proc(pid)
            if p is None:
                continue
            prev = self._last.get(name)
            cpu = None
            if prev is not None and prev[0] == pid and now > prev[2]:
                cpu = round(100 * (p["cpu_s"] - prev[1]) / (now - prev[2]), 1)
            self._last[name] = (pid, p["cpu_s"], now)
            row["procs"][name] = {
                "pid": pid,
                "rss_mib": round(p["rss_mib"], 1),
                "fds": p["fds"],
                "threads": p["threads"],
                "cpu_pct": cpu,
            }
        self.samples.append(row)

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            with contextlib.suppress(Exception):  # a process that ended mid-read
                self.sample()
            next_at += self.every
            self._stop.wait(max(0.0, next_at - time.monotonic()))


# -- faults -----------------------------------------------------------------------------


def schedule(minutes: float, every: float, seed: int) -> list[tuple[float, str]]:
    """(seconds from the start, kind): from minute 2 (or a fifth of a short run) every
    ``every`` s ± 20 s, kinds as shuffled rounds of all of them."""
    rng = random.Random(seed)
    out: list[tuple[float, str]] = []
    t, end = min(120.0, minutes * 12), minutes * 60 - 30
    pool: list[str] = []
    while t < end:
        if not pool:
            pool = list(KINDS)
            rng.shuffle(pool)
        out.append((round(t, 1), pool.pop()))
        t += every + rng.uniform(-20, 20) if every > 60 else every
    return out


class Soak:
    def __init__(
        self,
        skr: controlplane.ControlPlane,
        kcp: controlplane.ControlPlane,
        env: listenerenv.Env,
        kcp_api: client.ApiClient,
        work: pathlib.Path,
        director: compassenv.Director,
        args: argparse.Namespace,
    ) -> None:
        self.skr, self.kcp, self.env, self.kcp_api, self.dir = skr, kcp, env, kcp_api, work
        self.director, self.args = director, args
        # workers and threads as the Deployments have them (manifests/{kcp,skr})
        self.stack = faultstack.Stack(
            skr,
            env,
            work,
            pollers=2,
            listener={"TETHER_LISTENER_WORKERS": "2", "TETHER_LISTENER_THREADS": "16"},
            webhook={"TETHER_WEBHOOK_WORKERS": "2", "TETHER_WEBHOOK_THREADS": "8"},
        )
        self.fleet = Fleet(kcp_api, skr, director)
        secret_file = work / "client_secret"
        secret_file.write_text(director.store.client_secret)
        self.compass = faultstack.CompassProcess(
            work, kcp.kubeconfig, compass_env(self.fleet, director, secret_file)
        )
        self.customer: Customer | None = None
        self.faults: list[dict[str, Any]] = []

    def roots(self) -> dict[str, int | None]:
        def pid(p: Any) -> int | None:
            return p.pid if p is not None and p.poll() is None else None

        s = self.stack
        out: dict[str, int | None] = {}
        for plane, label in ((self.skr, "SKR"), (self.kcp, "KCP")):
            out[f"{label} etcd"] = pid(plane._etcd.popen if plane._etcd else None)
            out[f"{label} kube-apiserver"] = pid(
                plane._apiserver.popen if plane._apiserver else None
            )
        out["listener"] = pid(s.listener.proc if s.listener else None)
        out["webhook"] = pid(s.webhook.proc if s.webhook else None)
        for p in s.pollers:
            out[p.identity] = pid(p.proc)
        out["compass"] = pid(self.compass.proc)
        return out

    def start(self) -> None:
        self.stack.start()
        for _ in range(3):
            self.fleet.create()
        self.compass.start()
        s = self.stack
        self.customer = Customer(
            s.core, s.namespace, s.labels, keys=40, rate=self.args.rate, seed=self.args.seed
        )
        self.customer.start()
        faultstack_wait(
            lambda: not self.fleet.difference(),
            90,
            "the first Kyma CRs Ready",
            self.fleet.difference,
        )
        faultstack_wait(lambda: not s.difference(), 90, "the first convergence", s.difference)

    def close(self) -> None:
        if self.customer is not None:
            self.customer.running.set()
            with contextlib.suppress(AssertionError):
                self.customer.stop()
        self.compass.stop()
        self.stack.close()
        self.fleet.skr_api.close()

    # -- one fault -------------------------------------------------------------------

    def fault(self, kind: str, t0: float) -> dict[str, Any]:
        s, d = self.stack, self.director
        assert self.customer is not None
        began = time.monotonic()
        extra: dict[str, Any] = {}
        if kind == "listener killed":
            s.kill_listener()
            time.sleep(5)
            s.start_listener()
        elif kind == "webhook killed":
            s.kill_webhook()
            time.sleep(5)
            s.restart_webhook()
        elif kind == "KCP apiserver restarted":
            self.kcp.stop_apiserver()
            try:
                time.sleep(3)
            finally:
                self.kcp.start_apiserver()
        elif kind == "SKR apiserver restarted":
            self.customer.retry_seconds = 90  # the customer retries, as kubectl's user would
            self.skr.stop_apiserver()
            try:
                time.sleep(3)
            finally:
                self.skr.start_apiserver()
        elif kind == "poller leader killed":
            lead = s.leader()
            assert lead is not None, "no poller leads"
            other = next(p for p in s.pollers if p is not lead)
            lead.kill()
            faultstack_wait(lambda: s.leader() is other, 30, "the other poller to lead")
            extra["takeover_seconds"] = round(time.monotonic() - began, 1)
            lead.start()  # the pod restarted by its Deployment, standby now
        elif kind == "listener black-holed":
            s.proxy.hole()
            try:
                time.sleep(10)
            finally:
                s.proxy.heal()
        elif kind == "Director down":
            d.server.stop()
            try:
                extra["created"] = self.fleet.create()
                extra["deleted"] = self.fleet.delete_oldest()
                time.sleep(10)
            finally:
                d.server.start()
        else:
            raise ValueError(kind)
        healed = time.monotonic()
        check = self.fleet.difference if kind == "Director down" else s.difference
        converged, paused = self._converge(check, healed)
        self.customer.retry_seconds = 0.0
        row = {
            "kind": kind,
            "at": round(began - t0, 1),
            "fault_seconds": round(healed - began, 1),
            "converged_seconds": round(converged, 1),
            "paused": paused,
            **extra,
        }
        if kind == "Director down":  # the change path too, under the same load
            row["change_path_converged_seconds"] = round(self._converge(s.difference, healed)[0], 1)
        return row

    def _converge(self, check: Callable[[], str], since: float) -> tuple[float, bool]:
        assert self.customer is not None
        deadline = since + 30
        while check():
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        else:
            return time.monotonic() - since, False
        log(f"  no exact match under load in 30 s ({check()[:200]}); pausing the customer")
        self.customer.running.clear()
        try:
            faultstack_wait(lambda: not check(), 120, "convergence with the customer paused", check)
            return time.monotonic() - since, True
        finally:
            self.customer.running.set()

    # -- the run -----------------------------------------------------------------------

    def run(self, plan: list[tuple[float, str]], t0: float) -> None:
        end = t0 + self.args.minutes * 60
        for at, kind in plan:
            wait = t0 + at - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            if time.monotonic() > end - 20:
                log(f"skipped {kind}: too close to the end")
                continue
            log(f"fault: {kind}")
            row = self.fault(kind, t0)
            self.faults.append(row)
            log(
                f"  healed after {row['fault_seconds']} s, converged {row['converged_seconds']} s "
                f"after the heal{' (customer paused)' if row['paused'] else ''}"
            )
            assert self.customer is not None
            if self.customer.crashed is not None:
                raise AssertionError("the customer crashed") from self.customer.crashed
        time.sleep(max(0.0, end - time.monotonic()))


def faultstack_wait(
    pred: Callable[[], Any], timeout: float, what: str, why: Callable[[], str] | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: {why() if why else ''}")
        time.sleep(0.2)


# -- analysis ---------------------------------------------------------------------------


def windows(minutes: float) -> tuple[tuple[float, float], tuple[float, float]]:
    """(after warm-up, last) windows in seconds."""
    w = min(5.0, minutes / 6) * 60
    warm = (w, 2 * w) if minutes >= 15 else (minutes * 20, minutes * 20 + w)
    return warm, (minutes * 60 - w, minutes * 60)


def series(samples: list[dict[str, Any]], name: str, key: str) -> list[tuple[float, float]]:
    return [
        (s["t"], s["procs"][name][key])
        for s in samples
        if name in s["procs"] and s["procs"][name][key] is not None
    ]


def segments(samples: list[dict[str, Any]], name: str, key: str) -> list[list[tuple[float, float]]]:
    """The series split where the pid changes or samples are missing (the process down)."""
    out: list[list[tuple[float, float]]] = []
    last_pid = None
    for s in samples:
        p = s["procs"].get(name)
        if p is None or p[key] is None:
            last_pid = None
            continue
        if p["pid"] != last_pid:
            out.append([])
            last_pid = p["pid"]
        out[-1].append((s["t"], p[key]))
    return out


def flatness(samples: list[dict[str, Any]], minutes: float) -> list[dict[str, Any]]:
    warm, last = windows(minutes)
    names = sorted({n for s in samples for n in s["procs"]}, key=order_key)
    rows = []
    for n in names:
        row: dict[str, Any] = {"process": n}
        for key in ("rss_mib", "fds", "cpu_pct", "threads"):
            pts = series(samples, n, key)
            a = [v for t, v in pts if warm[0] <= t < warm[1]]
            b = [v for t, v in pts if last[0] <= t <= last[1]]
            row[key] = (
                round(statistics.median(a), 1) if a else None,
                round(statistics.median(b), 1) if b else None,
            )
        pids = {s["procs"][n]["pid"] for s in samples if n in s["procs"]}
        row["pids"] = len(pids)
        (ra, rb), (fa, fb) = row["rss_mib"], row["fds"]
        grew = []
        if ra is not None and rb is not None and rb > ra * (1 + RSS_GROWTH) and rb - ra > RSS_MIB:
            grew.append("RSS")
        if fa is not None and fb is not None and fb > fa * (1 + FD_GROWTH) and fb - fa > FD_ABS:
            grew.append("open files")
        row["verdict"] = (
            "GREW: " + ", ".join(grew)
            if grew
            else ("flat" if None not in (ra, rb, fa, fb) else "n/a")
        )
        rows.append(row)
    return rows


def order_key(name: str) -> tuple[int, str]:
    prefixes = (
        "SKR etcd",
        "SKR kube-apiserver",
        "KCP etcd",
        "KCP kube-apiserver",
        "listener",
        "webhook",
        "poller",
        "compass",
        "soak driver",
    )
    return next((i for i, p in enumerate(prefixes) if name.startswith(p)), 99), name


def pct(a: float | None, b: float | None) -> str:
    if a is None or b is None or a == 0:
        return "n/a"
    return f"{100 * (b - a) / a:+.0f} %"


def table(rows: list[dict[str, Any]], minutes: float) -> str:
    warm, last = windows(minutes)
    head = (
        f"| process | pids | RSS MiB, min {warm[0] / 60:.3g}–{warm[1] / 60:.3g} | RSS MiB, "
        f"last {(last[1] - last[0]) / 60:.3g} min | change | open files (same windows) | "
        f"threads | CPU % (median, same windows) | verdict |"
    )
    out = [head, "|" + "---|" * 9]

    def g(v: float | None) -> str:
        return "n/a" if v is None else f"{v:g}"

    for r in rows:
        (ra, rb), (fa, fb), (ca, cb), (ta, tb) = r["rss_mib"], r["fds"], r["cpu_pct"], r["threads"]
        out.append(
            f"| {r['process']} | {r['pids']} | {g(ra)} | {g(rb)} | {pct(ra, rb)} | "
            f"{g(fa)} → {g(fb)} | {g(ta)} → {g(tb)} | {g(ca)} → {g(cb)} | {r['verdict']} |"
        )
    return "\n".join(out)


def fault_table(faults: list[dict[str, Any]]) -> str:
    out = [
        "| # | at (min) | fault | fault lasted (s) | converged after the heal (s) | notes |",
        "|---|---|---|---|---|---|",
    ]
    for i, f in enumerate(faults, 1):
        notes = []
        if "takeover_seconds" in f:
            notes.append(f"other poller led after {f['takeover_seconds']} s")
        if "change_path_converged_seconds" in f:
            notes.append(
                f"Kyma {f['created']} created, {f['deleted']} deleted while down; "
                f"change path exact after {f['change_path_converged_seconds']} s"
            )
        if f["paused"]:
            notes.append("customer paused for the check")
        out.append(
            f"| {i} | {f['at'] / 60:.1f} | {f['kind']} | {f['fault_seconds']} | "
            f"{f['converged_seconds']} | {'; '.join(notes)} |"
        )
    return "\n".join(out)


def plot(
    samples: list[dict[str, Any]],
    faults: list[dict[str, Any]],
    key: str,
    ylabel: str,
    title: str,
    dest: pathlib.Path,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted({n for s in samples for n in s["procs"]}, key=order_key)
    cols = 4
    rows = (len(names) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(16, 2.6 * rows), sharex=True, squeeze=False)
    for ax, n in zip(axes.flat, names, strict=False):
        pts = series(samples, n, key)
        for seg in segments(samples, n, key):  # one line per pid: a restart is a new line
            ax.plot([t / 60 for t, _ in seg], [v for _, v in seg], lw=1.2, color="tab:blue")
        for f in faults:
            ax.axvline(f["at"] / 60, color="tab:red", lw=0.8, alpha=0.6, ls="--")
        ax.set_title(n, fontsize=9)
        ax.tick_params(labelsize=7)
        top = max((v for _, v in pts), default=1)
        ax.set_ylim(0, top * 1.15 + (1 if key == "fds" else 0))
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel("minutes", fontsize=8)
    for ax in axes[:, 0]:
        ax.set_ylabel(ylabel, fontsize=8)
    kinds = "; ".join(f"{f['at'] / 60:.1f}: {f['kind']}" for f in faults)
    fig.suptitle(f"{title}\nfaults (dashed red, minute: kind): {kinds}", fontsize=9, wrap=True)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    dest.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(dest, dpi=80)
    plt.close(fig)


# -- main -------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rate", type=float, default=4.0, help="customer writes per second")
    ap.add_argument("--fault-every", type=float, default=180.0, help="seconds between faults")
    ap.add_argument("--sample-every", type=float, default=5.0)
    ap.add_argument("--results", type=pathlib.Path, default=skeleton.RESULTS / "soak.json")
    ap.add_argument("--images", type=pathlib.Path, default=IMAGES)
    ap.add_argument(
        "--report",
        type=pathlib.Path,
        metavar="SOAK_JSON",
        help="only print the tables and redraw the plots of an earlier run",
    )
    args = ap.parse_args()
    if args.report:
        report(skeleton.load(args.report), args.images)
        return
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # the stand-in's request lines

    plan = schedule(args.minutes, args.fault_every, args.seed)
    print(
        f"soak: {args.minutes:g} min, seed {args.seed}, customer {args.rate:g} writes/s; "
        f"fault schedule (min: kind):"
    )
    for at, kind in plan:
        print(f"  {at / 60:5.1f}  {kind}")
    work = pathlib.Path(tempfile.mkdtemp(prefix="tether-soak-"))
    print(f"work folder (logs): {work}")
    ca, cert, key = server_mod.self_signed(work / "director")
    store = store_mod.Store(client_secret="s3cr3t-of-the-soak")
    srv = server_mod.DirectorServer(store, cert, key).start()
    store.connector_url = f"{srv.url}/connector/graphql"
    director = compassenv.Director(srv, ca)
    began = provenance.start()
    started = datetime.datetime.now(datetime.UTC)
    with controlplane.planes("soak-skr", "soak-kcp") as planes:
        skr, kcp = planes["soak-skr"], planes["soak-kcp"]
        kcp_api = kcp.api_client()
        listenerenv.install_crd(kcp_api)
        controlplane.install_crds(kcp_api, controlplane.KYMA_CRD, compassenv.CRD_FILE)
        (work / "listener").mkdir()
        env = listenerenv.make_env(kcp, kcp_api, work / "listener", f"ks-{uuid.uuid4().hex[:8]}")
        soak = Soak(skr, kcp, env, kcp_api, work, director, args)
        try:
            log("starting the stack")
            soak.start()
            t0 = time.monotonic()
            me = os.getpid()
            # the driver's children are the planes and parts: the driver alone is a leaf
            sampler = Sampler(
                lambda: {**soak.roots(), "soak driver": me},
                args.sample_every,
                t0,
                leaves=frozenset({"soak driver"}),
            )
            sampler.start()
            log("running")
            soak.run(plan, t0)
            sampler.stop()
            assert soak.customer is not None
            soak.customer.running.set()
            last = soak.customer.stop()
            soak.customer.check_runtime()
            final = soak.stack.wait_converged(last, 120)
            final_compass = time.monotonic()
            faultstack_wait(
                lambda: not soak.fleet.difference(),
                120,
                "compass at the end",
                soak.fleet.difference,
            )
            workload = soak.customer.summary()
            failed = [vars(w) for w in soak.customer.failed()]
        finally:
            soak.close()
            kcp_api.close()
    srv.stop()
    shutil.rmtree(work, ignore_errors=True)  # kept (with every process's log) on a failure
    samples = sampler.samples
    rows = flatness(samples, args.minutes)
    out = {
        "benchmark": "soak",
        "started": started.isoformat(timespec="seconds"),
        "machine": f"{platform.node()}, {os.cpu_count()} cores shared with other runs",
        "args": {k: str(v) if isinstance(v, pathlib.Path) else v for k, v in vars(args).items()},
        "customer": {
            "rate_per_second": args.rate,
            "keys": 40,
            "summary": workload,
            "failed": failed,
        },
        "schedule": [{"at": at, "kind": k} for at, k in plan],
        "faults": soak.faults,
        "final": {
            "change_path_converged_seconds": round(final, 1),
            "compass_converged_seconds": round(time.monotonic() - final_compass, 1),
        },
        "thresholds": {
            "rss_growth": RSS_GROWTH,
            "rss_mib": RSS_MIB,
            "fd_growth": FD_GROWTH,
            "fd_abs": FD_ABS,
            "windows_seconds": windows(args.minutes),
        },
        "flatness": rows,
        "samples": samples,
    }
    out = skeleton.write(args.results, "soak", began, out, indent=1)
    plot(
        samples,
        soak.faults,
        "rss_mib",
        "RSS (MiB)",
        f"Soak: RSS per process ({args.minutes:g} min, seed {args.seed})",
        args.images / "soak-memory.png",
    )
    plot(
        samples,
        soak.faults,
        "fds",
        "open files",
        f"Soak: open files per process ({args.minutes:g} min, seed {args.seed})",
        args.images / "soak-open-files.png",
    )
    print(f"\ncustomer: {workload}")
    print(f"at the end: change path exact {final:.1f} s after the last write\n")
    skeleton.report(out, fault_table(soak.faults), table(rows, args.minutes))
    print(f"\nwrote {args.results}, {args.images}/soak-memory.png, soak-open-files.png")


def report(out: dict[str, Any], images: pathlib.Path) -> None:
    minutes = float(out["args"]["minutes"])
    plot(
        out["samples"],
        out["faults"],
        "rss_mib",
        "RSS (MiB)",
        f"Soak: RSS per process ({minutes:g} min, seed {out['args']['seed']})",
        images / "soak-memory.png",
    )
    plot(
        out["samples"],
        out["faults"],
        "fds",
        "open files",
        f"Soak: open files per process ({minutes:g} min, seed {out['args']['seed']})",
        images / "soak-open-files.png",
    )
    print(f"customer: {out['customer']['summary']}")
    skeleton.report(
        out, fault_table(out["faults"]), table(flatness(out["samples"], minutes), minutes)
    )


if __name__ == "__main__":
    main()
