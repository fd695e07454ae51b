"""One enroller run: every Kyma CR's runtime connected, or its failure reported.

For each Kyma CR in the KCP namespace (also a bring-your-own cluster: only its kubeconfig
Secret is needed):

1. it is skipped unless it matches ``KYMA_SELECTOR`` (empty: every one) or carries the
   enroller's finalizer; its runtime ID (label) and ``skr-domain`` (annotation) are read;
2. through its kubeconfig Secret, **two reads**: the runtime's client Secret and the
   webhook configuration. Their annotations name the installed bundle's digest and the
   certificates' serials; when both match what would be installed now, the certificates
   are far from expiry and the last full apply is younger than ``RESYNC_SECONDS``, nothing
   is written (the steady state);
   With the Watch CRD installed, the Watches of the KCP namespace (listed once per run,
   ``enroller.watching``) that apply to the runtime are part of what would be installed:
   its webhooks and its ``tether-watches`` list; after a full run each Watch's status;
3. otherwise, once a finalizer (``tether.kyma-project.io/enroller``) is on the Kyma CR (put
   there just before the first write into its runtime, or when the runtime already holds
   Tether: its deletion then waits for Tether's removal, at most
   ``REMOVAL_TIMEOUT_SECONDS``; a Kyma CR whose runtime was never written carries none),
   every object of the rendered bundle (``enroller.render``) is server-side
   applied (field manager ``tether-enroller``, forced): a first install, a renewal (client
   certificate at two thirds of its lifetime, serving certificate likewise, both when the
   watcher CA changed), a repair (a deleted or edited object), a rollout (a new image or
   bundle), or the periodic resync;
4. the runtime's ``RuntimeEnrollment`` in the KCP gets conditions (``Ready`` summary with
   ``observedGeneration``; ``Enrolled``, ``CertificateValid``, ``WebhookServing``,
   ``Heartbeat``), written only when they change, and an Event for each transition.

A failing runtime (no kubeconfig, unreachable or forbidding API, no ``skr-domain``) is
reported in its status, counted by reason, and retried with its own backoff; the others go
on. Work runs ``CONCURRENCY`` runtimes at once, each with a wall-clock deadline
(``RUNTIME_DEADLINE_SECONDS``, ``enroller.dispatch``): a run never waits on one runtime.

This module runs the fleet; per runtime it gathers the facts once (``Enroller.facts``), asks
``decide.plan`` once and performs the plan: ``enroller.install`` the runtime's reads,
issuances and apply, ``enroller.removal`` its removal, ``enroller.enrollment`` its status. What is
done is decided in ``enroller.decide`` and ``enroller.conditions`` (pure, plain data): enroll,
wait or remove; which certificates are renewed; whether and why the bundle is applied. What
bounds one runtime's cost is decided there too: a certificate issued for a runtime is kept
until it was applied and reused meanwhile, at most ``ISSUANCE_LIMIT`` per runtime per hour;
a CA rollover ends when every runtime is renewed or at ``ROLLOVER_DEADLINE_SECONDS``, and a
runtime left holding a certificate of the dropped CA is quarantined (a condition, a gauge,
an audit line) until it is renewed.
"""

from __future__ import annotations

import datetime
import functools
import logging
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from enroller import (
    castore,
    decide,
    discovery,
    dispatch,
    metrics,
    removal,
    render,
    rollouts,
    watching,
)
from enroller import settings as settings_mod
from enroller.enrollment import Enrollments
from enroller.held import CA_SERIAL, serial_hex
from enroller.held import key_matches as _key_matches
from enroller.install import Failure, Installer, Memory, Result
from tether.base import certs, logs, times
from tether.kube import apitypes, events, gateway, kyma, skr_clients
from tether.wire import watches

__all__ = ["CA_SERIAL", "FINALIZER", "Enroller", "Failure", "Memory", "Result", "_key_matches"]

log = logging.getLogger("tether.enroller")

