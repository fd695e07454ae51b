"""The forwarder process: read-backs and sends outside the processes that answer admission.

Under gunicorn the master forks it once (``spawn``, in its ``when_ready`` hook, before any
worker): the workers hand each forwarded admission's key over the local channel
(``webhook.channel``: unnamed, bounded, never waiting) and answer; this process keeps the
one coalescing queue of the webhook (``keyqueue``: every guarantee of the in-process
forwarder: no change lost that the queue took, coalescing across all workers, backoff,
the final state read back and sent) and runs the forwarder threads
(``webhook.forwarder``: ``TETHER_WEBHOOK_FORWARDER_THREADS`` for each worker), its own
runtime API client, listener client and Watch list. A burst of forwarding takes this
process's GIL, not the workers'.

``Handle`` is what the master and the workers hold: a heartbeat and the client
certificate's state in a shared page (the workers' readiness: ``alive``,
``certs_loaded``), and, in the master, ``stop``. It runs at ``NICE`` 5: when the workers
and it contend for a core, the answers get the CPU first (the queue coalesces meanwhile).
On SIGTERM (or SIGINT, SIGQUIT, or its master gone) the process takes what the channel
still holds, drains within ``TETHER_WEBHOOK_DRAIN_SECONDS`` and exits; a process that does
not end in time is killed.
If it dies, the workers' ``/readyz`` fails ("forwarder not running") and the channel
overflows to the poller.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import gc
import logging
import mmap
import os
import pathlib
import signal
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from webhook import channel, forwarder, keyqueue
from webhook import settings as settings_mod

if TYPE_CHECKING:
    from webhook import services as services_mod

log = logging.getLogger(__name__)
COMM = "tether-forward"  # the process's name (/proc/PID/comm)
# its scheduling priority below the workers' (a third of a worker's CPU share when they
# contend; all of an idle core): forwarding waits for CPU, admission answers do not
NICE = 5
HEARTBEAT_SECONDS = 0.5
STALE_SECONDS = 5.0  # a heartbeat older than this: the process is not running
_STATE = struct.Struct("dd")  # (heartbeat: CLOCK_MONOTONIC, client certificate loaded: 0/1)
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)
# the master's handlers (gunicorn's arbiter) must not run here
_DEFAULT_SIGNALS = (
    signal.SIGHUP,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGTTIN,
    signal.SIGTTOU,
    signal.SIGWINCH,
    signal.SIGCHLD,
)


class Handle:
    """The forwarder process as its master and the workers see it."""

    def __init__(self, pid: int, page: mmap.mmap) -> None:
        self.pid, self._page = pid, page

    def _state(self) -> tuple[float, float]:
        beat, certs = _STATE.unpack_from(self._page, 0)
        return beat, certs

    def alive(self) -> bool:
        beat, _ = self._state()
        return beat > 0 and time.monotonic() - beat < STALE_SECONDS

    def certs_loaded(self) -> bool:
        return self._state()[1] > 0

    def stop(self, timeout: float) -> int | None:
        """(master) SIGTERM, then wait up to ``timeout`` seconds, then SIGKILL; its exit
        status (None: reaped elsewhere)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while True:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped already (gunicorn's SIGCHLD handling)
                return None
            if pid:
                return os.waitstatus_to_exitcode(status)
            if time.monotonic() >= deadline:
                log.warning("the forwarder process did not stop in %.0fs: killed", timeout)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
                deadline = float("inf")
            time.sleep(0.05)


def spawn(
    s: settings_mod.Settings, recv: socket.socket, close: Iterable[socket.socket] = ()
) -> Handle:
    """Fork the forwarder process (from gunicorn's master, before its workers): it gets
    ``recv``; ``close`` are the master's sockets it must not hold (the listeners, the
    channel's sending end)."""
    page = mmap.mmap(-1, _STATE.size)  # shared and anonymous: inherited by every fork
    master = os.getpid()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child; tests see it through the webhook process
        code = 1
        try:
            for sock in close:
                sock.close()
            code = _main(s, recv, page, master)
        except BaseException:
            log.exception("the forwarder process failed")
        finally:
            logging.shutdown()
            os._exit(code)
    recv.close()
    log.info("forwarder process %d started", pid)
    return Handle(pid, page)


def _main(s: settings_mod.Settings, recv: socket.socket, page: mmap.mmap, master: int) -> int:
    with contextlib.suppress(OSError):  # ps and /proc name it apart from the workers
        pathlib.Path("/proc/self/comm").write_text(COMM)
    with contextlib.suppress(OSError):  # on a busy core the workers' answers come first
        os.nice(NICE)
    stop = threading.Event()
    for sig in _DEFAULT_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    for sig in _STOP_SIGNALS:
        signal.signal(sig, lambda *_: stop.set())
    from webhook import services as services_mod  # after the fork: clients of its own

    fs = dataclasses.replace(s.forwarder, threads=s.forwarder.threads * s.server.workers)
    svc = services_mod.build(dataclasses.replace(s, forwarder=fs))
    fwd, scope, queue = svc.forwarder, svc.watch_scope, svc.queue
    assert isinstance(fwd, forwarder.Forwarder) and isinstance(queue, keyqueue.KeyQueue)
    gc.collect()
    gc.freeze()
    if scope is not None:
        scope.start()
    fwd.start()
    intake = _Intake(svc, queue)
    intake.run(recv, stop, lambda: _beat(page, fwd, master))
    intake.rest(recv)  # what the workers handed over before the stop
    _STATE.pack_into(page, 0, 0.0, 0.0)
    if scope is not None:
        scope.stop()
    fwd.stop()
    return 0


def _beat(page: mmap.mmap, fwd: forwarder.Forwarder, master: int) -> bool:
    """Publish the heartbeat; False when the master is gone (killed): stop too."""
    _STATE.pack_into(page, 0, time.monotonic(), 1.0 if fwd.certs_loaded() else 0.0)
    if os.getppid() != master:
        log.warning("the webhook's master process is gone: stopping")
        return False
    return True


class _Intake:
    """Takes entries from the channel into the queue, counting what the queue made of them."""

    def __init__(self, svc: services_mod.Services, queue: keyqueue.KeyQueue) -> None:
        self.queue, self.metrics = queue, svc.metrics
        self.watch_of = channel.in_force_by_name(svc.in_force)
        self.puts = {
            o: svc.metrics.channel_puts.labels(o) for o in ("enqueued", "coalesced", "overflowed")
        }
        self.refused = svc.metrics.channel_puts.labels("invalid")

    def take(self, data: bytes) -> None:
        try:
            item, _ = channel.decode(data, self.watch_of)
        except channel.DecodeError:
            self.refused.inc()
            return
        if item is None:  # its Watch is not in force here (yet, or any more): the poller's
            self.metrics.readbacks.labels("out-of-scope").inc()
            return
        self.puts[self.queue.put(item)].inc()

    def run(self, recv: socket.socket, stop: threading.Event, beat: Callable[[], bool]) -> None:
        """Until ``stop`` (or ``beat`` says the master is gone), beating twice a period."""
        recv.settimeout(HEARTBEAT_SECONDS)
        next_beat = 0.0
        while not stop.is_set():
            now = time.monotonic()
            if now >= next_beat:
                if not beat():
                    return
                next_beat = now + HEARTBEAT_SECONDS / 2
            try:
                self.take(recv.recv(channel.MAX_DATAGRAM))
            except TimeoutError:
                continue
            except OSError as e:
                if e.errno != errno.EINTR:
                    raise

    def rest(self, recv: socket.socket) -> None:
        recv.setblocking(False)
        while True:
            try:
                self.take(recv.recv(channel.MAX_DATAGRAM))
            except OSError:
                return
