"""Plain-data views of what compass reads (Kyma CR, mapping) and the names it uses.

``kyma_from`` and ``mapping_from`` turn API objects (dicts as served, camelCase) into
immutable views; everything downstream (``decide``) works on these only.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, NamedTuple

from tether.kube import apitypes

# Kyma CR (lifecycle-manager) ---------------------------------------------------------------
# kyma-project.io/shoot-name is not required: a Kyma CR without it is a bring-your-own
# cluster (BYOC), registered under a name derived from the Kyma CR (``decide.runtime_name``)
REQUIRED_LABELS = (
    apitypes.GLOBAL_ACCOUNT_LABEL,
    apitypes.SUBACCOUNT_LABEL,
)
APP_CONNECTOR_MODULE = "application-connector"

# CompassMapping (Tether's own, tether.kyma-project.io) ------------------------------------
FINALIZER = "tether.kyma-project.io/compass-registration"
# Written before the first registerRuntime call: a later run that finds it without a
# runtime ID looks the runtime up in the Director before registering again.
REGISTERING = "tether.kyma-project.io/registering"

# Director labels on a registered runtime ---------------------------------------------------
MANAGED_BY = "director_connection_managed_by"
KYMA_REF = "tether_kyma"  # "<namespace>.<name>": the per-Kyma key of the idempotency lookup

# Secret in the runtime ------------------------------------------------------------------
AGENT_SECRET_KEYS = ("CONNECTOR_URL", "RUNTIME_ID", "TENANT", "TOKEN")
# The runtime agent's client certificate, written once it exchanged its one-time token
# (compass-runtime-agent's default ClusterCertificatesSecret, namespace kyma-system).
AGENT_CERT_SECRET = "cluster-client-certificates"

# Registrations made by others (the Provisioner, compass-manager) ----------------------------
SHOOT_LABEL = "gardenerClusterName"  # the Director label both write: the shoot's name
# A bring-your-own runtime's Director name: this prefix and a digest of its Kyma CR's
# "<namespace>.<name>". Gardener shoot names are DNS labels (no '.'), so no shoot's
# registration is ever named like one.
BYOC_PREFIX = "byoc."
MODES = ("normal", "dry-run", "registration-off")


class AgentSecret(NamedTuple):
    """What an agent Secret found in a runtime holds (never its token)."""

    runtime_id: str
    tenant: str
    complete: bool  # all four keys, none empty
    written_at: datetime.datetime | None  # its last write (creation or managedFields time)
    digest: str
    agent_cert: bool = False  # the agent's client certificate Secret exists: the token was used


class Kyma(NamedTuple):
    namespace: str
    name: str
    labels: Mapping[str, str]
    modules: tuple[str, ...]
    deleting: bool


class MappingView(NamedTuple):
    namespace: str
    name: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    finalizers: tuple[str, ...]
    deleting: bool
    status: Mapping[str, Any]
    uid: str = ""
    generation: int = 1

    @property
    def runtime_id(self) -> str | None:
        return self.labels.get(apitypes.COMPASS_RUNTIME_ID_LABEL) or None

    @property
    def tenant(self) -> str | None:
        return self.labels.get(apitypes.GLOBAL_ACCOUNT_LABEL) or None

    @property
    def registering(self) -> bool:
        return self.annotations.get(REGISTERING) == "true"


def kyma_from(obj: Mapping[str, Any]) -> Kyma:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    modules = tuple(
        str(m.get("name"))
        for m in spec.get("modules") or []
        if isinstance(m, Mapping) and m.get("name")
    )
    return Kyma(
        namespace=meta.get("namespace", ""),
        name=meta["name"],
        labels=dict(meta.get("labels") or {}),
        modules=modules,
        deleting=bool(meta.get("deletionTimestamp")),
    )


def mapping_from(obj: Mapping[str, Any]) -> MappingView:
    meta = obj.get("metadata") or {}
    return MappingView(
        namespace=meta.get("namespace", ""),
        name=meta["name"],
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        finalizers=tuple(meta.get("finalizers") or ()),
        deleting=bool(meta.get("deletionTimestamp")),
        status=dict(obj.get("status") or {}),
        uid=str(meta.get("uid") or ""),
        generation=int(meta.get("generation") or 1),
    )


def format_time(ts: datetime.datetime) -> str:
    return ts.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: object) -> datetime.datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        ts = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return ts if ts.tzinfo else ts.replace(tzinfo=datetime.UTC)
