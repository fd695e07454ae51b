"""One Kyma CR's reconcile: ask ``decide`` for the next action, do it, repeat.

The I/O of each action is a few lines here; the choice of action is ``decide.decide``.
A failed step is written to the mapping (condition reason and message, failures,
``nextAttemptAt`` from the per-runtime backoff) and ends the pass; the next run retries
when the backoff is due.

Events on the mapping for what an operator wants to see (``tether.kube.events``): ``Registered``,
``Unregistered``, ``TokenDelivered``, ``TokenRefreshed``, and a Warning ``Failing`` once a
runtime's step has failed ``FAILING_AFTER`` times in a row (retried with backoff in between);
Warnings ``ForeignRuntime`` (a lookup refused a runtime another Kyma CR holds, or whose labels
name another Kyma CR) and ``Released`` (a runtime not this Kyma CR's dropped from its mapping
or left registered at teardown), each counted in ``tether_compass_runtime_conflicts_total``.

The steps that bind a mapping to a Director runtime and let it go (``lookup``, ``register``,
``adopt``, ``forget_runtime``, ``release``, ``unregister``) are ``registration``'s, which
``Reconciler`` inherits; the loop, the failures and the other steps are here.
"""

from __future__ import annotations

import datetime
import logging
import random
import typing
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from compass import (
    adoption,
    agent_secret,
    claims,
    decide,
    errors,
    metrics,
    model,
    regindex,
    registration,
    status,
)
from compass import director as director_mod
from compass import mappings as mappings_mod
from tether.base import logs
from tether.kube import apitypes, events, gateway, skr_clients

log = logging.getLogger(__name__)
MAX_STEPS = 16
FAILING_AFTER = 3  # consecutive failures of a runtime before its Warning Event
_FIRST_TOKEN = ("Registered", "NotConfigured")  # issue_token reasons of a first delivery
FINAL = ("done", "wait", "skip")
_CONFIGURED_STEP = ("read_secret", "issue_token", "mark_connected")
_DEFERS_STATUS = ("register", "adopt")
_ACTION_KINDS = frozenset(typing.get_args(decide.ActionKind))  # each done by ``_<kind>``
_WRITES_STATUS = (
    "create_mapping",
    "report_invalid",
    "mark_registering",
    "forget_runtime",
    "issue_token",
    "mark_connected",
    "mark_ready",
)


class Tuning(NamedTuple):
    """What the reconciler needs of the settings."""

    policy: decide.Policy
    secret_namespace: str = "kyma-system"
    secret_name: str = "compass-agent-configuration"  # may hold "{kyma}" (tests, benches)
    # where older runtimes keep the agent Secret, read (after secret_namespace) for hints
    legacy_secret_namespaces: tuple[str, ...] = ("compass-system",)
    skr_timeout: float = 10.0
    backoff_base: float = 5.0
    backoff_cap: float = 300.0


