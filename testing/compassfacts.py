"""Facts about one Kyma CR and its mapping as ``compass.decide`` and ``compass.adoption``
read them, in plain data (no plane): a fixed clock, a Kyma CR with the usual labels, and a
mapping view whose status the test names."""

from __future__ import annotations

import datetime
from typing import Any

from compass import model
from tether.kube import apitypes

NOW = datetime.datetime(2026, 11, 30, 12, 0, tzinfo=datetime.UTC)
LABELS = {
    apitypes.GLOBAL_ACCOUNT_LABEL: "ga-1",
    apitypes.SUBACCOUNT_LABEL: "sa-1",
    apitypes.SHOOT_NAME_LABEL: "c-4a1f",
    apitypes.INSTANCE_ID_LABEL: "inst-1",
    apitypes.PLAN_ID_LABEL: "p-1",
    apitypes.PLAN_NAME_LABEL: "azure",
}


def kyma(
    labels: dict[str, str] | None = None, *, modules: tuple[str, ...] = (), deleting: bool = False
) -> model.Kyma:
    return model.Kyma("kcp-system", "k1", LABELS if labels is None else labels, modules, deleting)


def mapping(
    *,
    rid: str | None = None,
    registering: bool = True,
    deleting: bool = False,
    finalizers: tuple[str, ...] = (model.FINALIZER,),
    **status: Any,
) -> model.MappingView:
    labels = {apitypes.KYMA_NAME_LABEL: "k1", apitypes.GLOBAL_ACCOUNT_LABEL: "ga-1"}
    if rid:
        labels[apitypes.COMPASS_RUNTIME_ID_LABEL] = rid
    ann = {model.REGISTERING: "true"} if registering else {}
    return model.MappingView("kcp-system", "k1", labels, ann, finalizers, deleting, status)
