"""The view process (``python -m listener.view.process SOCKET``) and its supervision.

The gunicorn master starts it before its workers (``Supervisor.start``, from
``listener.server``) with the listener's environment; a thread of the master restarts
it when it exits (1 s later, doubling to 30 s while it keeps dying) and stops it with the
master. The process dies with the master too (``PR_SET_PDEATHSIG``), so it never outlives
the pod's listener. Its counts (relists, heartbeat writes) are answered to a worker's
``ping`` and exposed by the workers at scrape time (``listener.fleet.viewclient.Collector``).
"""

from __future__ import annotations

import ctypes
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

from listener import settings
from listener.storage import records
from listener.view import beats, serve, store, watcher
from tether.base import config, logs
from tether.kube import apitypes, gateway

log = logging.getLogger(__name__)
RECORDS = "records"  # the kind of the records under Watches (serve.Views.records)


def _die_with_parent() -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class Supervisor:
    """The view process of this pod, restarted when it exits (a thread of the master)."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self._stop = threading.Event()
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self.starts = 0

    def _spawn(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "listener.view.process", self.socket_path],
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )

    def _loop(self) -> None:
        delay = 1.0
        while not self._stop.is_set():
            with self._lock:
                self._proc = proc = self._spawn()
                self.starts += 1
            began = time.monotonic()
            code = proc.wait()
            if self._stop.is_set():
                return
            delay = 1.0 if time.monotonic() - began > 60 else min(30.0, delay * 2)
            log.warning(
                "the listener's view process exited (%s); restarted in %.0f s "
                "(workers read the KCP directly meanwhile)",
                code,
                delay / 2,
            )
            self._stop.wait(delay / 2)

    def start(self) -> None:
        threading.Thread(target=self._loop, name="view-supervisor", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(os.path.dirname(self.socket_path), ignore_errors=True)


def build(s: settings.Settings, kcp: gateway.Kube) -> tuple[serve.Views, list[watcher.Watcher]]:
    """The kinds, their watchers and the heartbeat writer of ``s`` (not started)."""
    counts: Counter[str] = Counter()
    lock = threading.Lock()

    def count(key: str) -> None:
        with lock:
            counts[key] += 1

    objects = s.view_max_objects
    each = s.view_max_bytes // 4
    kymas = store.Kind(apitypes.KYMAS.plural, store.kyma_entry, objects, each)
    leases = store.Kind(apitypes.LEASES.plural, store.lease_entry, objects, each)
    summaries = store.Kind("summaries", store.summary_entry, objects, 2 * each)
    recs = store.Kind(
        RECORDS,
        store.record_entry,
        s.view_max_records,
        s.view_max_record_bytes,
        key=store.namespaced,
    )
    hooks = watcher.Hooks(restarted=lambda kind, why: count(f"restart/{kind}/{why}"))
    sources = (
        (kymas, watcher.Source(apitypes.KYMAS, s.namespace)),
        (
            leases,
            watcher.Source(
                gateway.LEASES, s.heartbeat_namespace, f"{apitypes.HEARTBEAT_LABEL}=true"
            ),
        ),
        (summaries, watcher.Source(apitypes.RUNTIME_STATE_SUMMARIES, s.namespace)),
        # every Watch's records, wherever their Watch stores them: one watch per pod, never
        # a request's listing (the per-Watch summaries and digests, listener.edge.watchstate)
        (
            recs,
            watcher.Source(
                apitypes.RUNTIME_CONFIGMAPS,
                None,
                f"{apitypes.MANAGED_BY_LABEL}={records.MANAGED_BY}",
                metadata_only=True,
            ),
        ),
    )
    watchers = [
        watcher.Watcher(
            kcp, src, kind, timeout=s.kcp_timeout, max_event_bytes=4 * 1024 * 1024, hooks=hooks
        )
        for kind, src in sources
    ]
    writer = beats.Beats(
        kcp,
        s.heartbeat_namespace,
        s.heartbeat_interval,
        s.kcp_timeout,
        leases,
        counted=lambda outcome: count(f"write/{outcome}"),
    )
    views = serve.Views(
        kymas,
        leases,
        summaries,
        writer,
        seen_wait=min(serve.SEEN_WAIT, 0.6 * s.view_timeout),
        records=recs,
    )

    def snapshot() -> dict[str, int]:
        with lock:
            return dict(counts)

    views.counts = snapshot
    return views, watchers


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m listener.view.process SOCKET", file=sys.stderr)
        return 2
    s, _ = config.load(settings.SPEC, [], settings.build)
    logs.configure(s.log_level, s.log_format)
    gateway.identify("listener-view")
    kcp = gateway.from_kubeconfig(s.kubeconfig, pool_size=beats.WRITERS + 4)  # + the watches
    views, watchers = build(s, kcp)
    for w in watchers:
        w.start()
    views.writer.start()
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    with serve.Server(argv[0], views) as srv:
        srv.serve_forever(poll_interval=0.5)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
