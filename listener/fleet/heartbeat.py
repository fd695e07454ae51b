"""When each runtime was last seen: one ``coordination.k8s.io/v1`` Lease per runtime.

Like the kubelet's node heartbeats: the Lease ``tether-rt-<hash>`` in the heartbeat
namespace (``HEARTBEAT_NAMESPACE``; the manifests' ``tether-heartbeats`` holds nothing else,
so the listener may create and patch Leases there and nowhere else), labelled with the
runtime ID, ``spec.holderIdentity`` = runtime ID, ``spec.renewTime`` =
when a request of that runtime (a POST of changes or a GET of its state) was last
authenticated. Durable and shared by all replicas. With the pod's view (``listener.view``)
``seen`` only reports the runtime: the view writes the Lease when its renewTime (as the
watch brought it, any replica's write) is ``interval`` old, at most once per interval across
workers and replicas (``listener.view.beats``), and ``epoch_state`` answers from it. Without
it (off, or not answering) a worker process writes a runtime's Lease at
most once per ``interval`` (remembered in a bounded in-memory map; losing it on restart
only costs one extra write), so the write rate is bounded by runtimes / interval.

``silent_counts`` (pure) turns the renew times into bounded metrics: how many runtimes
have been silent longer than each threshold, no series per runtime.

The same Lease keeps the runtime's epoch and identity (``listener.fleet.epochs``) as annotations:
``Epochs`` reads them (cached per worker for ``EPOCH_TTL`` seconds, so the POST path costs
no KCP request per record; a heartbeat write returns the Lease, which refreshes the cache
without a read of its own) and writes a decision with the Lease's resourceVersion, so of
two replicas deciding at once only one starts the next epoch; the other re-reads and finds
nothing left to do. A worker whose cache still holds the previous epoch for a moment tags
records without an epoch with it: they lose to the new epoch's records (safe), and the
poller repairs what they missed. A record of an epoch above the cached one makes the
worker read the Lease again before it refuses it.
"""

from __future__ import annotations

import datetime
import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from listener.fleet import epochs
from listener.fleet import viewclient as view_client
from listener.storage import records, rules
from tether.base import logs, times
from tether.kube import apitypes, gateway
from tether.wire import changes

ANN_IDENTITY = "tether.kyma-project.io/runtime-identity"
MAX_REMEMBERED = 50_000
EPOCH_TTL = 10.0  # seconds a worker trusts its cached epoch of a runtime
EPOCH_ATTEMPTS = 5  # optimistic writes of one decision before giving up (503)

log = logging.getLogger(__name__)


def lease_name(runtime_id: str) -> str:
    return "tether-rt-" + hashlib.sha256(runtime_id.encode()).hexdigest()[:40]


def _spec(runtime_id: str) -> dict[str, str]:
    now = datetime.datetime.now(datetime.UTC)
    return {"holderIdentity": runtime_id, "renewTime": times.format_time(now)}


def silent_counts(
    renew_times: Iterable[datetime.datetime], now: datetime.datetime, thresholds: Sequence[int]
) -> dict[int, int]:
    """For each threshold (seconds), how many runtimes were last seen longer ago."""
    ages = [(now - t).total_seconds() for t in renew_times]
    return {th: sum(1 for a in ages if a > th) for th in thresholds}


def state_of(lease: dict[str, Any]) -> epochs.State:
    """The epoch and identity a runtime's heartbeat Lease holds."""
    meta = lease.get("metadata") or {}
    ann = meta.get("annotations") or {}
    identity = ann.get(ANN_IDENTITY)
    return epochs.State(
        changes.epoch_of(ann.get(apitypes.EPOCH_ANNOTATION)),
        identity if isinstance(identity, str) else "",
        str(meta.get("resourceVersion") or ""),
    )


