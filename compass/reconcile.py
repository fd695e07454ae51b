"""One Kyma CR's reconcile: ask ``decide`` for the next action, do it, repeat.

The I/O of each action is a few lines here; the choice of action is ``decide.decide``.
A failed step is written to the mapping (condition reason and message, failures,
``nextAttemptAt`` from the per-runtime backoff) and ends the pass; the next run retries
when the backoff is due.
"""

from __future__ import annotations

import datetime
import logging
import random
from collections.abc import Callable
from typing import NamedTuple

from kubernetes.client.exceptions import ApiException

from common import logs, skr_clients
from compass import agent_secret, decide, errors, metrics, model, status
from compass import director as director_mod
from compass import mappings as mappings_mod

log = logging.getLogger(__name__)
MAX_STEPS = 16
FINAL = ("done", "wait", "skip")
_CONFIGURED_STEP = ("read_secret", "issue_token", "mark_connected")
_DEFERS_STATUS = ("register", "adopt")
_WRITES_STATUS = ("create_mapping", "report_invalid", "mark_registering", "forget_runtime",
                  "issue_token", "mark_connected", "mark_ready")


class Tuning(NamedTuple):
    """What the reconciler needs of the settings."""

    policy: decide.Policy
    secret_namespace: str = "kyma-system"
    secret_name: str = "compass-agent-configuration"  # may hold "{kyma}" (tests, benches)
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


