"""The reconcile decision for one Kyma CR: a pure function of plain data.

``decide(facts, policy)`` answers the one next action given what is known so far: the
Kyma CR, its mapping, and what this pass has learnt from the Director and the runtime.
The reconciler does the action, adds what it learnt to the facts and asks again, until
``done`` (or ``wait`` while a runtime backs off). Nothing here does I/O.

Idempotency and adoption: the mapping is created (with the ``registering`` annotation and
a finalizer) before the first ``registerRuntime``, and every pass without a runtime ID
first looks for an existing registration (the runtime's agent Secret and its RUNTIME_ID,
else the Director's runtimes labelled with the shoot's name, as the Provisioner and
compass-manager write them): one found is adopted, two are reported and never guessed
between, none is registered (not with ``registration-off``). An adopted runtime's agent
Secret is kept byte-for-byte while it works (``secret_verdict``).

Across tenants (issue 38, ``compass.claims``): a lookup the reconciler refused (the hint
names a runtime another mapping holds, or whose labels name another Kyma CR) is reported
as ``ForeignRuntime`` and nothing is adopted or registered; a registered runtime the
Director shows with another Kyma CR's ``tether_kyma`` is dropped from the mapping
(``forget_runtime``, never unregistered); teardown reads the runtime first and unregisters
it only when its ``tether_kyma`` names this Kyma CR, else ``release``s it.
"""

from __future__ import annotations

import datetime
import hashlib
import re
from collections.abc import Mapping
from typing import Any, Literal, NamedTuple

from compass import claims, model
from tether.kube import apitypes

SecretState = Literal["unknown", "missing", "matches", "differs"]
ActionKind = Literal[
    "done",
    "wait",
    "skip",
    "create_mapping",
    "report_invalid",
    "mark_registering",
    "lookup",
    "adopt",
    "register",
    "forget_runtime",
    "read_secret",
    "fetch_runtime",
    "issue_token",
    "mark_connected",
    "mark_ready",
    "unregister",
    "delete_mapping",
    "remove_finalizer",
    "report_pending",
    "keep_secret",
    "release",
]
NAME_RE = re.compile(r"^[a-z][a-z0-9.-]{0,35}$")


class Policy(NamedTuple):
    managed_by: str = "tether"
    only_app_connector: bool = False
    mode: str = "normal"  # model.MODES
    token_lifetime: float = 300.0  # the Director's one-time token lifetime (adopted Secrets)


class Facts(NamedTuple):
    kyma: model.Kyma | None
    mapping: model.MappingView | None
    now: datetime.datetime
    full: bool = False  # full resync: also ask the Director about Ready ones
    created_now: bool = False  # the mapping was created in this pass
    registered_now: bool = False  # registered (or adopted) in this pass, no token yet
    looked_up: bool = False
    found_runtime_id: str | None = None
    fetched: bool = False  # runtime(id:) asked in this pass
    runtime_condition: str | None = None  # its status condition; None: Director lacks it
    secret: SecretState = "unknown"
    unregistered: bool = False
    candidates: int = 0  # registrations the lookup found (over 1: ambiguous)
    found_own: bool = False  # the one found was registered by this instance
    found_secret: model.AgentSecret | None = None  # the agent Secret read in this pass
    halted: bool = False  # dry-run: the pass stops at its first change
    runtime_labels: Mapping[str, Any] | None = None  # the Director's labels, when fetched
    refusal: tuple[str, str] | None = None  # lookup refused: (claims reason, message)


class Action(NamedTuple):
    kind: ActionKind
    reason: str = ""
    message: str = ""
    runtime_id: str | None = None


DONE = Action("done")
FOREIGN = "ForeignRuntime"  # the condition reason of every refusal across Kyma CRs


def kyma_of(f: Facts) -> model.Kyma:
    assert f.kyma is not None, "decide chose an action that needs the Kyma CR"
    return f.kyma


def mapping_of(f: Facts) -> model.MappingView:
    assert f.mapping is not None, "decide chose an action that needs the mapping"
    return f.mapping


def problems(kyma: model.Kyma) -> tuple[str, str] | None:
    """(reason, message) when the Kyma CR cannot be registered, else None."""
    missing = [k for k in model.REQUIRED_LABELS if not kyma.labels.get(k)]
    if missing:
        return "MissingLabel", "Kyma CR lacks required label(s): " + ", ".join(missing)
    if runtime_name(kyma) is None:
        return "InvalidLabel", (
            f"label {apitypes.SHOOT_NAME_LABEL} does not give a valid Director runtime "
            "name (lower case letters, digits, '-', '.', up to 36, a letter first)"
        )
    return None


def runtime_name(kyma: model.Kyma) -> str | None:
    """The Director runtime name: the shoot's name, or for a Kyma CR without the
    ``kyma-project.io/shoot-name`` label (a bring-your-own cluster) ``byoc_name``."""
    if is_byoc(kyma):
        return byoc_name(kyma_ref(kyma.namespace, kyma.name))
    name = kyma.labels.get(apitypes.SHOOT_NAME_LABEL, "").strip().lower()
    return name if NAME_RE.match(name) else None