class Heartbeats:
    def __init__(
        self,
        kcp: gateway.Kube,
        namespace: str,
        interval: float,
        timeout: float,
        clock: Callable[[], float] = time.monotonic,
        view: view_client.ViewClient | None = None,
    ) -> None:
        self._kcp, self._namespace, self._clock = kcp, namespace, clock
        self._view = view  # the pod's view: it decides and writes (listener.view.beats)
        self._interval, self._timeout = interval, timeout
        self._lock = threading.Lock()
        self._written: OrderedDict[str, float] = OrderedDict()
        self._complained = float("-inf")  # the last log of a heartbeat not written on a read
        # the Lease as a heartbeat write returned it (``Epochs`` keeps the epoch from it)
        self.on_lease: Callable[[str, dict[str, Any]], None] = lambda runtime_id, lease: None

    def _due(self, runtime_id: str, now: float) -> bool:
        with self._lock:
            last = self._written.get(runtime_id)
            return last is None or now - last >= self._interval

    def _remember(self, runtime_id: str, now: float) -> None:
        with self._lock:
            self._written[runtime_id] = now
            self._written.move_to_end(runtime_id)
            while len(self._written) > MAX_REMEMBERED:
                self._written.popitem(last=False)

    def seen(self, runtime_id: str) -> bool:
        """Record that the runtime was seen now (if due); True when a write was made.
        Raises a ``gateway.GatewayError`` when the KCP API fails. With the pod's view the
        view decides from the renewTime it holds and writes (True: a write was queued)."""
        if self._view is not None:
            told = self._view.ask("seen", runtime_id)
            if told is not None:
                return told.get("outcome") in ("written", "queued")
        mono = self._clock()
        if not self._due(runtime_id, mono):
            return False
        name = lease_name(runtime_id)
        written: dict[str, Any] | None = None
        try:
            written = self._kcp.patch(
                gateway.LEASES,
                self._namespace,
                name,
                {"spec": _spec(runtime_id)},
                strategic=True,
                timeout=self._timeout,
            )
        except gateway.NotFound:
            try:
                written = self._kcp.create(
                    gateway.LEASES,
                    self._namespace,
                    self.new_lease(runtime_id, {}),
                    timeout=self._timeout,
                )
            except gateway.Conflict:  # another replica created it just now: fine
                pass
        self._remember(runtime_id, mono)
        if written is not None:
            self.on_lease(runtime_id, written)
        return True

    def seen_after_read(self, runtime_id: str) -> bool:
        """``seen`` for a read path (the state summary and its buckets), called after the
        read: a heartbeat that cannot be written (the KCP's etcd over its quota refuses every
        write) never fails the read; it is logged (at most once a minute) and tried again on
        the runtime's next call. True when a write was made."""
        try:
            return self.seen(runtime_id)
        except gateway.GatewayError as e:
            now = self._clock()
            with self._lock:
                due = now - self._complained >= 60.0
                if due:
                    self._complained = now
            if due:
                log.warning(
                    "heartbeat Lease not written (answered from the read all the same; "
                    "retried on the next call): %s",
                    logs.bounded(e),
                )
            return False

    def new_lease(self, runtime_id: str, annotations: dict[str, str]) -> dict[str, Any]:
        """A new heartbeat Lease of the runtime (renewTime now), with ``annotations``."""
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": lease_name(runtime_id),
                "namespace": self._namespace,
                "labels": {
                    apitypes.HEARTBEAT_LABEL: "true",
                    apitypes.RUNTIME_ID_LABEL: runtime_id,
                    apitypes.MANAGED_BY_LABEL: records.MANAGED_BY,
                },
                "annotations": annotations,
            },
            "spec": _spec(runtime_id),
        }

    # -- epochs ----------------------------------------------------------------------------

    def epoch_state(self, runtime_id: str, *, fresh: bool = False) -> epochs.State:
        """The runtime's epoch and identity as its Lease holds them (no Lease: epoch 0):
        from the pod's view unless ``fresh`` (a decision's Conflict) or it does not answer."""
        if self._view is not None and not fresh:
            told = self._view.ask("lease", runtime_id)
            if told is not None:
                held = told.get("lease")
                if not isinstance(held, dict):
                    return epochs.State(0, "")
                return epochs.State(
                    int(held.get("epoch") or 0),
                    str(held.get("identity") or ""),
                    str(held.get("rv") or ""),
                )
        # a list by name, not a get: the listener's Role lists Leases (silent runtimes)
        found = (
            self._kcp.list(
                gateway.LEASES,
                self._namespace,
                field_selector=f"metadata.name={lease_name(runtime_id)}",
                timeout=self._timeout,
            ).get("items")
            or []
        )
        return state_of(found[0]) if found else epochs.State(0, "")

    def write_epoch(self, runtime_id: str, state: epochs.State, decision: epochs.Decision) -> None:
        """Write ``decision`` over ``state`` (read before): ``gateway.Conflict`` when the
        Lease changed since (or was created meanwhile)."""
        ann = {apitypes.EPOCH_ANNOTATION: str(decision.epoch), ANN_IDENTITY: decision.identity}
        if not state.lease_version:
            self._kcp.create(
                gateway.LEASES,
                self._namespace,
                self.new_lease(runtime_id, ann),
                timeout=self._timeout,
            )
            return
        try:
            self._kcp.patch(
                gateway.LEASES,
                self._namespace,
                lease_name(runtime_id),
                {"metadata": {"resourceVersion": state.lease_version, "annotations": ann}},
                timeout=self._timeout,
            )
        except gateway.NotFound:  # deleted since it was read: as if changed
            raise gateway.Conflict("heartbeat Lease deleted meanwhile") from None

    def renew_times(self) -> list[datetime.datetime]:
        """The last-seen time of every runtime with a heartbeat Lease (paginated list), except
        runtimes whose Kyma CR is gone (the janitor marked their Lease ``orphaned-since``):
        a deprovisioned runtime is not a silent one."""
        out: list[datetime.datetime] = []
        for lease in self._kcp.list_items(
            gateway.LEASES,
            self._namespace,
            label_selector=f"{apitypes.HEARTBEAT_LABEL}=true",
            page_size=500,
            timeout=self._timeout,
        ):
            if rules.ORPHANED_SINCE in ((lease.get("metadata") or {}).get("annotations") or {}):
                continue
            t = times.parse_time((lease.get("spec") or {}).get("renewTime"))
            if t is not None:
                out.append(t)
        return out


