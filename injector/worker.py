"""One Watch with ``inject``: its records followed, each changed runtime's target reconciled.

Two threads per Watch: the consumer (``tether.runtime.consumer.Runtimes`` on the Watch's storage
namespace: which runtime's records changed, from their metadata) remembers the runtimes in
a bounded ``store.Store`` (a resourceVersion each, no value) and offers every changed
runtime to the ``pacing.Pacer``; the applier takes the due runtimes and reconciles each
(``reconcile``): list the runtime's records' metadata and refuse it when they are over its
bounds (``bounds.Census``), else read their values within the shared ``ReadBudget``
(``bounds.Tally``, the reading stops at the first bound exceeded), find the runtime's target
(the object of ``inject.resource`` in ``inject.namespace`` labelled
``kyma-project.io/runtime-id=<runtime>``), server-side apply the merged values when they
differ (``merge.needed``), record the ``ConfigurationInjected`` condition on its status and
an Event. A refused runtime gets the condition False (``OverBounds``, which bound, counts
only), a warning Event and ``tether_injector_runtimes_refused``; the others flow on.
``resync`` (the periodic pass, and every ``Synced``) offers every runtime remembered and
every target still carrying this Watch's annotation, so a missed event, an edited target or
a runtime whose records are all gone converges. Values never reach a log, an Event or a
metric.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from injector import bounds, merge, pacing, store
from injector.metrics import Metrics
from injector.readbudget import ReadBudget
from injector.settings import Settings
from tether.base import logs
from tether.kube import apitypes, events, gateway
from tether.runtime import consumer, consumerstate
from tether.wire import watches

log = logging.getLogger("injector")
LOGGED_ONCE_MAX = 10_000  # (runtime, reason) pairs remembered so each is logged once
VALUE_PAGE = 20  # records of one runtime per list page when their values are read
REFUSED = "OverBounds"  # the condition's reason for a refused runtime


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Worker:
    def __init__(
        self,
        kcp: gateway.Kube,
        watch: watches.Watch,
        s: Settings,
        meters: Metrics,
        recorder: events.Recorder,
        budget: ReadBudget | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        assert watch.inject is not None
        self.kcp, self.watch, self.inject, self.s, self.meters = kcp, watch, watch.inject, s, meters
        self.recorder, self.clock = recorder, clock
        self.budget = budget or ReadBudget(s.read_bytes)
        self.limits = bounds.Limits(s.max_records, s.max_bytes, s.max_keys, s.max_keys_per_record)
        self.records_namespace = watch.storage_namespace or s.namespace
        self.store = store.Store(max_runtimes=s.max_runtimes)
        self.pacer = pacing.Pacer(s.coalesce)
        self.synced = False
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._logged: set[tuple[str, str]] = set()
        self._listing = False

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        for name, fn in (("consume", self._consume), ("apply", self._apply_loop)):
            t = threading.Thread(target=fn, name=f"injector-{name}-{self.watch.name}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self, timeout: float = 15.0) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        for gauge, labels in (
            (self.meters.runtimes, [(self.watch.name,)]),
            (self.meters.bound_reached, [(self.watch.name,)]),
            (self.meters.refused, [(self.watch.name, b) for b in bounds.BOUNDS]),
        ):
            for values in labels:
                try:
                    gauge.remove(*values)
                except KeyError:
                    pass

    # -- the consumer ----------------------------------------------------------------------

    def _consume(self) -> None:
        while not self._stop.is_set():
            try:
                stream = consumer.Runtimes(
                    self.kcp,
                    namespace=self.records_namespace,
                    watch=self.watch.name,
                    timeout=self.s.kcp_timeout,
                    max_runtimes=self.s.max_runtimes,
                    stop=self._stop,
                )
                for item in stream.runtimes():
                    self._take(item)
            except Exception as e:  # noqa: BLE001 - the consumer reconnects; this is a bug's net
                log.error(
                    "watch %s: consumer stopped: %s; starting again",
                    self.watch.name,
                    logs.bounded(e, 300),
                )
                self._stop.wait(5.0)

    def _take(self, item: consumer.Touched | consumer.Synced) -> None:
        with self._cond:
            if isinstance(item, consumer.Synced):
                due = set(self.store.runtimes)  # also those the list no longer names
                self.synced = True
                log.info(
                    "watch %s: %s complete at revision %d: %d runtimes",
                    self.watch.name,
                    "relist" if item.relist else "list",
                    item.revision,
                    len(due),
                )
                if self.store.full:
                    log.warning(
                        "watch %s: %d runtimes over TETHER_INJECTOR_MAX_RUNTIMES (%d) "
                        "not remembered: reconciled on their changes only",
                        self.watch.name,
                        self.store.full,
                        self.s.max_runtimes,
                    )
            else:
                if item.resync and not self._listing:
                    self._listing = True
                    self.store.listed()
                self.store.touch(item.runtime_id, item.revision)
                due = {item.runtime_id}
            if isinstance(item, consumer.Synced):
                self._listing = False
            self.meters.runtimes.labels(self.watch.name).set(len(self.store.runtimes))
            self.meters.bound_reached.labels(self.watch.name).set(self.store.full)
            if self.synced:
                now = self.clock()
                for rt in due:
                    self.pacer.offer(rt, now)
                self._cond.notify_all()
        if isinstance(item, consumer.Synced):
            self.resync(targets_only=True)

    # -- the applier -----------------------------------------------------------------------

    def _apply_loop(self) -> None:
        while not self._stop.is_set():
            with self._cond:
                wait = self.pacer.wait(self.clock(), 1.0)
                if wait > 0:
                    self._cond.wait(wait)
                due = self.pacer.take(self.clock())
            for rt in due:
                if self._stop.is_set():
                    return
                try:
                    result = self.reconcile(rt)
                except Exception as e:  # noqa: BLE001 - one runtime never stops the others
                    log.error(
                        "watch %s, runtime %s: reconcile failed: %s",
                        self.watch.name,
                        rt,
                        logs.bounded(e, 300),
                    )
                    result = "failed"
                self.meters.applies.labels(result).inc()
                with self._cond:
                    self.pacer.done(rt, result != "failed", self.clock())

    def resync(self, *, targets_only: bool = False) -> int:
        """Offer every runtime with records (unless ``targets_only``) and every target
        carrying this Watch's annotation; returns how many were offered."""
        runtimes: set[str] = set()
        try:
            for meta in self.kcp.list_items(
                self.inject.resource,
                self.inject.namespace,
                metadata_only=True,
                timeout=self.s.kcp_timeout,
            ):
                m = meta.get("metadata") or {}
                origin = (m.get("annotations") or {}).get(merge.FROM_ANNOTATION, "")
                rt = (m.get("labels") or {}).get(apitypes.RUNTIME_ID_LABEL)
                if rt and origin.startswith(self.watch.name + ":"):
                    runtimes.add(rt)
        except gateway.GatewayError as e:
            log.warning("watch %s: targets not listed: %s", self.watch.name, logs.bounded(e, 200))
        with self._cond:
            if not self.synced:
                return 0
            if not targets_only:
                runtimes |= set(self.store.runtimes)
            now = self.clock()
            for rt in runtimes:
                self.pacer.offer(rt, now)
            self._cond.notify_all()
        return len(runtimes)

    def _once(self, runtime: str, reason: str, message: str, *args: Any) -> None:
        if (runtime, reason) in self._logged:
            return
        if len(self._logged) >= LOGGED_ONCE_MAX:
            self._logged.clear()
        self._logged.add((runtime, reason))
        log.warning(message, *args)

    def reconcile(self, runtime: str) -> str:
        """One runtime's target brought to its records' values; the result (metrics.RESULTS)."""
        w = self.watch.name
        census = bounds.Census.of(
            self.kcp.list_items(
                apitypes.RUNTIME_CONFIGMAPS,
                self.records_namespace,
                metadata_only=True,
                label_selector=consumer.selector(w, runtime),
                timeout=self.s.kcp_timeout,
            )
        )
        with self._cond:
            refusal = census.refusal(self.limits) or self.store.still_refused(
                runtime, census.fingerprint()
            )
        if refusal is not None:
            return self._refuse(runtime, refusal, census)
        if census.records == 0:  # every record gone: the injected values go too
            result = self._bring(runtime, merge.intent(w, ()))
            if result != "failed":
                with self._cond:
                    self.store.forget(runtime)
                    self._refused_metric()
            return result
        with self.budget.hold(census.bytes, self._stop) as held:
            if not held:
                return "failed"  # stopping
            self.meters.read_bytes.set(self.budget.held)
            try:
                sources, refusal, high = self._read(runtime)
                if refusal is not None:
                    del sources
                    return self._refuse(runtime, refusal, census)
                want = merge.intent(w, sources, max(high, census.revision))
                del sources
                result = self._bring(runtime, want)  # the values held until applied
                del want
            finally:
                self.meters.read_bytes.set(self.budget.held)
        if result != "failed":
            with self._cond:
                self._accepted(runtime)
        return result

    def _read(self, runtime: str) -> tuple[list[merge.Source], bounds.Refusal | None, int]:
        """The live records' values of ``runtime`` (a page at a time), until a bound is
        exceeded; the highest revision read."""
        tally = bounds.Tally(self.limits)
        sources: list[merge.Source] = []
        high = 0
        for obj in self.kcp.list_items(
            apitypes.RUNTIME_CONFIGMAPS,
            self.records_namespace,
            label_selector=consumer.selector(self.watch.name, runtime),
            page_size=VALUE_PAGE,
            timeout=self.s.kcp_timeout,
        ):
            item = consumerstate.parse(obj, self.watch.name)
            if item is None or bounds.unbacked(obj):
                continue
            high = max(high, item.revision)
            live = not item.record.get("deleted")
            source = merge.source_of(item.record, item.revision)
            refusal = tally.add(source.data if live else {}, bounds.declared(obj), live)
            if refusal is not None:
                return [], refusal, high
            if live:
                sources.append(source)
        return sources, None, high

    def _accepted(self, runtime: str) -> None:
        """Under ``_cond``: a runtime within its bounds again."""
        rt = self.store.runtimes.get(runtime)
        if rt is not None and rt.refusal is not None:
            self.store.accept(runtime)
            self._refused_metric()

    def _refused_metric(self) -> None:
        for bound, n in self.store.refused_by().items():
            self.meters.refused.labels(self.watch.name, bound).set(n)

    def _targets(self, runtime: str) -> list[Any]:
        """The component CRs labelled with ``runtime`` in the Watch's target namespace."""
        found = self.kcp.list(
            self.inject.resource,
            self.inject.namespace,
            timeout=self.s.kcp_timeout,
            label_selector=f"{apitypes.RUNTIME_ID_LABEL}={runtime}",
        )
        return list(found.get("items") or [])

    def _refuse(self, runtime: str, refusal: bounds.Refusal, census: bounds.Census) -> str:
        """The runtime refused alone: remembered with its records' fingerprint (refused again
        without reading them until they change), the condition on its target, an Event."""
        w = self.watch.name
        with self._cond:
            self.store.refuse(runtime, refusal, census.fingerprint())
            self._refused_metric()
        self._once(runtime, "refused", "watch %s, runtime %s: %s", w, runtime, refusal.message())
        items = self._targets(runtime)
        if len(items) == 1:
            target = items[0]
            cond = merge.condition(
                None, _generation(target), _now(), reason=REFUSED, message=refusal.message()
            )
            if not merge.same_condition(target, cond):
                self._status(target, cond)
                meta = target.get("metadata") or {}
                self.recorder.emit(
                    events.Ref(
                        str(target.get("apiVersion")),
                        str(target.get("kind")),
                        str(meta.get("namespace")),
                        str(meta.get("name")),
                        str(meta.get("uid", "")),
                    ),
                    "InjectRefused",
                    f"Watch {w}: {refusal.message()}",
                    warning=True,
                )
        return "refused"

    def _bring(self, runtime: str, want: merge.Intent) -> str:
        """Find the runtime's target and apply ``want`` when it differs."""
        w = self.watch.name
        t0 = time.monotonic()
        items = self._targets(runtime)
        if not items:
            self._once(
                runtime,
                "no_target",
                "watch %s, runtime %s: no %s labelled with it in %s: skipped",
                w,
                runtime,
                self.inject.resource.plural,
                self.inject.namespace,
            )
            return "no_target"
        if len(items) > 1:
            self._once(
                runtime,
                "ambiguous",
                "watch %s, runtime %s: %d %s labelled with it in %s: "
                "refused (one target per runtime)",
                w,
                runtime,
                len(items),
                self.inject.resource.plural,
                self.inject.namespace,
            )
            return "ambiguous"
        self._logged.discard((runtime, "no_target"))
        self._logged.discard((runtime, "refused"))
        target = items[0]
        if not merge.needed(target, self.inject.field, want):
            if not merge.condition_current(target, want):
                self._status(target, merge.condition(want, _generation(target), _now()))
            return "unchanged"
        return self._apply(runtime, target, want, t0)

    def _apply(self, runtime: str, target: dict[str, Any], want: merge.Intent, t0: float) -> str:
        meta = target.get("metadata") or {}
        ref = events.Ref(
            str(target.get("apiVersion")),
            str(target.get("kind")),
            str(meta.get("namespace")),
            str(meta.get("name")),
            str(meta.get("uid", "")),
        )
        try:
            applied = self.kcp.apply(
                self.inject.resource,
                ref.namespace,
                ref.name,
                merge.apply_body(target, self.inject.field, want),
                field_manager=merge.FIELD_MANAGER,
                force=True,
                timeout=self.s.kcp_timeout,
            )
        except gateway.GatewayError as e:
            why = _why(e)
            log.warning(
                "watch %s, runtime %s: apply to %s/%s failed: %s",
                self.watch.name,
                runtime,
                ref.namespace,
                ref.name,
                why,
            )
            self._status(
                target,
                merge.condition(
                    None, _generation(target), _now(), reason="ApplyFailed", message=why
                ),
            )
            self.recorder.emit(
                ref, "InjectFailed", f"Watch {self.watch.name}: apply failed: {why}", warning=True
            )
            return "failed"
        self._status(applied, merge.condition(want, _generation(applied), _now()))
        what = (
            f"{len(want.values)} keys from {want.records} ConfigMaps ({want.origin})"
            if want.values is not None
            else "no live record: injected values removed"
        )
        self.recorder.emit(ref, "Injected", f"Watch {self.watch.name}: {what}")
        self.meters.apply_seconds.observe(time.monotonic() - t0)
        log.info(
            "watch %s, runtime %s: applied to %s/%s: %s",
            self.watch.name,
            runtime,
            ref.namespace,
            ref.name,
            what,
        )
        return "applied"

    def _status(self, target: dict[str, Any], cond: dict[str, Any]) -> None:
        """The condition on the target's status (merge patch of the whole conditions list,
        at the object's resourceVersion; a conflict reads it again, three times at most)."""
        meta = target.get("metadata") or {}
        ns, name = str(meta.get("namespace")), str(meta.get("name"))
        obj = target
        for _ in range(3):
            conds = merge.conditions_with((obj.get("status") or {}).get("conditions"), cond)
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            try:
                self.kcp.patch(
                    self.inject.resource,
                    ns,
                    name,
                    {"metadata": {"resourceVersion": rv}, "status": {"conditions": conds}},
                    subresource="status",
                    timeout=self.s.kcp_timeout,
                )
                return
            except gateway.Conflict:
                try:
                    obj = self.kcp.get(self.inject.resource, ns, name, timeout=self.s.kcp_timeout)
                except gateway.GatewayError:
                    break
            except gateway.GatewayError as e:
                self._once(
                    name,
                    "status",
                    "watch %s: status of %s/%s not written: %s",
                    self.watch.name,
                    ns,
                    name,
                    logs.bounded(e, 200),
                )
                return


def _why(e: gateway.GatewayError) -> str:
    """An apply's failure without the API's message (a validation message may quote the
    value it refused): the error's kind and HTTP status."""
    status = f" (HTTP {e.status})" if e.status else ""
    return f"{type(e).__name__}{status}"


def _generation(obj: dict[str, Any]) -> int:
    g = (obj.get("metadata") or {}).get("generation")
    return g if isinstance(g, int) else 0