def is_byoc(kyma: model.Kyma) -> bool:
    """No shoot name: a cluster Gardener did not make (found again by ``tether_kyma``)."""
    return not kyma.labels.get(apitypes.SHOOT_NAME_LABEL, "").strip()


def byoc_name(ref: str) -> str:
    """Stable across restarts (a function of the Kyma CR's namespace and name only), one per
    Kyma CR (96 bits of SHA-256), 29 characters, and never a Gardener shoot's name (those
    have no '.')."""
    return model.BYOC_PREFIX + hashlib.sha256(ref.encode()).hexdigest()[:24]


def kyma_ref(kyma_namespace: str, kyma_name: str) -> str:
    return f"{kyma_namespace}.{kyma_name}"


def register_input(kyma: model.Kyma, policy: Policy) -> dict[str, Any]:
    """The ``RuntimeRegisterInput`` for a valid Kyma CR (see ``problems``)."""
    lab = kyma.labels
    labels: dict[str, Any] = {
        model.MANAGED_BY: policy.managed_by,
        model.KYMA_REF: kyma_ref(kyma.namespace, kyma.name),
        "global_subaccount_id": lab[apitypes.SUBACCOUNT_LABEL],
        "global_account_id": lab[apitypes.GLOBAL_ACCOUNT_LABEL],
    }
    if not is_byoc(kyma):  # a BYOC runtime carries no shoot label: none is its
        labels[model.SHOOT_LABEL] = lab[apitypes.SHOOT_NAME_LABEL]
    for key, source in (
        ("broker_instance_id", apitypes.INSTANCE_ID_LABEL),
        ("broker_plan_id", apitypes.PLAN_ID_LABEL),
        ("broker_plan_name", apitypes.PLAN_NAME_LABEL),
    ):
        if lab.get(source):
            labels[key] = lab[source]
    return {
        "name": runtime_name(kyma),
        "description": f"Kyma runtime {kyma.namespace}/{kyma.name}",
        "labels": labels,
    }


def mapping_labels(kyma: model.Kyma) -> dict[str, str]:
    out = {apitypes.KYMA_NAME_LABEL: kyma.name}
    if kyma.labels.get(apitypes.GLOBAL_ACCOUNT_LABEL):
        out[apitypes.GLOBAL_ACCOUNT_LABEL] = kyma.labels[apitypes.GLOBAL_ACCOUNT_LABEL]
    if kyma.labels.get(apitypes.SUBACCOUNT_LABEL):
        out[apitypes.SUBACCOUNT_LABEL] = kyma.labels[apitypes.SUBACCOUNT_LABEL]
    return out


def _due(status: Mapping[str, Any], now: datetime.datetime) -> bool:
    nxt = model.parse_time(status.get("nextAttemptAt"))
    return nxt is None or now >= nxt


def _token_expired(status: Mapping[str, Any], now: datetime.datetime) -> bool:
    exp = model.parse_time(status.get("tokenExpiresAt"))
    return exp is not None and now >= exp


def decide(f: Facts, policy: Policy) -> Action:
    k, m = f.kyma, f.mapping
    if f.halted:
        return DONE
    if m is not None and not f.created_now and not _due(m.status, f.now):
        return Action("wait")
    if k is None or k.deleting or (m is not None and m.deleting):
        return _teardown(f)
    if policy.only_app_connector and model.APP_CONNECTOR_MODULE not in k.modules:
        return Action("skip", "ModuleNotEnabled") if m is None or m.runtime_id is None else DONE
    bad = problems(k)
    if m is None:
        return Action("create_mapping", *(bad or ("", "")))
    if bad is not None:
        st = m.status
        same = (
            st.get("state") == "Failed"
            and _condition(st, "Registered").get("reason") == bad[0]
            and _condition(st, "Registered").get("message") == bad[1]
        )
        return DONE if same else Action("report_invalid", *bad)
    rid = m.runtime_id
    if rid is None:
        return _register(f, m, policy)
    return _registered(f, m, rid, policy)


def _register(f: Facts, m: model.MappingView, policy: Policy) -> Action:
    if not m.registering:
        return Action("mark_registering")
    if not f.looked_up:
        return Action("lookup")
    if f.candidates > 1:
        return _report(
            m,
            "report_invalid",
            "AmbiguousRegistration",
            f"{f.candidates} Director runtimes match this runtime (its agent Secret or "
            f"label {model.SHOOT_LABEL}); none adopted, none registered",
        )
    if f.refusal is not None:
        return _report(m, "report_invalid", FOREIGN, f.refusal[1])
    if f.found_runtime_id:
        return Action("adopt", runtime_id=f.found_runtime_id)
    if policy.mode == "registration-off":
        return _report(
            m,
            "report_pending",
            "RegistrationOff",
            "no registration found in the Director; TETHER_COMPASS_MODE="
            "registration-off registers none",
        )
    return Action("register")


