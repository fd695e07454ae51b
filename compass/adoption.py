"""Finding an existing registration before registering, and the dry-run plan.

Lookup, for a Kyma CR whose mapping has no runtime ID (one runtime read; the Director's
labelled runtimes are read once per tenant and run, ``regindex``):

1. the tenant's Director runtimes labelled ``gardenerClusterName`` = the shoot's name (the
   Provisioner, compass-manager and Tether all write it); one this instance registered for
   this Kyma CR (``director_connection_managed_by`` and ``tether_kyma``) is its own; a Kyma
   CR without a shoot name (bring-your-own) is looked up by those two labels only;
2. else a *hint*: the RUNTIME_ID of the runtime's ``compass-agent-configuration`` Secret
   (``kyma-system``, then where older runtimes keep it, ``compass-system``), or a runtime ID
   from compass-manager's mappings. A hint is never proof (the tenant writes that Secret):
   the runtime it names is adopted only when it exists in this tenant, no other mapping
   holds it and its labels name this Kyma CR (``claims.mismatch``); when it exists but
   fails either check the lookup is *refused* (``Found.refused``: reported on the mapping,
   counted, alerted; nothing adopted, nothing registered);
3. else the labelled runtimes that name this Kyma CR and no other mapping holds: one is
   adopted, several are reported (``AmbiguousRegistration``), never guessed between.

Dry-run (``TETHER_COMPASS_MODE=dry-run``): the reads are done, every change is recorded in a
``Plan`` instead; the mapping's creation and an adoption are simulated in memory so that
the plan goes on to say what would happen to the Secret; anything else ends the pass.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from compass import agent_secret, claims, decide, errors, model, queries, regindex, status
from compass import director as director_mod
from tether.kube import apitypes, gateway, skr_clients

log = logging.getLogger(__name__)
READS = frozenset({"lookup", "read_secret", "fetch_runtime"})
SIMULATED = frozenset({"create_mapping", "mark_registering", "adopt"})


class Found(NamedTuple):
    runtime_id: str | None
    own: bool
    candidates: int
    condition: str | None = None
    refused: str = ""  # a claims reason: the hinted (or own) runtime is not this Kyma CR's
    why: str = ""  # the condition message saying so


def _refuse(rid: str, reason: str, message: str) -> Found:
    return Found(None, False, 0, None, reason, message[:900])


def classify(
    found: Sequence[queries.Runtime],
    who: claims.Identity,
    managed_by: str,
    hinted: queries.Runtime | None,
    held: Mapping[str, str],
    source: str = "the runtime's agent Secret",
) -> Found:
    """Pure: which registration the lookup found (see the module's docstring). ``hinted``:
    the runtime a hint (``source``) names, as the Director knows it in this tenant;
    ``held``: runtime ID -> another mapping holding it."""
    own = [
        r
        for r in found
        if r.labels.get(model.MANAGED_BY) == managed_by and r.labels.get(model.KYMA_REF) == who.ref
    ]
    if own:
        if own[0].id in held:
            return _refuse(
                own[0].id,
                claims.HELD_ELSEWHERE,
                f"Director runtime {own[0].id}, "
                "registered for this Kyma CR, is held by another Kyma CR's mapping; "
                "not adopted until that mapping releases it",
            )
        return Found(own[0].id, True, 1, own[0].condition)
    if hinted is not None:
        if hinted.id in held:
            return _refuse(
                hinted.id,
                claims.HELD_ELSEWHERE,
                f"{source} names Director runtime "
                f"{hinted.id}, which another Kyma CR's mapping holds: not adopted, "
                "none registered (fix or remove it in the runtime)",
            )
        why = claims.mismatch(hinted.labels, who)
        if why:
            return _refuse(
                hinted.id,
                claims.LABELS_MISMATCH,
                f"{source} names Director runtime "
                f"{hinted.id}, but {why}: not adopted, none registered (fix or remove "
                "it in the runtime)",
            )
        return Found(hinted.id, False, 1, hinted.condition)
    free = [r for r in found if r.id not in held and not claims.mismatch(r.labels, who)]
    if len(free) == 1:
        return Found(free[0].id, False, 1, free[0].condition)
    return Found(None, False, len(free))


def secret_runtime_id(
    skr: skr_clients.SkrClients, kyma: str, namespaces: Sequence[str], name: str, timeout: float
) -> str:
    """The RUNTIME_ID of the runtime's agent Secret, from the first of ``namespaces`` that
    holds one; "" when there is none, or the runtime cannot be read (its registration is
    then looked for by label only). Only a hint: see ``classify``."""
    try:
        api = skr.get(kyma)
        for namespace in namespaces:
            _, held = agent_secret.read(api, namespace, name, None, timeout)
            if held is not None and held.runtime_id:
                return held.runtime_id
    except (skr_clients.SkrClientError, errors.RuntimeUnreachable, gateway.GatewayError) as e:
        log.info("looking for an agent Secret in %s: %s", kyma, type(e).__name__)
    return ""


def own(director: director_mod.DirectorClient, tenant: str, managed_by: str, ref: str) -> Found:
    """Teardown: only a runtime this instance registered for this Kyma CR."""
    rt = director.find_runtime(tenant, managed_by, ref)
    return Found(rt.id if rt else None, True, int(rt is not None), rt.condition if rt else None)


class Hint(NamedTuple):
    runtime_id: str
    source: str  # where it came from, for the condition message


def lookup(
    index: regindex.RunIndex,
    tenant: str,
    kyma: model.Kyma,
    policy: decide.Policy,
    ref: str,
    read_hint: Callable[[], Hint],
    held_by: Callable[[str], str | None],
) -> Found:
    """``read_hint``: the runtime ID a hint names ("" for none), asked only when no own
    registration is found; ``held_by``: another mapping holding a runtime ID."""
    director = index.director
    who = claims.identity(kyma, ref)
    if who.shoot:
        found = index.find(tenant, who.shoot)
    else:  # a bring-your-own cluster: found again by its own labels, one query
        mine = director.find_runtime(tenant, policy.managed_by, ref)
        found = [mine] if mine is not None else []
    hint = Hint("", "")
    if not any(
        r.labels.get(model.MANAGED_BY) == policy.managed_by and r.labels.get(model.KYMA_REF) == ref
        for r in found
    ):
        hint = read_hint()
    rid = hint.runtime_id
    if rid and not queries.valid_runtime_id(rid):
        log.info("%s of %s names no valid runtime ID; ignored", hint.source, ref)
        rid = ""
    by_hint = next((r for r in found if r.id == rid), None) if rid else None
    if rid and by_hint is None:
        by_hint = director.get_runtime(tenant, rid)  # None: not in this tenant
    ids = {r.id for r in found} | ({by_hint.id} if by_hint else set())
    held = {i: h for i in ids if (h := held_by(i)) is not None}
    return classify(found, who, policy.managed_by, by_hint, held, hint.source)


def add_labels(
    index: regindex.RunIndex, tenant: str, runtime_id: str, wanted: dict[str, Any]
) -> list[str]:
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
        new = model.MappingView(
            namespace,
            k.name,
            decide.mapping_labels(k),
            {model.REGISTERING: "true"},
            (model.FINALIZER,),
            False,
            {},
        )
        return f._replace(mapping=new, created_now=True)
    m = f.mapping
    assert m is not None, "simulated actions after create_mapping need the mapping"
    if a.kind == "mark_registering":
        return f._replace(
            mapping=m._replace(annotations={**m.annotations, model.REGISTERING: "true"})
        )
    rid = str(a.runtime_id)
    labels = {
        **m.labels,
        apitypes.COMPASS_RUNTIME_ID_LABEL: rid,
        apitypes.GLOBAL_ACCOUNT_LABEL: tenant,
    }
    return f._replace(
        mapping=m._replace(labels=labels, status=status.registered(m.status, f.now, rid, True)),
        registered_now=False,
    )
