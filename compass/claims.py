"""Whose Director runtime is it: the pure checks that keep one tenant's registration out of
another Kyma CR's hands (issue 38), and the run's record of which mapping holds which
runtime ID.

A runtime's agent Secret (and any other hint) only *names* a runtime ID; the runtime is
adopted for a Kyma CR only when ``mismatch`` finds nothing (its Director labels, as the
Provisioner, compass-manager and Tether write them, name this Kyma CR's cluster, subaccount,
instance and global account, and no other Kyma CR's ``tether_kyma``) and no other mapping
holds it (``Holders``). Teardown unregisters only a runtime whose ``tether_kyma`` label
names this Kyma CR (``names``); anything else is released, never unregistered.

Labels compared (a label the runtime lacks is not compared; one it has must agree):

=========================== =============================================== ================
Director label              written by                                      Kyma CR label
=========================== =============================================== ================
``tether_kyma``             Tether (register, adoption)                     namespace.name
``gardenerClusterName``     Provisioner, compass-manager, Tether (required)  shoot-name
``global_subaccount_id``    Provisioner (KEB), Tether                       subaccount-id
``subaccount_id``           compass-manager                                 subaccount-id
``broker_instance_id``      Provisioner, compass-manager, Tether            instance-id
``global_account_id``       compass-manager, Tether                         global-account-id
=========================== =============================================== ================

A Kyma CR without a shoot name (a bring-your-own cluster) matches only a runtime whose
``tether_kyma`` names it and that has no ``gardenerClusterName`` (a shoot's registration is
never a BYOC runtime's).

The Director may hold a label value as a list (``global_subaccount_id`` often is): a value
agrees when the list holds it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from compass import model
from tether.kube import apitypes

SUBACCOUNT_KEYS = ("global_subaccount_id", "subaccount_id")
INSTANCE_KEY = "broker_instance_id"
ACCOUNT_KEY = "global_account_id"
# metric reasons of tether_compass_runtime_conflicts_total (bounded)
HELD_ELSEWHERE, LABELS_MISMATCH, RELEASED = "held_elsewhere", "labels_mismatch", "released"


class Identity(NamedTuple):
    """What a Kyma CR says about its runtime (from KCP labels the tenant does not write)."""

    ref: str  # "<namespace>.<name>", Tether's tether_kyma label
    tenant: str
    shoot: str
    subaccount: str
    instance: str


def identity(kyma: model.Kyma, ref: str) -> Identity:
    lab = kyma.labels
    return Identity(
        ref,
        lab.get(apitypes.GLOBAL_ACCOUNT_LABEL, ""),
        lab.get(apitypes.SHOOT_NAME_LABEL, ""),
        lab.get(apitypes.SUBACCOUNT_LABEL, ""),
        lab.get(apitypes.INSTANCE_ID_LABEL, ""),
    )


def _values(v: Any) -> set[str]:
    if isinstance(v, list | tuple):
        return {str(x) for x in v}
    return {str(v)}


def _agrees(labels: Mapping[str, Any], key: str, wanted: str) -> bool:
    return key not in labels or (bool(wanted) and wanted in _values(labels[key]))


def mismatch(labels: Mapping[str, Any], who: Identity) -> str:
    """Why a Director runtime with ``labels`` is not ``who``'s ("" when it is). Never names
    the other Kyma CR or tenant: the message goes to this Kyma CR's mapping."""
    owner = labels.get(model.KYMA_REF)
    if owner and owner != who.ref:
        return f"its label {model.KYMA_REF} names another Kyma CR"
    if not who.shoot:  # a bring-your-own cluster: only a runtime registered for it
        if owner != who.ref:
            return f"its label {model.KYMA_REF} does not name this Kyma CR (no shoot name)"
        if model.SHOOT_LABEL in labels:
            return f"its label {model.SHOOT_LABEL} names a shoot, this Kyma CR has none"
    elif who.shoot not in _values(labels.get(model.SHOOT_LABEL, "")):
        return f"its label {model.SHOOT_LABEL} does not name this Kyma CR's shoot"
    for key, wanted in [(k, who.subaccount) for k in SUBACCOUNT_KEYS] + [
        (INSTANCE_KEY, who.instance),
        (ACCOUNT_KEY, who.tenant),
    ]:
        if not _agrees(labels, key, wanted):
            return f"its label {key} does not name this Kyma CR's"
    return ""


def names(labels: Mapping[str, Any] | None, ref: str) -> bool:
    """Teardown: whether a registered runtime is this Kyma CR's to unregister (Tether wrote
    ``tether_kyma`` = ``ref`` when it registered or adopted it)."""
    return labels is not None and labels.get(model.KYMA_REF) == ref


class Holders:
    """Which mapping holds which runtime ID, for one run (thread-safe): seeded from the
    mappings the run listed, updated as the run registers and adopts, so that two Kyma CRs
    reconciled at once can never both take one runtime (``claim`` is atomic)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_id: dict[str, set[str]] = {}
        self.open = False

    def begin(self, mappings: Iterable[model.MappingView]) -> None:
        by_id: dict[str, set[str]] = {}
        for m in mappings:
            if m.runtime_id:
                by_id.setdefault(m.runtime_id, set()).add(m.name)
        with self._lock:
            self._by_id, self.open = by_id, True

    def end(self) -> None:
        with self._lock:
            self._by_id, self.open = {}, False

    def other(self, runtime_id: str, name: str) -> str | None:
        """A mapping other than ``name`` that holds ``runtime_id``, if any."""
        with self._lock:
            held = self._by_id.get(runtime_id, set()) - {name}
        return min(held) if held else None

    def claim(self, runtime_id: str, name: str) -> str | None:
        """Record that ``name`` holds ``runtime_id``; refused (the other holder returned)
        when another mapping holds it."""
        with self._lock:
            held = self._by_id.setdefault(runtime_id, set())
            others = held - {name}
            if others:
                return min(others)
            held.add(name)
            return None

    def release(self, runtime_id: str, name: str) -> None:
        with self._lock:
            self._by_id.get(runtime_id, set()).discard(name)

    def duplicates(self) -> int:
        """Runtime IDs held by more than one mapping (must be 0)."""
        with self._lock:
            return sum(1 for held in self._by_id.values() if len(held) > 1)