def _report(m: model.MappingView, kind: ActionKind, reason: str, message: str) -> Action:
    cond = _condition(m.status, "Registered")
    same = cond.get("reason") == reason and cond.get("message") == message
    return DONE if same else Action(kind, reason, message)


def secret_verdict(
    s: model.AgentSecret | None,
    rid: str,
    tenant: str | None,
    now: datetime.datetime,
    lifetime: float,
) -> str:
    """Why a token must be issued for a runtime holding the agent Secret ``s`` (one Tether
    did not write), or "" when the Secret works and is kept as it is: complete, for this
    runtime and tenant, its token neither used (the agent's certificate is there while the
    Director does not see the runtime connected) nor expired (written over ``lifetime`` ago)."""
    if s is None:
        return "SecretMissing"
    if not s.complete or s.runtime_id != rid or (tenant and s.tenant != tenant):
        return "SecretForOtherRuntime"
    if s.agent_cert:
        return "TokenUsed"
    if s.written_at is None or now >= s.written_at + datetime.timedelta(seconds=lifetime):
        return "TokenExpired"
    return ""


def _registered(f: Facts, m: model.MappingView, rid: str, policy: Policy) -> Action:
    st = m.status
    if f.fetched and f.runtime_condition is None:
        return Action(
            "forget_runtime",
            "RuntimeNotFound",
            "the Director no longer knows the runtime; registering it again",
            runtime_id=rid,
        )
    if (
        f.runtime_labels is not None
        and f.runtime_condition is not None
        and not claims.names(f.runtime_labels, kyma_ref(m.namespace, m.name))
    ):
        return Action(
            "forget_runtime",
            FOREIGN,
            f"Director runtime {rid} is not this Kyma CR's "
            f"(its label {model.KYMA_REF} names another Kyma CR or none): released, "
            "not unregistered, no token issued; looking for a registration again",
            runtime_id=rid,
        )
    if st.get("runtimeConnected") is True:
        if f.full and not f.fetched:
            return Action("fetch_runtime", runtime_id=rid)
        return Action("mark_ready") if not _is_ready(st) else DONE
    if f.fetched and f.runtime_condition == "CONNECTED":
        return Action("mark_connected", runtime_id=rid)
    if f.registered_now:  # whatever Secret the runtime holds is not for this registration
        return Action("issue_token", "Registered", runtime_id=rid)
    if f.secret == "unknown":
        return Action("read_secret", runtime_id=rid)
    if f.found_secret is not None and not st.get("secretDigest"):  # a Secret someone else wrote
        if not f.fetched:
            return Action("fetch_runtime", runtime_id=rid)
        why = secret_verdict(f.found_secret, rid, m.tenant, f.now, policy.token_lifetime)
        return (
            Action("issue_token", why, runtime_id=rid)
            if why
            else Action("keep_secret", "SecretKept", runtime_id=rid)
        )
    need = f.secret != "matches" or _token_expired(st, f.now) or not st.get("configured")
    if need:
        if not f.fetched:
            return Action("fetch_runtime", runtime_id=rid)
        reason = (
            "SecretMissing"
            if f.secret == "missing"
            else "SecretAltered"
            if f.secret == "differs"
            else "TokenExpired"
            if _token_expired(st, f.now)
            else "NotConfigured"
        )
        return Action("issue_token", reason, runtime_id=rid)
    if f.full and not f.fetched:
        return Action("fetch_runtime", runtime_id=rid)
    return DONE if _is_ready(st) else Action("mark_ready")


def _teardown(f: Facts) -> Action:
    m = f.mapping
    if m is None:
        return DONE
    if not f.unregistered:
        rid = m.runtime_id
        if rid is not None:
            if f.runtime_labels is None:  # read it first: only this Kyma CR's is unregistered
                return Action("fetch_runtime", runtime_id=rid)
            if f.runtime_condition is None or claims.names(
                f.runtime_labels, kyma_ref(m.namespace, m.name)
            ):
                return Action("unregister", runtime_id=rid)
            return Action(
                "release",
                FOREIGN,
                f"Director runtime {rid} is not this Kyma CR's "
                f"(its label {model.KYMA_REF} names another Kyma CR or none): released, "
                "not unregistered",
                runtime_id=rid,
            )
        if m.registering:
            if not f.looked_up:
                return Action("lookup")
            if f.found_runtime_id and f.found_own:  # never one registered by someone else
                return Action("unregister", runtime_id=f.found_runtime_id)
    if not m.deleting:
        return Action("delete_mapping")
    if model.FINALIZER in m.finalizers:
        return Action("remove_finalizer")
    return DONE


def _condition(status: Mapping[str, Any], ctype: str) -> Mapping[str, Any]:
    for c in status.get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == ctype:
            return c
    return {}


def _is_ready(status: Mapping[str, Any]) -> bool:
    return (
        status.get("state") == "Ready"
        and status.get("registered") is True
        and status.get("configured") is True
        and not status.get("failures")
    )