class Epochs:
    """Each runtime's current epoch for this worker: cached ``EPOCH_TTL`` seconds, bounded;
    decisions (``listener.fleet.epochs.decide``) written with optimistic concurrency."""

    def __init__(
        self,
        beats: Heartbeats,
        ttl: float = EPOCH_TTL,
        clock: Callable[[], float] = time.monotonic,
        on_new_epoch: Callable[[str, int, str], None] = lambda rt, e, why: None,
    ) -> None:
        self._beats, self._ttl, self._clock = beats, ttl, clock
        self._on_new_epoch = on_new_epoch
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, tuple[float, epochs.State]] = OrderedDict()
        # a heartbeat write returns the Lease: as fresh as a read of it, one request fewer
        beats.on_lease = self._from_lease

    def _keep(self, runtime_id: str, state: epochs.State) -> None:
        with self._lock:
            self._cache[runtime_id] = (self._clock(), state)
            self._cache.move_to_end(runtime_id)
            while len(self._cache) > MAX_REMEMBERED:
                self._cache.popitem(last=False)

    def _from_lease(self, runtime_id: str, lease: dict[str, Any]) -> None:
        """Keep the state a heartbeat write returned, unless the cache holds a later epoch
        (a decision of this worker kept while the heartbeat was in flight: epochs never go
        back)."""
        state = state_of(lease)
        with self._lock:
            hit = self._cache.get(runtime_id)
        if hit is None or hit[1].epoch <= state.epoch:
            self._keep(runtime_id, state)

    def state(self, runtime_id: str, *, fresh: bool = False) -> epochs.State:
        """The runtime's state, from the cache unless ``fresh`` or older than the TTL.
        Raises a ``gateway.GatewayError``."""
        if not fresh:
            with self._lock:
                hit = self._cache.get(runtime_id)
            if hit is not None and self._clock() - hit[0] < self._ttl:
                return hit[1]
        state = (
            self._beats.epoch_state(runtime_id, fresh=True)
            if fresh
            else self._beats.epoch_state(runtime_id)
        )
        self._keep(runtime_id, state)
        return state

    def current(self, runtime_id: str, at_least: int = 0) -> int:
        """The current epoch; read afresh when the cached one is below ``at_least`` (a
        record of a newer epoch, started by another replica)."""
        epoch = self.state(runtime_id).epoch
        if epoch < at_least:
            epoch = self.state(runtime_id, fresh=True).epoch
        return epoch

    def settle(
        self, runtime_id: str, report: epochs.Report, mark: Callable[[int], int | None]
    ) -> int:
        """Apply a poller's report (``listener.fleet.epochs``); the current epoch after it.
        ``mark(epoch)``: the highest resourceVersion of the stored records of ``epoch``."""
        if report.empty:
            return self.current(runtime_id)
        state = self.state(runtime_id)
        for _ in range(EPOCH_ATTEMPTS):
            decision = epochs.decide(state, report, mark(state.epoch))
            if decision is None:
                return state.epoch
            try:
                self._beats.write_epoch(runtime_id, state, decision)
            except gateway.Conflict:  # changed since read (a heartbeat, another replica)
                state = self.state(runtime_id, fresh=True)
                continue
            self._keep(runtime_id, epochs.State(decision.epoch, decision.identity, ""))
            if decision.epoch != state.epoch:
                log.warning(
                    "runtime %s: epoch %d started (%s)",
                    logs.bounded(runtime_id, 80),
                    decision.epoch,
                    decision.reason,
                )
                self._on_new_epoch(runtime_id, decision.epoch, decision.reason)
            return decision.epoch
        raise gateway.Unavailable("epoch: too many concurrent writers of the heartbeat Lease")
