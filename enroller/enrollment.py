"""A runtime's RuntimeEnrollment in the KCP: its status (``enroller.conditions``, pure)
written when it changed, the Events of its transitions, its deletion.

It is owned by its Kyma CR (an ownerReference, ``controller: false``: the Kyma CR's
controller is lifecycle-manager; no ``blockOwnerDeletion``, which would need rights on the
Kyma CR's finalizers). The enroller still deletes it itself when it releases its finalizer;
the reference lets the KCP's garbage collector remove one whose Kyma CR went without the
enroller (no finalizer yet, or the enroller not running), and ``kubectl tree`` show it
under its Kyma CR. An enrollment written before the reference existed gets it at its next
write.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Mapping
from typing import Any

from enroller import conditions, render
from enroller import settings as settings_mod
from enroller.install import Failure, Memory, Result
from tether.base import logs, times
from tether.kube import apitypes, events, gateway, kyma

log = logging.getLogger("tether.enroller")


def logged(
    failed: str, write: Callable[[], object], tolerated: type[gateway.GatewayError] | None = None
) -> bool:
    """A write to the KCP whose failure is logged (``failed``: what it was), not raised;
    True when done (or it failed with ``tolerated``: already so)."""
    try:
        write()
    except gateway.GatewayError as e:
        if tolerated is not None and isinstance(e, tolerated):
            return True
        log.warning("%s: %s", failed, logs.bounded(e, 200))
        return False
    return True


def owner_references(view: kyma.KymaView, namespace: str) -> list[dict[str, Any]]:
    """The RuntimeEnrollment's reference to its Kyma CR (none when the Kyma CR is in another
    namespace: an ownerReference cannot cross namespaces)."""
    if not view.uid or view.namespace != namespace:
        return []
    return [
        {
            "apiVersion": f"{apitypes.KYMAS.group}/{apitypes.KYMAS.version}",
            "kind": apitypes.KYMA_KIND,
            "name": view.name,
            "uid": view.uid,
            "controller": False,
        }
    ]


class Enrollments:
    """The RuntimeEnrollments of the runtimes, and the Events about them."""

    def __init__(
        self,
        s: settings_mod.Settings,
        kcp: gateway.Kube,
        audit: logging.Logger,
        recorder: events.Recorder,
        now: Callable[[], datetime.datetime],
        *,
        version: str,
    ) -> None:
        self.s, self.kcp, self.audit, self.events, self.now = s, kcp, audit, recorder, now
        self.version = version  # the Version column: the image the runtimes are given

    def _owned(self, view: kyma.KymaView, enrollment: Mapping[str, Any] | None) -> None:
        """An existing RuntimeEnrollment not (yet) owned by this Kyma CR gets the reference."""
        refs = list(((enrollment or {}).get("metadata") or {}).get("ownerReferences") or [])
        want = owner_references(view, self.s.kcp_namespace)
        if enrollment is None or not want or any(r.get("uid") == view.uid for r in refs):
            return
        others = [r for r in refs if r.get("kind") != apitypes.KYMA_KIND]
        logged(
            f"RuntimeEnrollment {view.name}: owner reference not written",
            lambda: self.kcp.patch(
                apitypes.RUNTIME_ENROLLMENTS,
                self.s.kcp_namespace,
                view.name,
                {"metadata": {"ownerReferences": [*others, *want]}},
            ),
        )

    def write(
        self,
        obj: Mapping[str, Any],
        view: kyma.KymaView,
        enrollment: Mapping[str, Any] | None,
        mem: Memory,
        *,
        failure: Failure | None,
        result: Result | None,
        beat: datetime.datetime | None,
        quarantined: bool,
    ) -> None:
        """The RuntimeEnrollment's status (``conditions``), written when it changed; the
        Events of its transitions."""
        name = view.name
        previous = {
            c["type"]: c for c in ((enrollment or {}).get("status") or {}).get("conditions") or []
        }
        if mem.status is not None:
            previous = {c["type"]: c for c in mem.status.get("conditions") or []}
        gen = int(((enrollment or {}).get("metadata") or {}).get("generation") or 1)
        conds = conditions.conditions(
            conditions.StatusFacts(
                self.now(),
                previous,
                gen,
                (failure.reason, failure.message) if failure is not None else None,
                result.not_after if result is not None else None,
                result.webhook_serving if result is not None else None,
                beat,
                quarantined,
            )
        )
        status: dict[str, Any] = {"observedGeneration": gen, "conditions": conds}
        cert = conditions.certificate(
            {"notAfter": times.format_time(result.not_after), "caSerial": result.ca_serial}
            if result
            else None,
            mem.status,
            enrollment,
        )
        if cert is not None:
            status["certificate"] = cert
        status["version"] = self.version
        self._owned(view, enrollment)
        if mem.status == status:
            return
        if enrollment is None and mem.status is None and not self._create_enrollment(view):
            return
        written: list[Mapping[str, Any]] = []
        if not logged(
            f"RuntimeEnrollment {name}: status not written",
            lambda: written.append(
                self.kcp.patch(
                    apitypes.RUNTIME_ENROLLMENTS,
                    self.s.kcp_namespace,
                    name,
                    {"status": status},
                    subresource="status",
                )
            ),
        ):
            return
        # the Events name the object by its uid: kubectl describe lists only the Events whose
        # involvedObject.uid is the object's
        target = {
            "metadata": {
                "name": name,
                "uid": str((written[0].get("metadata") or {}).get("uid") or ""),
            }
        }
        was = (mem.status or {}).get("conditions") or []
        was_ready = next((c for c in was if c["type"] == "Ready"), None)
        was_quarantined = previous.get("Quarantined", {}).get("status") == "True"
        mem.status = status
        mem.quarantined = quarantined
        self._events(target, view, was_ready, conds[0], failure, result)
        if quarantined != was_quarantined:
            self._quarantine_events(target, view, quarantined)

    def _create_enrollment(self, view: kyma.KymaView) -> bool:
        """The runtime's RuntimeEnrollment (its status is written apart); False: it failed."""
        rid = view.runtime_id
        body = {
            "apiVersion": (
                f"{apitypes.RUNTIME_ENROLLMENTS.group}/{apitypes.RUNTIME_ENROLLMENTS.version}"
            ),
            "kind": "RuntimeEnrollment",
            "metadata": {
                "name": view.name,
                "namespace": self.s.kcp_namespace,
                "labels": {apitypes.RUNTIME_ID_LABEL: rid or "", **render.MANAGED_BY}
                if rid and kyma.valid_runtime_id(rid)
                else dict(render.MANAGED_BY),
                "ownerReferences": owner_references(view, self.s.kcp_namespace),
            },
            "spec": {"kymaName": view.name, "runtimeId": rid or ""},
        }
        return logged(
            f"RuntimeEnrollment {view.name}: create failed",
            lambda: self.kcp.create(apitypes.RUNTIME_ENROLLMENTS, self.s.kcp_namespace, body),
            tolerated=gateway.Conflict,
        )

    def _quarantine_events(
        self, target: Mapping[str, Any], view: kyma.KymaView, quarantined: bool
    ) -> None:
        if quarantined:
            self.event(
                target,
                "RuntimeEnrollment",
                "Quarantined",
                conditions.QUARANTINE_MESSAGE,
                warning=True,
            )
            return
        log.info(
            "runtime %s (Kyma %s) left quarantine: renewed from the current CA",
            view.runtime_id,
            view.name,
        )
        logs.audit(self.audit, "runtime_quarantine_ended", runtime=view.runtime_id, kyma=view.name)
        self.event(target, "RuntimeEnrollment", "QuarantineEnded", "renewed from the current CA")

    def _events(
        self,
        target: Mapping[str, Any],
        view: kyma.KymaView,
        was: Mapping[str, Any] | None,
        ready: Mapping[str, Any],
        failure: Failure | None,
        result: Result | None,
    ) -> None:
        if failure is not None:
            if was is None or was.get("reason") != failure.reason:
                self.event(
                    target,
                    "RuntimeEnrollment",
                    "Failed",
                    f"{failure.reason}: {failure.message}",
                    warning=True,
                )
            return
        assert result is not None
        if result.applied == "installed":
            self.event(
                target,
                "RuntimeEnrollment",
                "Enrolled",
                f"Tether installed in runtime {view.runtime_id}",
            )
        elif result.applied == "repaired":
            self.event(
                target, "RuntimeEnrollment", "Repaired", "missing objects restored in the runtime"
            )
        elif result.applied == "updated":
            self.event(
                target,
                "RuntimeEnrollment",
                "Updated",
                "the runtime's objects updated (a new image or "
                "bundle, or an edited webhook configuration)",
            )
        if result.renewed:
            self.event(
                target,
                "RuntimeEnrollment",
                "Renewed",
                f"certificates renewed: {', '.join(result.renewed)}",
            )
        if ready.get("status") == "True" and (was is None or was.get("status") != "True"):
            self.event(target, "RuntimeEnrollment", "Ready", "the runtime is connected")

    def event(
        self,
        obj: Mapping[str, Any],
        kind: str,
        reason: str,
        message: str,
        *,
        warning: bool = False,
        api_version: str = (
            f"{apitypes.RUNTIME_ENROLLMENTS.group}/{apitypes.RUNTIME_ENROLLMENTS.version}"
        ),
    ) -> None:
        meta = obj["metadata"]
        self.events.emit(
            events.Ref(
                api_version, kind, self.s.kcp_namespace, meta["name"], meta.get("uid") or ""
            ),
            reason,
            message,
            warning=warning,
        )

    def delete(self, name: str) -> None:
        logged(
            f"RuntimeEnrollment {name}: delete failed",
            lambda: self.kcp.delete(apitypes.RUNTIME_ENROLLMENTS, self.s.kcp_namespace, name),
            tolerated=gateway.NotFound,
        )
