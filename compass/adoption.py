"""Finding an existing registration before registering, and the dry-run plan.

Lookup, for a Kyma CR whose mapping has no runtime ID (one runtime read; the Director's
labelled runtimes are read once per tenant and run, ``regindex``):

1. the tenant's Director runtimes labelled ``gardenerClusterName`` = the shoot's name (the
   Provisioner, compass-manager and Tether all write it); one this instance registered for
   this Kyma CR (``director_connection_managed_by`` and ``tether_kyma``) is its own;
2. else the runtime's ``compass-agent-configuration`` Secret: its RUNTIME_ID, checked against
   the Director (the runtime exists in this tenant), is the registration the agent uses;
3. else the labelled runtimes not claimed by another Kyma CR of Tether: one is adopted,
   several are reported (``AmbiguousRegistration``), never guessed between.

Dry-run (``TETHER_COMPASS_MODE=dry-run``): the reads are done, every change is recorded in a
``Plan`` instead; the mapping's creation and an adoption are simulated in memory so that
the plan goes on to say what would happen to the Secret; anything else ends the pass.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any, NamedTuple

from compass import agent_secret, decide, errors, model, queries, regindex, status
from compass import director as director_mod
from tether import apitypes, gateway, skr_clients

log = logging.getLogger(__name__)
READS = frozenset({"lookup", "read_secret", "fetch_runtime"})
SIMULATED = frozenset({"create_mapping", "mark_registering", "adopt"})


class Found(NamedTuple):
    runtime_id: str | None
    own: bool
    candidates: int
    condition: str | None = None


def classify(found: Sequence[queries.Runtime], managed_by: str, ref: str,
             secret_runtime: queries.Runtime | None) -> Found:
    """Pure: which registration the lookup found (see the module's docstring)."""
    own = [r for r in found if r.labels.get(model.MANAGED_BY) == managed_by
           and r.labels.get(model.KYMA_REF) == ref]
    if own:
        return Found(own[0].id, True, 1, own[0].condition)
    if secret_runtime is not None:
        return Found(secret_runtime.id, False, 1, secret_runtime.condition)
    free = [r for r in found if not r.labels.get(model.KYMA_REF)]
    if len(free) == 1:
        return Found(free[0].id, False, 1, free[0].condition)
    return Found(None, False, len(free))


def secret_runtime_id(skr: skr_clients.SkrClients, kyma: str, namespace: str, name: str,
                      timeout: float) -> str:
    """The RUNTIME_ID of the runtime's agent Secret; "" when there is none, or the runtime
    cannot be read (its registration is then looked for by label only)."""
    try:
        _, held = agent_secret.read(skr.get(kyma), namespace, name, None, timeout)
    except (skr_clients.SkrClientError, errors.RuntimeUnreachable, gateway.GatewayError) as e:
        log.info("looking for an agent Secret in %s: %s", kyma, type(e).__name__)
        return ""
    return held.runtime_id if held is not None else ""


def own(director: director_mod.DirectorClient, tenant: str, managed_by: str, ref: str) -> Found:
    """Teardown: only a runtime this instance registered for this Kyma CR."""
    rt = director.find_runtime(tenant, managed_by, ref)
    return Found(rt.id if rt else None, True, int(rt is not None), rt.condition if rt else None)


def lookup(index: regindex.RunIndex, tenant: str, kyma: model.Kyma,
           policy: decide.Policy, ref: str, read_secret_id: Any) -> Found:
    director = index.director
    shoot = kyma.labels.get(apitypes.SHOOT_NAME_LABEL, "")
    found = index.find(tenant, shoot) if shoot else []
    if any(r.labels.get(model.MANAGED_BY) == policy.managed_by
           and r.labels.get(model.KYMA_REF) == ref for r in found):
        return classify(found, policy.managed_by, ref, None)
    rid = read_secret_id()
    by_secret = next((r for r in found if r.id == rid), None) if rid else None
    if rid and by_secret is None:
        by_secret = director.get_runtime(tenant, rid)  # None: not in this tenant
    return classify(found, policy.managed_by, ref, by_secret)


def add_labels(index: regindex.RunIndex, tenant: str, runtime_id: str,
               wanted: dict[str, Any]) -> list[str]:
    """Tether's labels the adopted runtime lacks, set; none changed, none removed."""
    rt = index.director.get_runtime(tenant, runtime_id)
    have = rt.labels if rt is not None else {}
    added = [k for k in sorted(wanted) if k not in have]
    for key in added:
        index.director.set_label(tenant, runtime_id, key, wanted[key])
    if rt is not None:  # a later lookup of this run sees it claimed
        index.note(tenant, rt._replace(labels={**have, **{k: wanted[k] for k in added}}))
    return added


# -- dry-run -------------------------------------------------------------------------------


class Entry(NamedTuple):
    kyma: str
    action: str
    reason: str
    runtime_id: str | None


class Plan:
    """What a dry-run would have done, collected over one run (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[Entry] = []

    def add(self, kyma: str, action: str, reason: str = "", runtime_id: str | None = None) -> None:
        with self._lock:
            self._entries.append(Entry(kyma, action, reason, runtime_id))

    def take(self) -> list[Entry]:
        with self._lock:
            out, self._entries = self._entries, []
        return out


def counts(entries: Sequence[Entry]) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in entries:
        out[e.action] = out.get(e.action, 0) + 1
    return out


def simulate(a: decide.Action, f: decide.Facts, namespace: str, tenant: str) -> decide.Facts:
    """The in-memory effect of a ``SIMULATED`` action (no request)."""
    k = f.kyma
    assert k is not None, "simulated actions need the Kyma CR"
    if a.kind == "create_mapping":
        if a.reason:  # the Kyma CR is invalid: reported, nothing more to plan
            return f._replace(halted=True)
        new = model.MappingView(namespace, k.name, decide.mapping_labels(k),
                                {model.REGISTERING: "true"}, (model.FINALIZER,), False, {})
        return f._replace(mapping=new, created_now=True)
    m = f.mapping
    assert m is not None, "simulated actions after create_mapping need the mapping"
    if a.kind == "mark_registering":
        return f._replace(mapping=m._replace(annotations={**m.annotations,
                                                           model.REGISTERING: "true"}))
    rid = str(a.runtime_id)
    labels = {**m.labels, apitypes.COMPASS_RUNTIME_ID_LABEL: rid,
              apitypes.GLOBAL_ACCOUNT_LABEL: tenant}
    return f._replace(mapping=m._replace(labels=labels, status=status.registered(
        m.status, f.now, rid, True)), registered_now=False)
