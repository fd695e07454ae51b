"""A mapping's Director runtime: the reconcile steps that find it, register or adopt it, and
let go of it (forget, release, unregister), mixed into ``reconcile.Reconciler``.

``decide`` chooses the step and ``adoption``/``claims`` judge whose a runtime is; this module
carries the steps out. What it decides: the tenant a step acts in (the mapping's, else the
Kyma CR's global account label; none is an ``InvalidInput``), where the lookup's hint and
holders come from, and that an adoption still stands when the step runs.

- ``lookup``: a teardown looks only for a runtime this instance registered for the Kyma CR
  (``adoption.own``); otherwise ``adoption.lookup`` with the run's labelled runtimes
  (``regindex``), the runtime ID the agent Secret names (``kyma-system``, then the legacy
  namespaces) or else compass-manager's mapping as a hint (``_hint``), and which other
  mapping holds an ID (``_held_by``: the run's ``claims.Holders``, the mappings read now
  outside a run, then compass-manager's). A refusal is counted in
  ``tether_compass_runtime_conflicts_total`` and kept in the facts for ``decide``;
- ``register``/``adopt``: the runtime ID is claimed for the mapping in ``claims.Holders``
  (an ID another Kyma CR of the run claimed since the lookup is refused, not adopted),
  Tether's labels are added to an adopted runtime of the Provisioner's, the mapping is
  labelled with the runtime ID and the tenant; an audit line and a ``Registered`` Event;
- ``forget_runtime``/``release``: the ID leaves the mapping (or the mapping is torn down)
  and its claim is dropped; a runtime not this Kyma CR's is ``Released`` (Warning Event,
  audit line, conflict counted), never unregistered;
- ``unregister``: the Director call, an audit line and an ``Unregistered`` Event.

Touches the Director (lookups, register, labels, unregister), the runtime's agent Secret
(read for the hint) and the KCP's mappings (labels, status, through the reconciler's
``_write``). The reconciler provides the writes, Events, audit lines and test hook.
"""

from __future__ import annotations

import abc
import datetime
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from compass import adoption, claims, decide, errors, model, regindex, status
from compass import director as director_mod
from compass import mappings as mappings_mod
from compass import metrics as metrics_mod
from tether.kube import apitypes, skr_clients

if TYPE_CHECKING:
    from compass import reconcile


