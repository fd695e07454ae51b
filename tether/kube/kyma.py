"""Views of the Kyma custom resource (lifecycle-manager's; its type is ``apitypes.KYMAS``).

One Kyma CR in the KCP represents one runtime (SKR). Tether's parts read it and write only its
``metadata.finalizers``: the listener matches a runtime's client certificate against it,
compass registers it; the enroller adds its finalizer (``tether.kyma-project.io/enroller``)
so that the CR's deletion waits for the runtime's clean-up, and removes it after. Its
spec, labels and annotations are never written by a part; an operator mutes a runtime with
the annotation ``tether.kyma-project.io/muted`` (``tether mute``), which the listener reads.

    views = kyma.list_by_runtime_id(kcp, "kcp-system", "4a1f...")   # label-selected list
    v = views[0]; v.domain, v.deleting

``view`` is pure (a plain dict in, a ``KymaView`` out); ``list_by_runtime_id`` is the only
I/O here. Label values are checked before they go into a selector, so a caller's text can
never widen the selection.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from tether.kube import apitypes, gateway

# A Kubernetes label value (also the change record's runtimeId pattern).
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


class KymaView(NamedTuple):
    """What Tether needs of a Kyma CR (plain data)."""

    namespace: str
    name: str
    uid: str
    runtime_id: str | None
    domain: str | None
    deleting: bool
    labels: dict[str, str]
    modules: frozenset[str] = frozenset()  # enabled in spec.modules (``watches.modules_of``)
    muted: str | None = None  # the reason an operator muted it (``apitypes.MUTED_ANNOTATION``)


def valid_runtime_id(runtime_id: str) -> bool:
    """Whether the text is usable as a runtime ID (a label value of at most 63 chars)."""
    return len(runtime_id) <= 63 and bool(_LABEL_VALUE.match(runtime_id))


def view(obj: Mapping[str, Any]) -> KymaView:
    """A view of a Kyma CR as served by the API (a plain dict)."""
    meta = obj.get("metadata") or {}
    labels = dict(meta.get("labels") or {})
    annotations = meta.get("annotations") or {}
    domain = annotations.get(apitypes.SKR_DOMAIN_ANNOTATION)
    muted = annotations.get(apitypes.MUTED_ANNOTATION)
    return KymaView(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        runtime_id=labels.get(apitypes.RUNTIME_ID_LABEL),
        domain=domain.strip() if isinstance(domain, str) and domain.strip() else None,
        deleting=bool(meta.get("deletionTimestamp")),
        labels=labels,
        modules=frozenset(
            str(m["name"])
            for m in (obj.get("spec") or {}).get("modules") or []
            if isinstance(m, Mapping) and isinstance(m.get("name"), str)
        ),
        muted=muted_reason(muted),
    )


def muted_reason(value: object) -> str | None:
    """The reason of a muted runtime (its annotation's value, one line, cut), or None when
    the annotation is absent; a present but empty annotation mutes too ("muted")."""
    if not isinstance(value, str):
        return None
    line = " ".join(value.split())[: apitypes.MUTED_MAX]
    return line or "muted"


def list_by_runtime_id(
    kcp: gateway.Kube, namespace: str, runtime_id: str, *, timeout: float | None = None
) -> list[KymaView]:
    """The Kyma CRs in ``namespace`` labelled with ``runtime_id`` (normally one).

    Raises ``ValueError`` for a runtime ID that is not a valid label value and a
    ``gateway.GatewayError`` when the API fails."""
    if not valid_runtime_id(runtime_id):
        raise ValueError("runtime ID is not a valid label value")
    resp = kcp.list(
        apitypes.KYMAS,
        namespace,
        label_selector=f"{apitypes.RUNTIME_ID_LABEL}={runtime_id}",
        timeout=timeout,
    )
    return [view(item) for item in resp.get("items") or []]
