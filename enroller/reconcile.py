"""One enroller run: every Kyma CR's runtime connected, or its failure reported.

For each Kyma CR in the KCP namespace (also a bring-your-own cluster: only its kubeconfig
Secret is needed):

1. its runtime ID (label) and ``skr-domain`` (annotation) are read; a finalizer
   (``tether.kyma-project.io/enroller``) is put on it so that its deletion waits for
   Tether's removal from the runtime (at most ``REMOVAL_TIMEOUT_SECONDS``);
2. through its kubeconfig Secret, **two reads**: the runtime's client Secret and the
   webhook configuration. Their annotations name the installed bundle's digest and the
   certificates' serials; when both match what would be installed now, the certificates
   are far from expiry and the last full apply is younger than ``RESYNC_SECONDS``, nothing
   is written (the steady state);
3. otherwise every object of the rendered bundle (``enroller.render``) is server-side
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

What bounds one runtime's cost is decided in ``enroller.decide`` (pure): a certificate
issued for a runtime is kept until it was applied and reused meanwhile, at most
``ISSUANCE_LIMIT`` per runtime per hour; a CA rollover ends when every runtime is renewed or
at ``ROLLOVER_DEADLINE_SECONDS``, and a runtime left holding a certificate of the dropped CA
is quarantined (a condition, a gauge, an audit line) until it is renewed.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import functools
import logging
import math
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from enroller import castore, decide, dispatch, metrics, render
from enroller import settings as settings_mod
from tether import apitypes, certs, changes, events, gateway, kyma, logs, pki, skr_clients

log = logging.getLogger("tether.enroller")

FINALIZER = "tether.kyma-project.io/enroller"
CA_SERIAL = "tether.kyma-project.io/ca-serial"
QUARANTINED = "MissedCARollover"  # the Quarantined condition's reason (and Ready's, while it lasts)
HEARTBEAT_STALE = datetime.timedelta(minutes=10)


class Failure(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


@dataclasses.dataclass
class Memory:
    """What the enroller keeps per runtime between runs (lost on restart: the first run
    then re-applies everything once)."""
    failures: int = 0
    next_attempt: float = 0.0
    last_full: float = -math.inf
    status: dict[str, Any] | None = None
    resource_version: str = ""
    webhook_serving: bool | None = None
    not_after: datetime.datetime | None = None
    held: str | None = None  # CA serial of the client certificate the runtime holds ("" none)
    last_failure: Failure | None = None
    quarantined: bool = False
    # certificates issued and not applied yet (kind -> PEM certificate, key): reused until
    # applied, so that failing applies mint no new ones; when issued (the hourly limit)
    pending: dict[str, tuple[bytes, bytes]] = dataclasses.field(default_factory=dict)
    issued: tuple[datetime.datetime, ...] = ()


@dataclasses.dataclass
class Result:
    runtime_id: str
    applied: str | None        # the cause of a full apply, None when nothing was written
    renewed: list[str]         # "client", "serving"
    not_after: datetime.datetime
    webhook_serving: bool | None
    ca_serial: str             # of the CA that issued the client certificate now installed


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _serial(cert: x509.Certificate | None) -> str | None:
    return format(cert.serial_number, "x") if cert is not None else None


class Enroller:
    def __init__(self, s: settings_mod.Settings, kcp: gateway.Kube, skrs: skr_clients.SkrClients,
                 stats: metrics.Metrics, audit: logging.Logger, *,
                 clock: Callable[[], float] = time.monotonic,
                 now: Callable[[], datetime.datetime] = _utcnow) -> None:
        self.s, self.kcp, self.skrs, self.stats, self.audit = s, kcp, skrs, stats, audit
        self.clock, self.now = clock, now
        self.bundle = render.load_bundle(s.bundle_text())
        self.cas = castore.CAStore(kcp, s.namespace, s.ca_secret, s.trust_config_map, s.ca_lifetime,
                                   audit, now)
        self.memory: dict[str, Memory] = {}
        self.dispatcher = dispatch.Dispatcher(s.workers)
        self._lock = threading.Lock()
        self.active: Callable[[], bool] = lambda: True
        self._ca: castore.CA | None = None  # of the last full run
        self._beats: dict[str, datetime.datetime] = {}  # of the last full run
        self.identity = socket.gethostname()
        self.events = events.Recorder(kcp, "tether-enroller", self.identity, now=now)

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
            kymas = list(self.kcp.list_items(apitypes.KYMAS, ns))
            enrollments = {e["metadata"]["name"]: e for e in self.kcp.list_items(apitypes.RUNTIME_ENROLLMENTS, ns)}
            beats = self._beats = self._heartbeats()
        else:  # a reaction to a few Kyma CRs: read those, not the fleet
            kymas = [k for n in sorted(only) if (k := self.kcp.get_or_none(apitypes.KYMAS, ns, n)) is not None]
            enrollments = {n: e for n in only if (e := self.kcp.get_or_none(apitypes.RUNTIME_ENROLLMENTS, ns, n)) is not None}
            beats = self._beats
        by_name = {k["metadata"]["name"]: k for k in kymas}
        work = [(n, functools.partial(self.one, k, ca, enrollments.get(n), beats)) for n, k in by_name.items()]
        states: dict[str, str] = {}
        for out in self.dispatcher.run(work, concurrency=self.s.concurrency, deadline=self.s.runtime_deadline):
            states[out.key] = self._outcome(out, by_name[out.key], ca, enrollments.get(out.key), beats)
        counts = Counter(states.values())
        if only is None:
            names = set(by_name)
            with self._lock:
                for gone in set(self.memory) - names:
                    del self.memory[gone]
            for name in enrollments:  # its Kyma CR went without us (no finalizer)
                if name not in names:
                    self._delete_enrollment(name)
            for state in metrics.STATES:
                self.stats.runtimes.labels(state).set(counts.get(state, 0))
            bands = Counter(metrics.expiry_band((m.not_after - self.now()).total_seconds() / 86_400)
                            for m in self.memory.values() if m.not_after is not None)
            for band in metrics.EXPIRY_BANDS:
                self.stats.certificates.labels(band).set(bands.get(band, 0))
            ca = self._end_rollover(ca, by_name, enrollments, states, beats)
            self.stats.quarantined.set(sum(1 for n in names if self._mem(n).quarantined))
            self.stats.straggling.set(self.dispatcher.stragglers())
            self.stats.last_success.set(time.time())
            self.stats.run_seconds.observe(time.monotonic() - t0)
        return dict(counts)

    def _outcome(self, out: dispatch.Outcome, obj: Mapping[str, Any], ca: castore.CA,
                 enrollment: Mapping[str, Any] | None, beats: Mapping[str, datetime.datetime]) -> str:
        """A runtime's state in this run from what became of its work."""
        name = out.key
        if out.kind == "done":
            return str(out.value)
        if out.kind == "error":  # a bug, not the runtime: reported, the run goes on
            log.error("Kyma %s: the enroller failed: %s", name, logs.bounded(out.value, 300),
                      exc_info=out.value)
            return "Failed"
        if out.kind == "overdue":
            f = Failure("DeadlineExceeded", f"the runtime's work did not end within {self.s.runtime_deadline:g}s; "
                        "the run went on without it, and it is not started again while it still runs")
            self._failed(obj, kyma.view(obj), ca, enrollment, self._mem(name), f, beats)
            return "Failed"
        self.stats.skipped.labels("Busy" if out.kind == "busy" else "NoWorker").inc()
        log.warning("Kyma %s: skipped in this run: %s", name,
                    "its earlier work outlived its deadline and still runs" if out.kind == "busy"
                    else "every worker thread is held by work past its deadline")
        return "Failed"

    def _held(self, name: str, enrollment: Mapping[str, Any] | None) -> str | None:
        """The CA serial of the client certificate the runtime holds, as last seen: by this
        process, else as its RuntimeEnrollment records it (None: unknown)."""
        mem = self._mem(name)
        if mem.held is not None:
            return mem.held
        cert = ((enrollment or {}).get("status") or {}).get("certificate") or {}
        serial = cert.get("caSerial")
        return str(serial) if isinstance(serial, str) else None

    def _end_rollover(self, ca: castore.CA, by_name: Mapping[str, Mapping[str, Any]],
                      enrollments: Mapping[str, Mapping[str, Any]], states: Mapping[str, str],
                      beats: Mapping[str, datetime.datetime]) -> castore.CA:
        """At the end of a full run: the rollover ends when ``decide.rollover`` says so; the
        runtimes it leaves behind are quarantined (logged, audited, their status written now)."""
        verdict = decide.rollover(decide.RolloverFacts(
            current=format(ca.current.cert.serial_number, "x"), previous=_serial(ca.previous),
            started=ca.rollover_started, now=self.now(), propagation=self.s.rollover_propagation,
            deadline=self.s.rollover_deadline, held={n: self._held(n, enrollments.get(n)) for n in by_name},
            failing=frozenset(n for n, state in states.items() if state == "Failed")))
        if verdict.kind != "finish":
            return ca
        done = self.cas.finish_rollover(ca, verdict.cause, len(verdict.quarantined))
        self._ca = done
        if verdict.quarantined:
            log.warning("CA rollover ended at its deadline (%s); %d runtime(s) quarantined: %s",
                        self.s.rollover_deadline, len(verdict.quarantined), ", ".join(verdict.quarantined[:50]))
        for name in verdict.quarantined:
            obj = by_name[name]
            view = kyma.view(obj)
            logs.audit(self.audit, "runtime_quarantined", runtime=view.runtime_id, kyma=name,
                       ca=_serial(ca.previous) or "", cause="missed_ca_rollover")
            mem = self._mem(name)
            f = mem.last_failure or Failure(
                "MissedCARollover", "the runtime was not renewed before the CA rollover's deadline")
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
            for lease in self.kcp.list_items(gateway.LEASES, self.s.heartbeat_namespace,
                                             label_selector=f"{apitypes.HEARTBEAT_LABEL}=true"):
                rid = (lease["metadata"].get("labels") or {}).get(apitypes.RUNTIME_ID_LABEL)
                t = changes.parse_time((lease.get("spec") or {}).get("renewTime"))
                if rid and t is not None:
                    out[rid] = t
        except gateway.GatewayError as e:
            log.warning("heartbeat Leases not readable: %s", logs.bounded(e, 200))
        return out

    # -- one runtime ---------------------------------------------------------------------

    def one(self, obj: Mapping[str, Any], ca: castore.CA, enrollment: Mapping[str, Any] | None,
            beats: Mapping[str, datetime.datetime]) -> str:
        meta = obj["metadata"]
        name = meta["name"]
        mem = self._mem(name)
        mem.resource_version = str(meta.get("resourceVersion", ""))
        if meta.get("deletionTimestamp"):
            return self.remove(obj, enrollment)
        view = kyma.view(obj)
        if self.clock() < mem.next_attempt:
            if mem.last_failure is not None:  # nothing asked of the runtime; its status kept true
                self._failure_status(obj, view, ca, enrollment, mem, mem.last_failure, beats)
            return "Failed"
        try:
            self._ensure_finalizer(obj)
            result = self._enroll(view, ca, mem)
        except Failure as f:
            self._failed(obj, view, ca, enrollment, mem, f, beats)
            return "Failed"
        mem.failures, mem.next_attempt, mem.last_failure = 0, 0.0, None
        mem.not_after = result.not_after
        self._write_status(obj, view, enrollment, mem, failure=None, result=result,
                           beat=beats.get(result.runtime_id), quarantined=False)
        return "Ready"

    def _failed(self, obj: Mapping[str, Any], view: kyma.KymaView, ca: castore.CA,
                enrollment: Mapping[str, Any] | None, mem: Memory, f: Failure,
                beats: Mapping[str, datetime.datetime]) -> None:
        mem.failures += 1
        mem.next_attempt = self.clock() + decide.backoff(mem.failures, self.s.backoff_base, self.s.backoff_cap)
        mem.last_failure = f
        self.stats.failures.labels(f.reason).inc()
        log.warning("runtime of Kyma %s: %s: %s (retry in %.0fs)", view.name, f.reason, f.message,
                    mem.next_attempt - self.clock())
        self._failure_status(obj, view, ca, enrollment, mem, f, beats)

    def _failure_status(self, obj: Mapping[str, Any], view: kyma.KymaView, ca: castore.CA,
                        enrollment: Mapping[str, Any] | None, mem: Memory, f: Failure,
                        beats: Mapping[str, datetime.datetime]) -> None:
        q = decide.quarantined(self._held(view.name, enrollment), format(ca.current.cert.serial_number, "x"),
                               _serial(ca.previous))
        self._write_status(obj, view, enrollment, mem, failure=f, result=None,
                           beat=beats.get(view.runtime_id or ""), quarantined=q)

    def _ensure_finalizer(self, obj: Mapping[str, Any]) -> None:
        meta = obj["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        if FINALIZER in finalizers:
            return
        try:
            self.kcp.patch(apitypes.KYMAS, self.s.kcp_namespace, meta["name"], {"metadata": {
                "finalizers": [*finalizers, FINALIZER], "resourceVersion": meta["resourceVersion"]}})
        except gateway.Conflict:
            raise Failure("KymaChanged", "the Kyma CR changed while adding the finalizer; next run") from None
        except gateway.GatewayError as e:
            raise Failure("KcpUnavailable", f"adding the finalizer: {logs.bounded(e, 200)}") from None

    def _read(self, skr: gateway.Kube, res: gateway.Resource, namespace: str | None,
              name: str) -> dict[str, Any] | None:
        self.stats.requests.labels("read").inc()
        try:
            return skr.get_or_none(res, namespace, name, timeout=self.s.skr_timeout)
        except gateway.Forbidden as e:
            raise Failure("Forbidden", f"the runtime's API refuses the kubeconfig: {logs.bounded(e, 200)}") from None
        except gateway.GatewayError as e:
            raise Failure(_unreachable(e), f"the runtime's API: {logs.bounded(e, 200)}") from None

    def _enroll(self, view: kyma.KymaView, ca: castore.CA, mem: Memory) -> Result:
        if not view.runtime_id or not kyma.valid_runtime_id(view.runtime_id):
            raise Failure("RuntimeIdMissing", f"the Kyma CR has no valid {apitypes.RUNTIME_ID_LABEL} label")
        if not view.domain:
            raise Failure("DomainMissing", f"the Kyma CR has no {apitypes.SKR_DOMAIN_ANNOTATION} annotation")
        try:
            skr = self.skrs.get(view.name)
        except skr_clients.SkrClientError as e:
            refused = getattr(skr_clients, "KubeconfigRefused", None)
            if refused is not None and isinstance(e, refused):
                raise Failure("KubeconfigRefused", f"the kubeconfig's {getattr(e, 'field', 'content')} is "
                              f"refused: {logs.bounded(e, 300)}") from None
            raise Failure("KubeconfigMissing", str(e)) from None
        now = self.now()
        client_secret = self._read(skr, gateway.SECRETS, render.NAMESPACE, render.CLIENT_SECRET)
        hook = self._read(skr, apitypes.VALIDATING_WEBHOOK_CONFIGURATIONS, None, render.WEBHOOK_CONFIG)
        notes = ((client_secret or {}).get("metadata") or {}).get("annotations") or {}
        data = (client_secret or {}).get("data") or {}
        client_pem = base64.b64decode(data["tls.crt"]) if "tls.crt" in data else None
        ca_serial = format(ca.current.cert.serial_number, "x")
        mem.held = _issuer(client_pem, ca, mem.held)  # what it holds, whatever happens next
        renewed: list[str] = []
        reason: str | None = pki.needs_renewal(client_pem, ca.current, now, runtime_id=view.runtime_id,
                                               domain=view.domain)
        settled = ca.trusted_everywhere(now, self.s.rollover_propagation)
        if reason == "foreign_issuer" and not settled and ca.previous is not None and client_pem and \
                pki.needs_renewal(client_pem, [ca.previous], now, runtime_id=view.runtime_id, domain=view.domain) is None:
            reason = None  # a rollover in progress: the old CA's certificate stays until the new CA is trusted
        if reason is None and (client_pem is None or not _key_matches(client_pem, data.get("tls.key"))):
            reason = "key_mismatch"  # an edited or half-written Secret: the pair is reissued
        rid, domain = view.runtime_id, view.domain
        if reason is None and client_pem is not None:
            client_cert, client_key = client_pem, base64.b64decode(data["tls.key"])
        else:
            def client_pair() -> certs.KeyPair:
                try:
                    return pki.client_certificate(ca.current, rid, domain, self.s.cert_lifetime, now)
                except pki.PKIError as e:
                    raise Failure("InvalidDomain", str(e)) from None
            client_cert, client_key = self._certificate("client", view, ca, mem, now, reason or "missing_key",
                                                        client_pair, runtime_id=rid, domain=domain)
            renewed.append("client")
        parsed = x509.load_pem_x509_certificate(client_cert)
        client_ca = _issuer(client_cert, ca, None)
        serving_not_after = changes.parse_time(notes.get(render.SERVING_NOT_AFTER, ""))
        serving_renew_at = changes.parse_time(notes.get(render.SERVING_RENEW_AT, ""))
        serving_reason = None
        serving_ca_serial = notes.get(CA_SERIAL, "")
        previous_serial = format(ca.previous.serial_number, "x") if ca.previous is not None else None
        if serving_ca_serial == previous_serial and not settled:
            pass  # a rollover in progress: kept until the new CA is trusted
        elif serving_ca_serial != ca_serial:
            serving_reason = "ca_changed" if serving_ca_serial else "missing"
        elif serving_renew_at is None or now >= serving_renew_at:
            serving_reason = "expiring"
        serving_cert = serving_key = b""
        serving_serial = notes.get(render.SERVING_SERIAL, "")
        def serving_pair() -> certs.KeyPair:
            return pki.serving_certificate(ca.current, list(render.WEBHOOK_SERVICE_NAMES), self.s.cert_lifetime, now)
        if serving_reason is not None:
            serving_cert, serving_key = self._certificate("serving", view, ca, mem, now, serving_reason, serving_pair)
            scert = x509.load_pem_x509_certificate(serving_cert)
            serving_serial = format(scert.serial_number, "x")
            serving_not_after = certs.not_after(scert)
            serving_renew_at = pki.renew_at(scert)
            serving_ca_serial = ca_serial
            renewed.append("serving")
        inputs = render.Inputs(
            runtime_id=view.runtime_id, listener_url=self.s.listener_url, listener_ca=self.s.listener_ca,
            client_cert=client_cert, client_key=client_key, client_serial=format(parsed.serial_number, "x"),
            serving_cert=serving_cert, serving_key=serving_key, serving_serial=serving_serial,
            serving_not_after=changes.format_time(serving_not_after) if serving_not_after else "",
            serving_renew_at=changes.format_time(serving_renew_at) if serving_renew_at else "",
            ca_bundle=ca.bundle, image=self.s.image)
        objs = render.render(self.bundle, inputs)
        want = next(o for o in objs if o["kind"] == "ValidatingWebhookConfiguration")["metadata"]["annotations"][render.DIGEST]
        have = (((hook or {}).get("metadata") or {}).get("annotations") or {}).get(render.DIGEST)
        stale = self.clock() - mem.last_full >= self.s.resync
        missing = client_secret is None or hook is None
        first = client_secret is None and hook is None and mem.last_full == -math.inf
        cause = ("installed" if first else "repaired" if missing
                 else "renewed" if renewed
                 else "updated" if have != want or notes.get(render.DIGEST) != want
                 else "resync" if stale else None)
        if cause is not None:
            if not serving_cert:  # kept: its Secret is needed for the apply
                serving = self._read(skr, gateway.SECRETS, render.NAMESPACE, render.SERVING_SECRET)
                sdata = (serving or {}).get("data") or {}
                if "tls.crt" in sdata and "tls.key" in sdata:
                    inputs = dataclasses.replace(inputs, serving_cert=base64.b64decode(sdata["tls.crt"]),
                                                 serving_key=base64.b64decode(sdata["tls.key"]))
                else:  # deleted while the notes call it current: a new one
                    scert_pem, skey_pem = self._certificate("serving", view, ca, mem, now, "missing", serving_pair)
                    scert = x509.load_pem_x509_certificate(scert_pem)
                    serving_ca_serial = ca_serial
                    renewed.append("serving")
                    inputs = dataclasses.replace(
                        inputs, serving_cert=scert_pem, serving_key=skey_pem,
                        serving_serial=format(scert.serial_number, "x"),
                        serving_not_after=changes.format_time(certs.not_after(scert)),
                        serving_renew_at=changes.format_time(pki.renew_at(scert)))
                objs = render.render(self.bundle, inputs)
            for o in objs:
                if o["kind"] == "Secret" and o["metadata"]["name"] == render.CLIENT_SECRET:
                    o["metadata"]["annotations"][CA_SERIAL] = serving_ca_serial  # the serving certificate's issuer
            self._apply(skr, objs)
            mem.pending.clear()  # applied: what was issued is in the runtime now
            mem.held = client_ca
            mem.last_full = self.clock()
            self.stats.applies.labels(cause).inc()
            log.info("runtime %s (Kyma %s): applied %d objects (%s)", view.runtime_id, view.name, len(objs), cause)
        if cause is not None or mem.webhook_serving is not True:
            dep = self._read(skr, apitypes.DEPLOYMENTS, render.NAMESPACE, "tether-webhook")
            mem.webhook_serving = bool(dep and ((dep.get("status") or {}).get("availableReplicas") or 0) > 0)
        return Result(view.runtime_id, cause, renewed, certs.not_after(parsed), mem.webhook_serving, client_ca)

    def _certificate(self, kind: str, view: kyma.KymaView, ca: castore.CA, mem: Memory, now: datetime.datetime,
                     cause: str, make: Callable[[], certs.KeyPair], *, runtime_id: str | None = None,
                     domain: str | None = None) -> tuple[bytes, bytes]:
        """A new certificate for the runtime (PEM certificate, key): the one issued earlier and
        not applied yet while it is still good, else a new one within the hourly limit."""
        pending = mem.pending.get(kind)
        usable = pending is not None and pki.needs_renewal(pending[0], ca.current, now, runtime_id=runtime_id,
                                                           domain=domain) is None
        mem.issued = decide.recent(mem.issued, now)
        action = decide.certificate(decide.CertificateFacts(cause, usable, len(mem.issued), self.s.issuance_budget))
        if action == "reuse":
            assert pending is not None
            return pending
        if action == "rate_limited":
            self.stats.rate_limited.inc()
            at = decide.next_issuance(mem.issued, now, self.s.issuance_budget)
            raise Failure("IssuanceRateLimited", f"{len(mem.issued)} certificates were issued for this runtime "
                          f"in the last hour (the limit is {self.s.issuance_budget}); no new {kind} certificate "
                          f"before {changes.format_time(at)}")
        pair = make()
        self._issued(kind, view, pair, cause)
        mem.issued = (*mem.issued, now)
        mem.pending[kind] = (pair.cert_pem, pair.key_pem)
        return pair.cert_pem, pair.key_pem

    def _issued(self, kind: str, view: kyma.KymaView, pair: certs.KeyPair, cause: str) -> None:
        self.stats.issued.labels(kind, cause).inc()
        logs.audit(self.audit, "certificate_issued", kind=kind, runtime=view.runtime_id, kyma=view.name,
                   serial=format(pair.cert.serial_number, "x"),
                   not_after=changes.format_time(certs.not_after(pair.cert)), cause=cause)

    def _apply(self, skr: gateway.Kube, objs: list[dict[str, Any]]) -> None:
        for o in objs:
            res = render.resource(o)
            meta = o["metadata"]
            self.stats.requests.labels("write").inc()
            try:
                skr.apply(res, meta.get("namespace"), meta["name"], o, field_manager=render.MANAGER,
                          timeout=self.s.skr_timeout)
            except gateway.Forbidden as e:
                raise Failure("Forbidden", f"applying {o['kind']} {meta['name']}: {logs.bounded(e, 200)}") from None
            except gateway.Rejected as e:
                raise Failure("Rejected", f"applying {o['kind']} {meta['name']}: {logs.bounded(e, 200)}") from None
            except gateway.GatewayError as e:
                raise Failure(_unreachable(e), f"applying {o['kind']} {meta['name']}: {logs.bounded(e, 200)}") from None

    # -- removal -------------------------------------------------------------------------

    def remove(self, obj: Mapping[str, Any], enrollment: Mapping[str, Any] | None) -> str:
        meta = obj["metadata"]
        name = meta["name"]
        view = kyma.view(obj)
        if FINALIZER not in (meta.get("finalizers") or []):
            self._delete_enrollment(name)
            return "Removing"
        since = changes.parse_time(meta.get("deletionTimestamp", "")) or self.now()
        timed_out = self.now() - since >= datetime.timedelta(seconds=self.s.removal_timeout)
        problem = None
        try:
            skr = self.skrs.get(name)
            for o in reversed(render.render(self.bundle, _placeholder(view.runtime_id or ""))):
                res = render.resource(o)
                self.stats.requests.labels("write").inc()
                try:
                    skr.delete(res, o["metadata"].get("namespace"), o["metadata"]["name"], timeout=self.s.skr_timeout)
                except gateway.NotFound:
                    pass
        except (skr_clients.SkrClientError, gateway.GatewayError) as e:
            problem = logs.bounded(e, 200)
        if problem is not None and not timed_out:
            log.warning("Kyma %s deleted: removing Tether from its runtime failed (%s); retried until "
                        "the %ds timeout", name, problem, self.s.removal_timeout)
            return "Removing"
        try:
            self.kcp.patch(apitypes.KYMAS, self.s.kcp_namespace, name, {"metadata": {
                "finalizers": [f for f in meta.get("finalizers") or [] if f != FINALIZER],
                "resourceVersion": meta["resourceVersion"]}})
        except gateway.GatewayError as e:
            log.warning("Kyma %s: releasing the finalizer failed: %s", name, logs.bounded(e, 200))
            return "Removing"
        outcome = "removed" if problem is None else "removal_timed_out"
        logs.audit(self.audit, "runtime_removed", runtime=view.runtime_id, kyma=name, outcome=outcome)
        self._event(obj, "Kyma", "Removed" if problem is None else "RemovalTimedOut",
                    "Tether removed from the runtime" if problem is None else
                    f"the runtime was not reachable for {self.s.removal_timeout:.0f}s: {problem}",
                    warning=problem is not None, api_version=f"{apitypes.KYMAS.group}/{apitypes.KYMAS.version}")
        self._delete_enrollment(name)
        self.skrs.forget(name)
        return "Removing"

    def _delete_enrollment(self, name: str) -> None:
        try:
            self.kcp.delete(apitypes.RUNTIME_ENROLLMENTS, self.s.kcp_namespace, name)
        except gateway.NotFound:
            pass
        except gateway.GatewayError as e:
            log.warning("RuntimeEnrollment %s: delete failed: %s", name, logs.bounded(e, 200))

    # -- status --------------------------------------------------------------------------

    def _write_status(self, obj: Mapping[str, Any], view: kyma.KymaView, enrollment: Mapping[str, Any] | None,
                      mem: Memory, *, failure: Failure | None, result: Result | None,
                      beat: datetime.datetime | None, quarantined: bool) -> None:
        name = view.name
        now = self.now()
        previous = {c["type"]: c for c in ((enrollment or {}).get("status") or {}).get("conditions") or []}
        if mem.status is not None:
            previous = {c["type"]: c for c in mem.status.get("conditions") or []}
        gen = int(((enrollment or {}).get("metadata") or {}).get("generation") or 1)

        def cond(kind: str, ok: bool | None, reason: str, message: str) -> dict[str, Any]:
            status = "Unknown" if ok is None else "True" if ok else "False"
            old = previous.get(kind)
            since = old["lastTransitionTime"] if old and old.get("status") == status else changes.format_time(now)
            return {"type": kind, "status": status, "reason": reason, "message": message[:1000],
                    "observedGeneration": gen, "lastTransitionTime": since}

        def kept(kind: str) -> dict[str, Any]:
            """A condition this pass could not evaluate: as it was (metav1.Condition fields
            completed, e.g. one written before observedGeneration was), else Unknown."""
            old = previous.get(kind)
            if not old:
                return cond(kind, None, "Unknown", "not enrolled yet")
            return {"observedGeneration": gen, "reason": "Unknown", "message": "",
                    "lastTransitionTime": changes.format_time(now), **old}

        if failure is not None:
            enrolled = cond("Enrolled", False, failure.reason, failure.message)
            cert, hook = kept("CertificateValid"), kept("WebhookServing")
        else:
            assert result is not None
            enrolled = cond("Enrolled", True, "Installed", "Tether's objects are installed in the runtime")
            left = result.not_after - now
            cert = cond("CertificateValid", left.total_seconds() > 0, "Valid" if left.total_seconds() > 0 else "Expired",
                        f"client certificate valid until {changes.format_time(result.not_after)}")
            hook = cond("WebhookServing", result.webhook_serving,
                        "Available" if result.webhook_serving else "NoAvailableReplicas",
                        "the webhook Deployment has available replicas" if result.webhook_serving
                        else "the webhook Deployment has no available replica")
        fresh = beat is not None and now - beat <= HEARTBEAT_STALE
        heart = cond("Heartbeat", fresh if beat is not None else None,
                     "Recent" if fresh else "Stale" if beat is not None else "None",
                     f"last delivery {changes.format_time(beat)}" if beat is not None else "no delivery seen yet")
        quarantine = cond("Quarantined", quarantined, QUARANTINED if quarantined else "NotQuarantined",
                          "its client certificate is from a CA no longer trusted (it was not renewed before "
                          "the CA rollover's deadline): the listener refuses it; it gets new certificates "
                          "when the enroller reaches it" if quarantined
                          else "its client certificate, if any, is from a trusted CA")
        ready_ok = failure is None and not quarantined and all(c["status"] == "True" for c in (enrolled, cert, hook))
        why = (QUARANTINED if quarantined else failure.reason if failure else
               next((c["reason"] for c in (cert, hook) if c["status"] != "True"), "Ready"))
        ready = cond("Ready", ready_ok, "Ready" if ready_ok else why,
                     "the runtime is connected" if ready_ok else
                     f"quarantined: {quarantine['message']}; {failure.message if failure else ''}" if quarantined
                     else (failure.message if failure else f"{why}"))
        status: dict[str, Any] = {"observedGeneration": gen,
                                  "conditions": [ready, enrolled, cert, hook, heart, quarantine]}
        if result is not None:
            status["certificate"] = {"notAfter": changes.format_time(result.not_after), "caSerial": result.ca_serial}
        elif (mem.status or {}).get("certificate"):
            status["certificate"] = (mem.status or {})["certificate"]
        elif enrollment and (enrollment.get("status") or {}).get("certificate"):
            status["certificate"] = enrollment["status"]["certificate"]
        status["version"] = self.s.image or "bundle"
        if mem.status == status:
            return
        if enrollment is None and mem.status is None:
            body = {"apiVersion": f"{apitypes.RUNTIME_ENROLLMENTS.group}/{apitypes.RUNTIME_ENROLLMENTS.version}", "kind": "RuntimeEnrollment",
                    "metadata": {"name": name, "namespace": self.s.kcp_namespace,
                                 "labels": {apitypes.RUNTIME_ID_LABEL: view.runtime_id or "",
                                            **render.MANAGED_BY} if view.runtime_id and kyma.valid_runtime_id(view.runtime_id)
                                 else dict(render.MANAGED_BY)},
                    "spec": {"kymaName": name, "runtimeId": view.runtime_id or ""}}
            try:
                self.kcp.create(apitypes.RUNTIME_ENROLLMENTS, self.s.kcp_namespace, body)
            except gateway.Conflict:
                pass
            except gateway.GatewayError as e:
                log.warning("RuntimeEnrollment %s: create failed: %s", name, logs.bounded(e, 200))
                return
        try:
            self.kcp.patch(apitypes.RUNTIME_ENROLLMENTS, self.s.kcp_namespace, name, {"status": status}, subresource="status")
        except gateway.GatewayError as e:
            log.warning("RuntimeEnrollment %s: status not written: %s", name, logs.bounded(e, 200))
            return
        was = (mem.status or {}).get("conditions") or []
        was_ready = next((c for c in was if c["type"] == "Ready"), None)
        was_quarantined = previous.get("Quarantined", {}).get("status") == "True"
        mem.status = status
        mem.quarantined = quarantined
        self._events(obj, view, was_ready, ready, failure, result)
        if quarantined and not was_quarantined:
            self._event({"metadata": {"name": name, "uid": ""}}, "RuntimeEnrollment", "Quarantined",
                        quarantine["message"], warning=True)
        elif was_quarantined and not quarantined:
            log.info("runtime %s (Kyma %s) left quarantine: renewed from the current CA", view.runtime_id, name)
            logs.audit(self.audit, "runtime_quarantine_ended", runtime=view.runtime_id, kyma=name)
            self._event({"metadata": {"name": name, "uid": ""}}, "RuntimeEnrollment", "QuarantineEnded",
                        "renewed from the current CA")

    def _events(self, obj: Mapping[str, Any], view: kyma.KymaView, was: Mapping[str, Any] | None,
                ready: Mapping[str, Any], failure: Failure | None, result: Result | None) -> None:
        target = {"metadata": {"name": view.name, "namespace": self.s.kcp_namespace, "uid": ""}}
        if failure is not None:
            if was is None or was.get("reason") != failure.reason:
                self._event(target, "RuntimeEnrollment", "Failed", f"{failure.reason}: {failure.message}", warning=True)
            return
        assert result is not None
        if result.applied == "installed":
            self._event(target, "RuntimeEnrollment", "Enrolled", f"Tether installed in runtime {view.runtime_id}")
        elif result.applied == "repaired":
            self._event(target, "RuntimeEnrollment", "Repaired", "missing objects restored in the runtime")
        elif result.applied == "updated":
            self._event(target, "RuntimeEnrollment", "Updated", "the runtime's objects updated (a new image or "
                        "bundle, or an edited webhook configuration)")
        if result.renewed:
            self._event(target, "RuntimeEnrollment", "Renewed", f"certificates renewed: {', '.join(result.renewed)}")
        if ready.get("status") == "True" and (was is None or was.get("status") != "True"):
            self._event(target, "RuntimeEnrollment", "Ready", "the runtime is connected")

    def _event(self, obj: Mapping[str, Any], kind: str, reason: str, message: str, *, warning: bool = False,
               api_version: str = f"{apitypes.RUNTIME_ENROLLMENTS.group}/{apitypes.RUNTIME_ENROLLMENTS.version}") -> None:
        meta = obj["metadata"]
        self.events.emit(events.Ref(api_version, kind, self.s.kcp_namespace, meta["name"], meta.get("uid") or ""),
                         reason, message, warning=warning)


def _issuer(cert_pem: bytes | None, ca: castore.CA, known: str | None) -> str:
    """The serial of the CA that issued the certificate: the current or the previous one;
    "" for none; for another (a CA dropped since) what was known of it, else "foreign"."""
    if not cert_pem:
        return ""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError:
        return "foreign"
    if pki.issued_by(cert, [ca.current.cert]):
        return format(ca.current.cert.serial_number, "x")
    if ca.previous is not None and pki.issued_by(cert, [ca.previous]):
        return format(ca.previous.serial_number, "x")
    if known and known not in (format(ca.current.cert.serial_number, "x"), _serial(ca.previous)):
        return known
    return "foreign"


def _unreachable(e: gateway.GatewayError) -> str:
    """The failure reason of a runtime call that failed: the bound it broke (the runtime's
    API server trickled, answered too much, redirected, resolved inside), else Unreachable."""
    return e.reason if isinstance(e, gateway.Bounded) else "Unreachable"


def _key_matches(cert_pem: bytes, key_b64: str | None) -> bool:
    """Whether the Secret's key is the certificate's (never logged, only compared)."""
    if not key_b64:
        return False
    try:
        key = serialization.load_pem_private_key(base64.b64decode(key_b64), password=None)
        cert = x509.load_pem_x509_certificate(cert_pem)
    except (ValueError, TypeError):
        return False
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    return bool(key.public_key().public_bytes(*spki) == cert.public_key().public_bytes(*spki))


def _placeholder(runtime_id: str) -> render.Inputs:
    """Inputs enough to name the objects to delete (no certificate is needed for that)."""
    return render.Inputs(runtime_id=runtime_id, listener_url="", listener_ca=b"", client_cert=b"", client_key=b"",
                         client_serial="", serving_cert=b"", serving_key=b"", serving_serial="",
                         serving_not_after="", ca_bundle=b"")