def _reports_outage(m: model.MappingView | None) -> bool:
    if m is None:
        return False
    reasons = {c.get("reason") for c in m.status.get("conditions") or [] if isinstance(c, dict)}
    return bool(reasons & {"DirectorUnavailable", "DirectorCircuitOpen"})


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class Reconciler(registration.RegistrationSteps):
    def __init__(
        self,
        tuning: Tuning,
        kcp: mappings_mod.Kcp,
        director: director_mod.DirectorClient,
        skr: skr_clients.SkrClients,
        stats: metrics.Metrics,
        audit: logging.Logger,
        *,
        clock: Callable[[], datetime.datetime] = _utcnow,
        rng: random.Random | None = None,
        recorder: events.Recorder | None = None,
    ) -> None:
        self.t = tuning
        self.kcp = kcp
        self.director = director
        self.skr = skr
        self.metrics = stats
        self.audit = audit
        self.clock = clock
        self.rng = rng or random.Random()
        self.events = recorder
        # dry-run: every change is recorded here instead (``adoption.Plan``)
        self.plan = adoption.Plan() if tuning.policy.mode == "dry-run" else None
        self.registrations = regindex.RunIndex(director)  # the run's labelled runtimes
        self.holders = claims.Holders()  # which mapping holds which runtime ID (the run's)
        # another source of a Kyma CR's runtime ID (compass.legacy), asked when its agent
        # Secret names none; checked in the Director like the Secret's
        self.known_runtime_id: Callable[[str], str | None] | None = None
        # (runtime ID, Kyma CR name) -> another Kyma CR that source records for the ID
        self.known_holder: Callable[[str, str], str | None] | None = None
        # Test hook: called with the action kind right after its Director call, before
        # the result is written to the KCP (to inject a crash at that point).
        self.after_director_call: Callable[[str], None] | None = None

    def reconcile(
        self, kyma: model.Kyma | None, mapping: model.MappingView | None, *, full: bool = False
    ) -> decide.Facts:
        facts = decide.Facts(kyma=kyma, mapping=mapping, now=self.clock(), full=full)
        name = kyma.name if kyma is not None else mapping.name if mapping is not None else "?"
        olog = logs.ObjectLogger(log, {"kyma": f"{self.kcp.namespace}/{name}"})
        return self._steps(facts, olog)

    def _steps(
        self, facts: decide.Facts, olog: logging.LoggerAdapter[logging.Logger]
    ) -> decide.Facts:
        # The status after register/adopt is kept in ``facts.mapping`` and written with
        # the next status write of the pass (or at its end): one request less per runtime.
        pending = False
        for _ in range(MAX_STEPS):
            action = decide.decide(facts, self.t.policy)
            if action.kind in FINAL:
                if action.kind == "skip":
                    self.metrics.actions.labels("skip", action.reason or "ok").inc()
                if pending:
                    self._flush(facts, olog)
                return facts
            try:
                facts = self._act(action, facts)
                pending = action.kind in _DEFERS_STATUS or (
                    pending and action.kind not in _WRITES_STATUS
                )
            except errors.DirectorError as e:
                self.metrics.actions.labels(action.kind, e.kind).inc()
                olog.info("%s failed: %s", action.kind, e)
                if isinstance(e, errors.CircuitOpen) and _reports_outage(facts.mapping):
                    # No request was made and the outage is already on the mapping: no
                    # write, no backoff growth; retried at the next run, so recovery
                    # follows the breaker rather than each runtime's backoff.
                    if pending:
                        self._flush(facts, olog)
                    return facts
                self._fail(
                    facts,
                    action,
                    "Director" + type(e).__name__,
                    str(e),
                    permanent=isinstance(e, errors.InvalidInput | errors.Unauthorized),
                )
                return facts
            except errors.NotLeading as e:  # nothing written: the Lease holder takes over
                olog.info("%s: %s", action.kind, e)
                return facts
            except skr_clients.KubeconfigRefused as e:  # kept until its Secret changes
                self.metrics.actions.labels(action.kind, "kubeconfig_refused").inc()
                olog.warning("%s refused: %s", action.kind, e)
                self._fail(facts, action, "KubeconfigRefused", str(e), permanent=False)
                return facts
            except (errors.RuntimeUnreachable, skr_clients.SkrClientError) as e:
                self.metrics.actions.labels(action.kind, "runtime_unreachable").inc()
                olog.info("%s failed: %s", action.kind, e)
                if facts.kyma is not None:
                    self.skr.forget(facts.kyma.name)
                self._fail(facts, action, "RuntimeUnreachable", str(e), permanent=False)
                return facts
            except gateway.GatewayError as e:
                self.metrics.actions.labels(action.kind, "kcp_error").inc()
                if isinstance(e, gateway.Conflict):
                    olog.info("%s: changed meanwhile; left for the next run", action.kind)
                else:
                    olog.warning("%s: KCP API error: %s", action.kind, e)
                if pending:
                    self._flush(facts, olog)
                return facts
            self.metrics.actions.labels(action.kind, "ok").inc()
        olog.warning("no convergence within %d steps", MAX_STEPS)
        if pending:
            self._flush(facts, olog)
        return facts

    def _write(
        self, m: model.MappingView, now: datetime.datetime, st: Mapping[str, Any]
    ) -> model.MappingView:
        """Every status write: with the Ready condition and the generations (``status.finish``)."""
        return self.kcp.patch_status(m.name, status.finish(st, m.generation, now))

    def _event(self, f: decide.Facts, reason: str, message: str, *, warning: bool = False) -> None:
        m = f.mapping
        name = m.name if m is not None else f.kyma.name if f.kyma is not None else ""
        if self.events is None or not name:
            return
        ref = events.Ref(
            f"{apitypes.COMPASS_MAPPINGS.group}/{apitypes.COMPASS_MAPPINGS.version}",
            apitypes.COMPASS_MAPPING_KIND,
            self.kcp.namespace,
            name,
            m.uid if m is not None else "",
        )
        self.events.emit(ref, reason, message, warning=warning)

    def _flush(self, f: decide.Facts, olog: logging.LoggerAdapter[logging.Logger]) -> None:
        if f.mapping is None:
            return
        try:
            self._write(f.mapping, f.now, f.mapping.status)
        except gateway.GatewayError as e:
            olog.warning("writing the mapping status: KCP API error: %s", e)

    # -- failure ------------------------------------------------------------------------------

    def _fail(
        self, f: decide.Facts, action: decide.Action, reason: str, message: str, *, permanent: bool
    ) -> None:
        m = f.mapping
        if self.plan is not None:  # dry-run: the failure is reported, not written
            self.plan.add(_name(f), action.kind, "failed: " + reason, action.runtime_id)
            return
        if m is None:
            return
        failures = int(m.status.get("failures") or 0) + 1
        delay = status.backoff_delay(failures, self.t.backoff_base, self.t.backoff_cap, self.rng)
        ctype = status.CONFIGURED if action.kind in _CONFIGURED_STEP else status.REGISTERED
        st = status.failure(
            m.status,
            f.now,
            ctype=ctype,
            reason=reason,
            message=f"{action.kind}: {message}",
            permanent=permanent,
            delay=delay,
        )
        try:
            self._write(m, f.now, st)
        except gateway.GatewayError as e:
            log.warning("recording a failure on mapping %s: KCP API error: %s", m.name, e)
            return
        if failures == FAILING_AFTER:
            self._event(
                f,
                "Failing",
                f"{action.kind} failed {failures} times in a row, retried with "
                f"backoff: {reason}: {message}",
                warning=True,
            )

    # -- actions -----------------------------------------------------------------------------

    def _hook(self, kind: str) -> None:
        if self.after_director_call is not None:
            self.after_director_call(kind)

    def _audit(self, event: str, f: decide.Facts, **fields: object) -> None:
        name = f.kyma.name if f.kyma else f.mapping.name if f.mapping else ""
        logs.audit(self.audit, event, kyma=f"{self.kcp.namespace}/{name}", **fields)

    def _secret_name(self, kyma: str) -> str:
        return self.t.secret_name.replace("{kyma}", kyma)

    def _act(self, a: decide.Action, f: decide.Facts) -> decide.Facts:
        """Carry out one action of ``decide``: one method ``_<kind>`` per action kind."""
        if a.kind not in _ACTION_KINDS or a.kind in FINAL:
            raise AssertionError(f"unknown action {a.kind}")
        act: Callable[[decide.Action, decide.Facts], decide.Facts] = getattr(self, "_" + a.kind)
        if self.plan is not None and a.kind not in adoption.READS:
            self.plan.add(_name(f), a.kind, a.reason, a.runtime_id)
            if a.kind not in adoption.SIMULATED:
                return f._replace(halted=True)
            return adoption.simulate(a, f, self.kcp.namespace, self._tenant(f))
        return act(a, f)

    def _create_mapping(self, a: decide.Action, f: decide.Facts) -> decide.Facts:
        # A 409 (someone else created it since our list: another replica in a leader
        # hand-over) ends the pass; the next run starts from what is stored.
        m = self.kcp.create_mapping(decide.kyma_of(f), registering=not a.reason)
        if a.reason:
            m = self._write(m, f.now, status.invalid(m.status, f.now, a.reason, a.message))
        return f._replace(mapping=m, created_now=True)

    def _report_invalid(self, a: decide.Action, f: decide.Facts) -> decide.Facts:
        m = decide.mapping_of(f)
        m = self._write(m, f.now, status.invalid(m.status, f.now, a.reason, a.message))
        if a.reason in ("AmbiguousRegistration", decide.FOREIGN):
            self._event(f._replace(mapping=m), a.reason, a.message, warning=True)
        return f._replace(mapping=m)

    def _mark_registering(self, a: decide.Action, f: decide.Facts) -> decide.Facts:
        m = self.kcp.patch_meta(
            decide.mapping_of(f).name,
            labels=dict(decide.mapping_labels(decide.kyma_of(f))),
            annotations={model.REGISTERING: "true"},
        )
        m = self._write(
            m,
            f.now,
            status.processing(
                m.status, f.now, "Registering", "registering the runtime in the Director"
            ),
        )
        return f._replace(mapping=m)

    def _fetch_runtime(self, a: decide.Action, f: decide.Facts) -> decide.Facts:
        rt = self.director.get_runtime(self._tenant(f), str(a.runtime_id))
        return f._replace(
            fetched=True,
            runtime_condition=None if rt is None else rt.condition,
            runtime_labels={} if rt is None else rt.labels,
        )

    def _read_secret(self, a: decide.Action, f: decide.Facts) -> decide.Facts:
        k, digest = decide.kyma_of(f), decide.mapping_of(f).status.get("secretDigest")
        api = self.skr.get(k.name)
        state, held = agent_secret.read(
            api, self.t.secret_namespace, self._secret_name(k.name), digest, self.t.skr_timeout
        )
        if digest or held is None or not held.complete or held.runtime_id != a.runtime_id:
            return f._replace(secret=state, found_secret=held)
        used = agent_secret.cert_present(api, self.t.secret_namespace, self.t.skr_timeout)
        return f._replace(secret=state, found_secret=held._replace(agent_cert=used))

    def _keep_secret(self, a: decide.Action, f: decide.Facts) -> decide.Facts:
        m, held = decide.mapping_of(f), f.found_secret
        assert held is not None and held.written_at is not None, "decide keeps a Secret it read"
        expires = held.written_at + datetime.timedelta(seconds=self.t.policy.token_lifetime)
        self.metrics.adoptions.labels("secret_kept").inc()
        m = self._write(
            m, f.now, status.kept(m.status, f.now, model.format_time(expires), held.digest)
        )
        self._event(
            f._replace(mapping=m),
            "SecretKept",
            f"the runtime's agent Secret for runtime {a.runtime_id} works; kept as it is",
        )
        return f._replace(mapping=m, secret="matches")

    def _report_pending(self, a: decide.Action, f: decide.Facts) -> decide.Facts:
        m = decide.mapping_of(f)
        self.metrics.adoptions.labels("registration_off").inc()
        m = self._write(m, f.now, status.processing(m.status, f.now, a.reason, a.message))
        self._event(f._replace(mapping=m), a.reason, a.message)
        return f._replace(mapping=m)

    def _issue_token(self, a: decide.Action, f: decide.Facts) -> decide.Facts:
        k, m = decide.kyma_of(f), decide.mapping_of(f)
        tenant, rid = self._tenant(f), str(a.runtime_id)
        api = self.skr.get(k.name)  # before the token: no token wasted on a missing kubeconfig
        tok = self.director.request_token(tenant, rid)
        self._hook(a.kind)
        data = agent_secret.data_for(tok, rid, tenant)
        agent_secret.write(
            api,
            self.t.secret_namespace,
            self._secret_name(k.name),
            data,
            self.t.skr_timeout,
            exists=f.secret in ("matches", "differs"),
        )
        self._audit(
            "compass.token_issued",
            f,
            runtimeId=rid,
            tenant=tenant,
            reason=a.reason,
            expiresAt=tok.expires_at,
        )
        if f.found_secret is not None and not m.status.get("secretDigest"):
            self.metrics.adoptions.labels("secret_reissued").inc()
        m = self._write(
            m,
            f.now,
            status.configured(
                m.status,
                f.now,
                token_expires_at=tok.expires_at,
                secret_digest=status.digest(data),
                reason=a.reason,
            ),
        )
        where = f"{self.t.secret_namespace}/{self._secret_name(k.name)}"
        if a.reason in _FIRST_TOKEN:
            self._event(
                f._replace(mapping=m),
                "TokenDelivered",
                f"one-time token for runtime {rid} delivered to {where} in the runtime",
            )
        else:
            self._event(
                f._replace(mapping=m),
                "TokenRefreshed",
                f"a new one-time token for runtime {rid} delivered to {where} ({a.reason})",
            )
        return f._replace(mapping=m, secret="matches", registered_now=False)

    def _mark_connected(self, a: decide.Action, f: decide.Facts) -> decide.Facts:
        m = decide.mapping_of(f)
        return f._replace(mapping=self._write(m, f.now, status.connected(m.status, f.now)))

    def _mark_ready(self, a: decide.Action, f: decide.Facts) -> decide.Facts:
        m = decide.mapping_of(f)
        return f._replace(mapping=self._write(m, f.now, status.ready(m.status, f.now)))

    def _delete_mapping(self, a: decide.Action, f: decide.Facts) -> decide.Facts:
        return f._replace(mapping=self.kcp.delete_mapping(decide.mapping_of(f).name))

    def _remove_finalizer(self, a: decide.Action, f: decide.Facts) -> decide.Facts:
        self.kcp.remove_finalizer(decide.mapping_of(f))
        return f._replace(mapping=None)


def _name(f: decide.Facts) -> str:
    return f.kyma.name if f.kyma else f.mapping.name if f.mapping else ""