FINALIZER = decide.FINALIZER


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class Enroller:
    def __init__(
        self,
        s: settings_mod.Settings,
        kcp: gateway.Kube,
        skrs: skr_clients.SkrClients,
        stats: metrics.Metrics,
        audit: logging.Logger,
        *,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime.datetime] = _utcnow,
    ) -> None:
        self.s, self.kcp, self.skrs, self.stats, self.audit = s, kcp, skrs, stats, audit
        self.clock, self.now = clock, now
        text = s.bundle_text()
        self.bundle = render.load_bundle(text)
        self.cas = castore.CAStore(
            kcp, s.namespace, s.ca_secret, s.trust_config_map, s.ca_lifetime, audit, now
        )
        self.memory: dict[str, Memory] = {}
        self.dispatcher = dispatch.Dispatcher(s.workers)
        self._lock = threading.Lock()
        self.active: Callable[[], bool] = lambda: True
        self._ca: castore.CA | None = None  # of the last full run
        self._beats: dict[str, datetime.datetime] = {}  # of the last full run
        self.identity = socket.gethostname()
        self.events = events.Recorder(kcp, "tether-enroller", self.identity, now=now)
        self.installer = Installer(s, skrs, stats, audit, self.bundle, clock=clock, now=now)
        self.discoveries = discovery.Discoveries()  # custom Watch kinds per runtime (issue 38)
        self.watching = watching.Watching(kcp, s.kcp_namespace, now)
        self.rollouts = rollouts.Rollouts(s, kcp, skrs, text, self.events, stats, audit, now)
        self.enrollments = Enrollments(
            s, kcp, audit, self.events, now, version=render.image(self.bundle, s.image)
        )

    # -- runs ----------------------------------------------------------------------------

    def run(self, only: set[str] | None = None) -> dict[str, int]:
        """Every Kyma CR (or the named ones); the count of runtimes by state."""
        if not self.active():
            return {}
        t0 = time.monotonic()
        ns = self.s.kcp_namespace
        if only is None or self._ca is None:
            ca = self._ca = self.cas.ensure()  # a rollover starts and ends in full runs only
            self.stats.ca_not_after.set(certs.not_after(ca.current.cert).timestamp())
        else:
            ca = self._ca
        if only is None:  # the fleet: one list each
            kymas = [k for k in self.kcp.list_items(apitypes.KYMAS, ns) if self.selected(k)]
            enrollments = {
                e["metadata"]["name"]: e
                for e in self.kcp.list_items(apitypes.RUNTIME_ENROLLMENTS, ns)
            }
            beats = self._beats = self._heartbeats()
            self.rollouts.begin(kyma.view(k).runtime_id or k["metadata"]["name"] for k in kymas)
        else:  # a reaction to a few Kyma CRs: read those, not the fleet
            kymas = [
                k
                for n in sorted(only)
                if (k := self.kcp.get_or_none(apitypes.KYMAS, ns, n)) is not None
                and self.selected(k)
            ]
            enrollments = {
                n: e
                for n in only
                if (e := self.kcp.get_or_none(apitypes.RUNTIME_ENROLLMENTS, ns, n)) is not None
            }
            beats = self._beats
        listed, unreadable = self._watches()
        by_name = {k["metadata"]["name"]: k for k in kymas}
        work = [
            (n, functools.partial(self.one, k, ca, enrollments.get(n), beats, listed, unreadable))
            for n, k in by_name.items()
        ]
        states: dict[str, str] = {}
        for out in self.dispatcher.run(
            work, concurrency=self.s.concurrency, deadline=self.s.runtime_deadline
        ):
            states[out.key] = self._outcome(
                out, by_name[out.key], ca, enrollments.get(out.key), beats
            )
        counts = Counter(states.values())
        if only is None:
            names = set(by_name)
            with self._lock:
                for gone in set(self.memory) - names:
                    del self.memory[gone]
            for name in enrollments:  # its Kyma CR went without us (no finalizer)
                if name not in names:
                    self.enrollments.delete(name)
            for state in metrics.STATES:
                self.stats.runtimes.labels(state).set(counts.get(state, 0))
            bands = Counter(
                metrics.expiry_band((m.not_after - self.now()).total_seconds() / 86_400)
                for m in self.memory.values()
                if m.not_after is not None
            )
            for band in metrics.EXPIRY_BANDS:
                self.stats.certificates.labels(band).set(bands.get(band, 0))
            ca = self._end_rollover(ca, by_name, enrollments, states, beats)
            watch_states = (
                Counter[str]()
                if listed is None
                else self.watching.write_status(listed, kymas, self._installed)
            )
            for state in metrics.WATCH_STATES:
                self.stats.watches.labels(state).set(watch_states.get(state, 0))
            self.rollouts.end(self._wave_facts(by_name, states), beats)
            self.stats.quarantined.set(sum(1 for n in names if self._mem(n).quarantined))
            self.stats.straggling.set(self.dispatcher.stragglers())
            self.stats.last_success.set(time.time())
            self.stats.run_seconds.observe(time.monotonic() - t0)
        return dict(counts)

    def selected(self, obj: Mapping[str, Any]) -> bool:
        """Whether the enroller works on this Kyma CR: it matches ``KYMA_SELECTOR`` (empty:
        every one), or it carries the enroller's finalizer (installed into before: kept up to
        date and removed on deletion, whatever the selector says now)."""
        meta = obj.get("metadata") or {}
        return decide.selected(
            self.s.kyma_selector,
            meta.get("labels") or {},
            FINALIZER in (meta.get("finalizers") or []),
        )

    def _outcome(
        self,
        out: dispatch.Outcome,
        obj: Mapping[str, Any],
        ca: castore.CA,
        enrollment: Mapping[str, Any] | None,
        beats: Mapping[str, datetime.datetime],
    ) -> str:
        """A runtime's state in this run from what became of its work."""
        name = out.key
        if out.kind == "done":
            return str(out.value)
        if out.kind == "error":  # a bug, not the runtime: reported, the run goes on
            log.error(
                "Kyma %s: the enroller failed: %s",
                name,
                logs.bounded(out.value, 300),
                exc_info=out.value,
            )
            return "Failed"
        if out.kind == "overdue":
            f = Failure(
                "DeadlineExceeded",
                f"the runtime's work did not end within {self.s.runtime_deadline:g}s; "
                "the run went on without it, and it is not started again while it still runs",
            )
            self._failed(obj, kyma.view(obj), ca, enrollment, self._mem(name), f, beats)
            return "Failed"
        self.stats.skipped.labels("Busy" if out.kind == "busy" else "NoWorker").inc()
        log.warning(
            "Kyma %s: skipped in this run: %s",
            name,
            "its earlier work outlived its deadline and still runs"
            if out.kind == "busy"
            else "every worker thread is held by work past its deadline",
        )
        return "Failed"

    def _wave_facts(
        self, by_name: Mapping[str, Mapping[str, Any]], states: Mapping[str, str]
    ) -> dict[str, rollouts.Facts]:
        """What this run learnt of the runtimes of the rollout's current wave."""
        wave = set(self.rollouts.current_wave())
        out = {}
        for name, obj in by_name.items():
            rid = kyma.view(obj).runtime_id or name
            if rid in wave:
                f = self._mem(name).last_failure
                out[rid] = rollouts.Facts(
                    name, states.get(name) == "Ready", None if f is None else f.reason
                )
        return out

    def _watches(self) -> tuple[watching.Listed | None, Failure | None]:
        """This run's Watches (None: no Watch CRD, rendering as before Watches), or why
        every runtime of the run is left as it is (none readable, none known)."""
        try:
            return self.watching.read(), None
        except watching.Unreadable as e:
            log.warning("%s: no runtime is changed in this run", e)
            return None, Failure("WatchesUnreadable", str(e))

    def _installed(self, obj: Mapping[str, Any]) -> watching.Installed:
        """What is known of the Watches a runtime holds, for the Watches' status."""
        view = kyma.view(obj)
        mem = self._mem(view.name)
        f = mem.last_failure
        return watching.Installed(
            view.runtime_id or view.name,
            mem.watches_installed,
            mem.watches_left_out,
            f"{f.reason}: {f.message}" if f is not None else None,
            self.discoveries.refused(view.name),
        )

    def _held(self, name: str, enrollment: Mapping[str, Any] | None) -> str | None:
        """The CA serial of the client certificate the runtime holds, as last seen: by this
        process, else as its RuntimeEnrollment records it (None: unknown)."""
        mem = self._mem(name)
        if mem.held is not None:
            return mem.held
        cert = ((enrollment or {}).get("status") or {}).get("certificate") or {}
        serial = cert.get("caSerial")
        return str(serial) if isinstance(serial, str) else None

    def _end_rollover(
        self,
        ca: castore.CA,
        by_name: Mapping[str, Mapping[str, Any]],
        enrollments: Mapping[str, Mapping[str, Any]],
        states: Mapping[str, str],
        beats: Mapping[str, datetime.datetime],
    ) -> castore.CA:
        """At the end of a full run: the rollover ends when ``decide.rollover`` says so; the
        runtimes it leaves behind are quarantined (logged, audited, their status written now)."""
        verdict = decide.rollover(
            decide.RolloverFacts(
                current=format(ca.current.cert.serial_number, "x"),
                previous=serial_hex(ca.previous),
                started=ca.rollover_started,
                now=self.now(),
                propagation=self.s.rollover_propagation,
                deadline=self.s.rollover_deadline,
                held={n: self._held(n, enrollments.get(n)) for n in by_name},
                failing=frozenset(n for n, state in states.items() if state == "Failed"),
            )
        )
        if verdict.kind != "finish":
            return ca
        done = self.cas.finish_rollover(ca, verdict.cause, len(verdict.quarantined))
        self._ca = done
        if verdict.quarantined:
            log.warning(
                "CA rollover ended at its deadline (%s); %d runtime(s) quarantined: %s",
                self.s.rollover_deadline,
                len(verdict.quarantined),
                ", ".join(verdict.quarantined[:50]),
            )
        for name in verdict.quarantined:
            obj = by_name[name]
            view = kyma.view(obj)
            logs.audit(
                self.audit,
                "runtime_quarantined",
                runtime=view.runtime_id,
                kyma=name,
                ca=serial_hex(ca.previous) or "",
                cause="missed_ca_rollover",
            )
            mem = self._mem(name)
            f = mem.last_failure or Failure(
                "MissedCARollover", "the runtime was not renewed before the CA rollover's deadline"
            )
            self._failure_status(obj, view, done, enrollments.get(name), mem, f, beats)
        return done

    def react(self) -> dict[str, int]:
        """The Kyma CRs that changed since they were last seen (new, edited, being deleted)
        and those enrolled whose webhook does not serve yet: one list of their metadata,
        then a run over those only."""
        if not self.active():
            return {}
        changed = set()
        for k in self.kcp.list_items(apitypes.KYMAS, self.s.kcp_namespace, metadata_only=True):
            if not self.selected(k):  # outside the pilot: not even read again
                continue
            meta = k["metadata"]
            mem = self._mem(meta["name"])
            # changed, or enrolled and waiting for its webhook to serve (Ready within seconds)
            if mem.resource_version != meta.get("resourceVersion") or mem.webhook_serving is False:
                changed.add(meta["name"])
        return self.run(changed) if changed else {}

    def _mem(self, name: str) -> Memory:
        with self._lock:
            return self.memory.setdefault(name, Memory())

    def _heartbeats(self) -> dict[str, datetime.datetime]:
        out: dict[str, datetime.datetime] = {}
        try:
            for lease in self.kcp.list_items(
                gateway.LEASES,
                self.s.heartbeat_namespace,
                label_selector=f"{apitypes.HEARTBEAT_LABEL}=true",
            ):
                rid = (lease["metadata"].get("labels") or {}).get(apitypes.RUNTIME_ID_LABEL)
                t = times.parse_time((lease.get("spec") or {}).get("renewTime"))
                if rid and t is not None:
                    out[rid] = t
        except gateway.GatewayError as e:
            log.warning("heartbeat Leases not readable: %s", logs.bounded(e, 200))
        return out

    # -- one runtime ---------------------------------------------------------------------

    def facts(
        self, obj: Mapping[str, Any], mem: Memory, unreadable: Failure | None = None
    ) -> decide.RuntimeFacts:
        """What this run knows of one runtime before asking it anything: its Kyma CR, what
        this process remembers of it (``mem``), whether the run's Watches are readable."""
        meta = obj["metadata"]
        deleting = bool(meta.get("deletionTimestamp"))
        return decide.RuntimeFacts(
            deleting=deleting,
            finalizer=FINALIZER in (meta.get("finalizers") or []),
            backing_off=not deleting and self.clock() < mem.next_attempt,
            failed_before=mem.last_failure is not None,
            unreadable=None if unreadable is None else (unreadable.reason, unreadable.message),
        )

    def one(
        self,
        obj: Mapping[str, Any],
        ca: castore.CA,
        enrollment: Mapping[str, Any] | None,
        beats: Mapping[str, datetime.datetime],
        listed: watching.Listed | None = None,
        unreadable: Failure | None = None,
    ) -> str:
        """One runtime enrolled (``listed``: the run's Watches, None before Watches), removed
        or left waiting, as ``decide.plan`` says; its state in this run."""
        meta = obj["metadata"]
        name = meta["name"]
        mem = self._mem(name)
        mem.resource_version = str(meta.get("resourceVersion", ""))
        plan = decide.plan(self.facts(obj, mem, unreadable))
        if plan.kind == "forget":  # nothing was written into its runtime
            self.enrollments.delete(name)
            return "Removing"
        if plan.kind == "remove":
            return removal.remove(self, obj, enrollment)
        view = kyma.view(obj)
        if plan.kind == "wait":
            if plan.status and mem.last_failure is not None:  # nothing asked of the runtime
                self._failure_status(obj, view, ca, enrollment, mem, mem.last_failure, beats)
            return "Failed"
        try:
            if plan.failure is not None:
                raise Failure(*plan.failure)
            result = self._enroll(obj, view, ca, mem, listed)
        except Failure as f:
            self._failed(obj, view, ca, enrollment, mem, f, beats)
            return "Failed"
        mem.failures, mem.next_attempt, mem.last_failure = 0, 0.0, None
        mem.not_after = result.not_after
        self.enrollments.write(
            obj,
            view,
            enrollment,
            mem,
            failure=None,
            result=result,
            beat=beats.get(result.runtime_id),
            quarantined=False,
        )
        return "Ready"

    def _enroll(
        self,
        obj: Mapping[str, Any],
        view: kyma.KymaView,
        ca: castore.CA,
        mem: Memory,
        listed: watching.Listed | None,
    ) -> Result:
        """The ``enroll`` plan performed: the Watches in force there and the rollout's bundle
        looked up, then the installer's reads, renewals and apply (``Installer.enroll``)."""
        rid = view.runtime_id or view.name
        ws = None
        if listed is not None:
            ws, mem.watches_left_out = listed.for_runtime(obj)
            ws = self._discovered(view, ws)
        chosen = self.rollouts.choose(rid)
        result = self.installer.enroll(
            view,
            ca,
            mem,
            ws,
            (chosen.objects, chosen.image),
            (obj["metadata"].get("annotations") or {}).get(decide.TAKE_OVER_ANNOTATION),
            before_write=lambda _cause: self._ensure_finalizer(obj),
        )
        self.rollouts.enrolled(rid, chosen.digest)
        return result

    def _discovered(
        self, view: kyma.KymaView, ws: tuple[watches.Watch, ...]
    ) -> tuple[watches.Watch, ...]:
        """The Watches of custom resources whose kind the runtime's discovery confirms
        (``enroller.discovery``); without a client the installer reports why."""
        try:
            skr = self.skrs.get(view.name)
        except skr_clients.SkrClientError:
            return ws
        return self.discoveries.check(
            view.name,
            skr,
            ws,
            self.clock(),
            self.s.resync,
            self.s.skr_timeout,
            self.stats.requests.labels("read").inc,
        )

    def _failed(
        self,
        obj: Mapping[str, Any],
        view: kyma.KymaView,
        ca: castore.CA,
        enrollment: Mapping[str, Any] | None,
        mem: Memory,
        f: Failure,
        beats: Mapping[str, datetime.datetime],
    ) -> None:
        mem.failures += 1
        mem.next_attempt = self.clock() + decide.backoff(
            mem.failures, self.s.backoff_base, self.s.backoff_cap
        )
        mem.last_failure = f
        self.stats.failures.labels(f.reason).inc()
        log.warning(
            "runtime of Kyma %s: %s: %s (retry in %.0fs)",
            view.name,
            f.reason,
            f.message,
            mem.next_attempt - self.clock(),
        )
        self._failure_status(obj, view, ca, enrollment, mem, f, beats)

    def _failure_status(
        self,
        obj: Mapping[str, Any],
        view: kyma.KymaView,
        ca: castore.CA,
        enrollment: Mapping[str, Any] | None,
        mem: Memory,
        f: Failure,
        beats: Mapping[str, datetime.datetime],
    ) -> None:
        q = decide.quarantined(
            self._held(view.name, enrollment),
            format(ca.current.cert.serial_number, "x"),
            serial_hex(ca.previous),
        )
        self.enrollments.write(
            obj,
            view,
            enrollment,
            mem,
            failure=f,
            result=None,
            beat=beats.get(view.runtime_id or ""),
            quarantined=q,
        )

    def _ensure_finalizer(self, obj: Mapping[str, Any]) -> None:
        meta = obj["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        if FINALIZER in finalizers:
            return
        try:
            self.kcp.patch(
                apitypes.KYMAS,
                self.s.kcp_namespace,
                meta["name"],
                {
                    "metadata": {
                        "finalizers": [*finalizers, FINALIZER],
                        "resourceVersion": meta["resourceVersion"],
                    }
                },
            )
        except gateway.Conflict:
            raise Failure(
                "KymaChanged", "the Kyma CR changed while adding the finalizer; next run"
            ) from None
        except gateway.GatewayError as e:
            raise Failure(
                "KcpUnavailable", f"adding the finalizer: {logs.bounded(e, 200)}"
            ) from None