class RegistrationSteps(abc.ABC):
    """The registration steps of ``reconcile.Reconciler`` (``_<kind>`` per action kind)."""

    # set by ``reconcile.Reconciler.__init__``
    t: reconcile.Tuning
    kcp: mappings_mod.Kcp
    director: director_mod.DirectorClient
    skr: skr_clients.SkrClients
    metrics: metrics_mod.Metrics
    plan: adoption.Plan | None
    registrations: regindex.RunIndex
    holders: claims.Holders
    known_runtime_id: Callable[[str], str | None] | None
    known_holder: Callable[[str, str], str | None] | None

    # the reconciler's writes, Events, audit lines and test hook
    @abc.abstractmethod
    def _write(
        self, m: model.MappingView, now: datetime.datetime, st: Mapping[str, Any]
    ) -> model.MappingView: ...

    @abc.abstractmethod
    def _event(
        self, f: decide.Facts, reason: str, message: str, *, warning: bool = False
    ) -> None: ...

    @abc.abstractmethod
    def _audit(self, event: str, f: decide.Facts, **fields: object) -> None: ...

    @abc.abstractmethod
    def _hook(self, kind: str) -> None: ...

    @abc.abstractmethod
    def _secret_name(self, kyma: str) -> str: ...

    def _tenant(self, f: decide.Facts) -> str:
        if f.mapping is not None and f.mapping.tenant:
            return f.mapping.tenant
        if f.kyma is not None and f.kyma.labels.get(apitypes.GLOBAL_ACCOUNT_LABEL):
            return f.kyma.labels[apitypes.GLOBAL_ACCOUNT_LABEL]
        raise errors.InvalidInput("no global account ID (Tenant) known for this runtime")

    def _lookup(self, a: decide.Action, f: decide.Facts) -> decide.Facts:
        name = decide.mapping_of(f).name
        ref = decide.kyma_ref(self.kcp.namespace, name)
        if f.kyma is None:  # teardown: only a runtime this instance registered
            found = adoption.own(self.director, self._tenant(f), self.t.policy.managed_by, ref)
        else:
            found = adoption.lookup(
                self.registrations,
                self._tenant(f),
                f.kyma,
                self.t.policy,
                ref,
                lambda: self._hint(name),
                lambda rid: self._held_by(rid, name),
            )
        self._hook(a.kind)
        if found.candidates > 1:
            self.metrics.adoptions.labels("ambiguous").inc()
        if found.refused:
            self.metrics.conflicts.labels(found.refused).inc()
            return f._replace(looked_up=True, candidates=0, refusal=(found.refused, found.why))
        if found.runtime_id is None:
            return f._replace(looked_up=True, candidates=found.candidates)
        return f._replace(
            looked_up=True,
            found_runtime_id=found.runtime_id,
            found_own=found.own,
            candidates=1,
            fetched=True,
            runtime_condition=found.condition,
        )

    def _hint(self, name: str) -> adoption.Hint:
        """The runtime ID the runtime's agent Secret names (its namespace, then where older
        runtimes keep it), else compass-manager's mapping: a hint, checked by the lookup."""
        namespaces = tuple(
            dict.fromkeys((self.t.secret_namespace, *self.t.legacy_secret_namespaces))
        )
        rid = adoption.secret_runtime_id(
            self.skr, name, namespaces, self._secret_name(name), self.t.skr_timeout
        )
        if rid:
            return adoption.Hint(rid, "the runtime's agent Secret")
        known = self.known_runtime_id(name) if self.known_runtime_id else None
        return adoption.Hint(known or "", "compass-manager's mapping")

    def _held_by(self, rid: str, name: str) -> str | None:
        """Another Kyma CR's mapping (Tether's, or compass-manager's when read) holding ``rid``."""
        if not self.holders.open:  # outside a run: read the mappings now
            other = next(
                (m.name for m in self.kcp.mappings() if m.runtime_id == rid and m.name != name),
                None,
            )
        else:
            other = self.holders.other(rid, name)
        if other is None and self.known_holder is not None:
            other = self.known_holder(rid, name)
        return other

    def _register(self, a: decide.Action, f: decide.Facts) -> decide.Facts:
        tenant = self._tenant(f)
        rt = self.director.register(tenant, decide.register_input(decide.kyma_of(f), self.t.policy))
        self.registrations.note(tenant, rt)
        self.holders.claim(rt.id, decide.mapping_of(f).name)  # a new ID: nobody else holds it
        self._hook(a.kind)
        self._audit("compass.runtime_registered", f, runtimeId=rt.id, tenant=tenant)
        return self._registered(f, tenant, rt.id, rt.condition, adopted=False)

    def _adopt(self, a: decide.Action, f: decide.Facts) -> decide.Facts:
        tenant, rid = self._tenant(f), str(a.runtime_id)
        if self.plan is None and self.holders.claim(rid, decide.mapping_of(f).name) is not None:
            # another Kyma CR of this run took it since the lookup: never two mappings
            self.metrics.conflicts.labels(claims.HELD_ELSEWHERE).inc()
            return f._replace(
                found_runtime_id=None,
                refusal=(
                    claims.HELD_ELSEWHERE,
                    (
                        f"Director runtime {rid} was taken by another Kyma CR's mapping "
                        "during this run: not adopted, none registered"
                    ),
                ),
            )
        added: list[str] = []
        if not f.found_own:  # Tether's labels added to the Provisioner's: none changed
            labels = decide.register_input(decide.kyma_of(f), self.t.policy)["labels"]
            added = adoption.add_labels(self.registrations, tenant, rid, labels)
            self.metrics.adoptions.labels("adopted").inc()
        self._audit(
            "compass.runtime_adopted", f, runtimeId=rid, tenant=tenant, labelsAdded=",".join(added)
        )
        return self._registered(f, tenant, rid, f.runtime_condition, adopted=True)

    def _registered(
        self, f: decide.Facts, tenant: str, rid: str, cond: str | None, *, adopted: bool
    ) -> decide.Facts:
        m = self.kcp.patch_meta(
            decide.mapping_of(f).name,
            labels={apitypes.COMPASS_RUNTIME_ID_LABEL: rid, apitypes.GLOBAL_ACCOUNT_LABEL: tenant},
        )
        m = m._replace(status=status.registered(m.status, f.now, rid, adopted))
        self._event(
            f._replace(mapping=m),
            "Registered",
            f"runtime {rid} found in the Director (registered earlier)"
            if adopted
            else f"runtime {rid} registered in the Director",
        )
        return f._replace(
            mapping=m, registered_now=not adopted, fetched=True, runtime_condition=cond
        )

    def _forget_runtime(self, a: decide.Action, f: decide.Facts) -> decide.Facts:
        m = self.kcp.patch_meta(
            decide.mapping_of(f).name,
            labels={apitypes.COMPASS_RUNTIME_ID_LABEL: None},
            annotations={model.REGISTERING: "true"},
        )
        m = self._write(m, f.now, status.forgotten(m.status, f.now, a.reason, a.message))
        self.holders.release(str(a.runtime_id), m.name)
        if a.reason == decide.FOREIGN:
            self._released(a, f._replace(mapping=m))
        return f._replace(
            mapping=m,
            fetched=False,
            runtime_condition=None,
            looked_up=False,
            found_runtime_id=None,
            secret="unknown",
            runtime_labels=None,
        )

    def _released(self, a: decide.Action, f: decide.Facts) -> None:
        self.metrics.conflicts.labels(claims.RELEASED).inc()
        self._audit(
            "compass.runtime_released",
            f,
            runtimeId=str(a.runtime_id),
            tenant=self._tenant(f),
            reason=a.reason,
        )
        self._event(f, "Released", a.message, warning=True)

    def _release(self, a: decide.Action, f: decide.Facts) -> decide.Facts:
        """Teardown of a mapping whose runtime is not this Kyma CR's: left registered."""
        self._released(a, f)
        self.holders.release(str(a.runtime_id), decide.mapping_of(f).name)
        return f._replace(unregistered=True)

    def _unregister(self, a: decide.Action, f: decide.Facts) -> decide.Facts:
        tenant, rid = self._tenant(f), str(a.runtime_id)
        existed = self.director.unregister(tenant, rid)
        self._hook(a.kind)
        self._audit(
            "compass.runtime_unregistered", f, runtimeId=rid, tenant=tenant, directorKnewIt=existed
        )
        self._event(
            f,
            "Unregistered",
            f"runtime {rid} unregistered from the Director"
            if existed
            else f"runtime {rid} was not known to the Director any more",
        )
        return f._replace(unregistered=True)