class Reconciler:
    def __init__(self, tuning: Tuning, kcp: mappings_mod.Kcp, director: director_mod.DirectorClient,
                 skr: skr_clients.SkrClients, stats: metrics.Metrics, audit: logging.Logger, *,
                 clock: Callable[[], datetime.datetime] = _utcnow,
                 rng: random.Random | None = None) -> None:
        self.t = tuning
        self.kcp = kcp
        self.director = director
        self.skr = skr
        self.metrics = stats
        self.audit = audit
        self.clock = clock
        self.rng = rng or random.Random()
        # Test hook: called with the action kind right after its Director call, before
        # the result is written to the KCP (to inject a crash at that point).
        self.after_director_call: Callable[[str], None] | None = None

    def reconcile(self, kyma: model.Kyma | None, mapping: model.MappingView | None, *,
                  full: bool = False) -> decide.Facts:
        facts = decide.Facts(kyma=kyma, mapping=mapping, now=self.clock(), full=full)
        name = kyma.name if kyma is not None else mapping.name if mapping is not None else "?"
        olog = logs.ObjectLogger(log, {"kyma": f"{self.kcp.namespace}/{name}"})
        return self._steps(facts, olog)

    def _steps(self, facts: decide.Facts, olog: logging.LoggerAdapter[logging.Logger]) -> decide.Facts:
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
                pending = action.kind in _DEFERS_STATUS or (pending and action.kind not in _WRITES_STATUS)
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
                self._fail(facts, action, "Director" + type(e).__name__, str(e),
                           permanent=isinstance(e, errors.InvalidInput | errors.Unauthorized))
                return facts
            except (errors.RuntimeUnreachable, skr_clients.SkrClientError) as e:
                self.metrics.actions.labels(action.kind, "runtime_unreachable").inc()
                olog.info("%s failed: %s", action.kind, e)
                if facts.kyma is not None:
                    self.skr.forget(facts.kyma.name)
                self._fail(facts, action, "RuntimeUnreachable", str(e), permanent=False)
                return facts
            except ApiException as e:
                self.metrics.actions.labels(action.kind, "kcp_error").inc()
                if e.status == 409:
                    olog.info("%s: changed meanwhile; left for the next run", action.kind)
                else:
                    olog.warning("%s: KCP API error %s", action.kind, e.status)
                if pending:
                    self._flush(facts, olog)
                return facts
            self.metrics.actions.labels(action.kind, "ok").inc()
        olog.warning("no convergence within %d steps", MAX_STEPS)
        if pending:
            self._flush(facts, olog)
        return facts

    def _flush(self, f: decide.Facts, olog: logging.LoggerAdapter[logging.Logger]) -> None:
        if f.mapping is None:
            return
        try:
            self.kcp.patch_status(f.mapping.name, dict(f.mapping.status))
        except ApiException as e:
            olog.warning("writing the mapping status: KCP API error %s", e.status)

    # -- failure ------------------------------------------------------------------------------

    def _fail(self, f: decide.Facts, action: decide.Action, reason: str, message: str, *,
              permanent: bool) -> None:
        m = f.mapping
        if m is None:
            return
        failures = int(m.status.get("failures") or 0) + 1
        delay = status.backoff_delay(failures, self.t.backoff_base, self.t.backoff_cap, self.rng)
        ctype = status.CONFIGURED if action.kind in _CONFIGURED_STEP else status.REGISTERED
        st = status.failure(m.status, f.now, ctype=ctype, reason=reason,
                            message=f"{action.kind}: {message}", permanent=permanent, delay=delay)
        try:
            self.kcp.patch_status(m.name, st)
        except ApiException as e:
            log.warning("recording a failure on mapping %s: KCP API error %s", m.name, e.status)

    # -- actions -----------------------------------------------------------------------------

    def _tenant(self, f: decide.Facts) -> str:
        if f.mapping is not None and f.mapping.tenant:
            return f.mapping.tenant
        if f.kyma is not None and f.kyma.labels.get(model.GLOBAL_ACCOUNT):
            return f.kyma.labels[model.GLOBAL_ACCOUNT]
        raise errors.InvalidInput("no global account ID (Tenant) known for this runtime")

    def _hook(self, kind: str) -> None:
        if self.after_director_call is not None:
            self.after_director_call(kind)

    def _audit(self, event: str, f: decide.Facts, **fields: object) -> None:
        name = f.kyma.name if f.kyma else f.mapping.name if f.mapping else ""
        logs.audit(self.audit, event, kyma=f"{self.kcp.namespace}/{name}", **fields)

    def _secret_name(self, kyma: str) -> str:
        return self.t.secret_name.replace("{kyma}", kyma)

    def _act(self, a: decide.Action, f: decide.Facts) -> decide.Facts:  # noqa: C901 - a dispatch
        k, m, kind = f.kyma, f.mapping, a.kind
        if kind == "create_mapping":
            assert k is not None
            # A 409 (someone else created it since our list: another replica in a leader
            # hand-over) ends the pass; the next run starts from what is stored.
            m = self.kcp.create_mapping(k, registering=not a.reason)
            created = True
            if a.reason:
                m = self.kcp.patch_status(m.name, status.invalid(m.status, f.now, a.reason, a.message))
            return f._replace(mapping=m, created_now=created)
        assert m is not None
        if kind == "report_invalid":
            return f._replace(mapping=self.kcp.patch_status(
                m.name, status.invalid(m.status, f.now, a.reason, a.message)))
        if kind == "mark_registering":
            assert k is not None
            m = self.kcp.patch_meta(m.name, labels=dict(decide.mapping_labels(k)),
                                    annotations={model.REGISTERING: "true"})
            m = self.kcp.patch_status(m.name, status.processing(
                m.status, f.now, "Registering", "registering the runtime in the Director"))
            return f._replace(mapping=m)
        if kind == "lookup":
            assert k is not None or m is not None
            ref = decide.kyma_ref(self.kcp.namespace, m.name)
            rt = self.director.find_runtime(self._tenant(f), self.t.policy.managed_by, ref)
            self._hook(kind)
            if rt is None:
                return f._replace(looked_up=True)
            return f._replace(looked_up=True, found_runtime_id=rt.id, fetched=True,
                              runtime_condition=rt.condition)
        if kind in ("register", "adopt"):
            tenant = self._tenant(f)
            cond: str | None
            if kind == "register":
                assert k is not None
                rt = self.director.register(tenant, decide.register_input(k, self.t.policy))
                rid, cond = rt.id, rt.condition
                self._hook(kind)
                self._audit("compass.runtime_registered", f, runtimeId=rid, tenant=tenant)
            else:
                rid, cond = str(a.runtime_id), f.runtime_condition
                self._audit("compass.runtime_adopted", f, runtimeId=rid, tenant=tenant)
            m = self.kcp.patch_meta(m.name, labels={model.COMPASS_RUNTIME_ID: rid,
                                                    model.MAPPING_GLOBAL_ACCOUNT: tenant})
            m = m._replace(status=status.registered(m.status, f.now, rid, kind == "adopt"))
            return f._replace(mapping=m, registered_now=True, fetched=True, runtime_condition=cond)
        if kind == "forget_runtime":
            m = self.kcp.patch_meta(m.name, labels={model.COMPASS_RUNTIME_ID: None},
                                    annotations={model.REGISTERING: "true"})
            m = self.kcp.patch_status(m.name, status.forgotten(m.status, f.now, a.reason, a.message))
            return f._replace(mapping=m, fetched=False, runtime_condition=None, looked_up=False,
                              found_runtime_id=None, secret="unknown")
        if kind == "fetch_runtime":
            rt = self.director.get_runtime(self._tenant(f), str(a.runtime_id))
            return f._replace(fetched=True, runtime_condition=None if rt is None else rt.condition)
        if kind == "read_secret":
            assert k is not None
            api = self.skr.get(k.name)
            state = agent_secret.read_state(api, self.t.secret_namespace, self._secret_name(k.name),
                                            m.status.get("secretDigest"), self.t.skr_timeout)
            return f._replace(secret=state)
        if kind == "issue_token":
            assert k is not None
            tenant, rid = self._tenant(f), str(a.runtime_id)
            api = self.skr.get(k.name)  # before the token: no token wasted on a missing kubeconfig
            tok = self.director.request_token(tenant, rid)
            self._hook(kind)
            data = agent_secret.data_for(tok, rid, tenant)
            agent_secret.write(api, self.t.secret_namespace, self._secret_name(k.name), data,
                               self.t.skr_timeout, exists=f.secret in ("matches", "differs"))
            self._audit("compass.token_issued", f, runtimeId=rid, tenant=tenant,
                        reason=a.reason, expiresAt=tok.expires_at)
            m = self.kcp.patch_status(m.name, status.configured(
                m.status, f.now, token_expires_at=tok.expires_at, secret_digest=status.digest(data),
                reason=a.reason))
            return f._replace(mapping=m, secret="matches", registered_now=False)
        if kind == "mark_connected":
            return f._replace(mapping=self.kcp.patch_status(m.name, status.connected(m.status, f.now)))
        if kind == "mark_ready":
            return f._replace(mapping=self.kcp.patch_status(m.name, status.ready(m.status, f.now)))
        if kind == "unregister":
            tenant, rid = self._tenant(f), str(a.runtime_id)
            existed = self.director.unregister(tenant, rid)
            self._hook(kind)
            self._audit("compass.runtime_unregistered", f, runtimeId=rid, tenant=tenant,
                        directorKnewIt=existed)
            return f._replace(unregistered=True)
        if kind == "delete_mapping":
            return f._replace(mapping=self.kcp.delete_mapping(m.name))
        if kind == "remove_finalizer":
            self.kcp.remove_finalizer(m)
            return f._replace(mapping=None)
        raise AssertionError(f"unknown action {kind}")
