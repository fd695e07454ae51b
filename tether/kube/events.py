"""Kubernetes Events (``core/v1``) for the critical transitions of a part.

``body`` builds one Event as plain data (pure: the tests need no server); ``Recorder.emit``
sends it, and a failure to write is logged, never raised: an Event is a courtesy to the
operator, not a step of the work. Messages are cut to ``MESSAGE_LIMIT`` characters; callers
pass keys and outcomes, never a token, key or customer data (an Event is readable by
everyone who may list Events in the namespace).

    rec = Recorder(kube, "tether-compass", identity)
    rec.emit(Ref("tether.kyma-project.io/v1alpha1", "CompassMapping", "kcp-system", name),
             "Registered", f"runtime {rid} registered in the Director")
"""

from __future__ import annotations

import datetime
import logging
import re
from collections.abc import Callable
from typing import Any, NamedTuple

from tether.base import logs
from tether.kube import apitypes, gateway

log = logging.getLogger(__name__)

MESSAGE_LIMIT = 1024  # events.k8s.io's note limit; core/v1 accepts more, nobody reads it
REASON_LIMIT = 128
_REASON = re.compile(r"^[A-Z][A-Za-z0-9]*$")


class Ref(NamedTuple):
    """The object an Event is about (its ``involvedObject``); the Event goes to its namespace."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = ""


def _stamp(now: datetime.datetime) -> str:
    return now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def body(
    ref: Ref,
    reason: str,
    message: str,
    *,
    warning: bool,
    component: str,
    instance: str,
    now: datetime.datetime,
) -> dict[str, Any]:
    """One Event: ``reason`` CamelCase (checked), ``message`` bounded."""
    if not _REASON.match(reason) or len(reason) > REASON_LIMIT:
        raise ValueError(f"event reason must be CamelCase: {reason!r}")
    stamp = _stamp(now)
    involved: dict[str, Any] = {
        "apiVersion": ref.api_version,
        "kind": ref.kind,
        "name": ref.name,
        "namespace": ref.namespace,
    }
    if ref.uid:
        involved["uid"] = ref.uid
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{ref.name[:200]}.", "namespace": ref.namespace},
        "involvedObject": involved,
        "reason": reason,
        "message": logs.bounded(message, MESSAGE_LIMIT),
        "type": "Warning" if warning else "Normal",
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": instance[:128],
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class Recorder:
    """Sends Events as ``component`` (e.g. ``tether-compass``) from ``instance`` (the pod)."""

    def __init__(
        self,
        kube: gateway.Kube,
        component: str,
        instance: str,
        *,
        now: Callable[[], datetime.datetime] = _utcnow,
    ) -> None:
        self._kube, self.component, self.instance, self._now = kube, component, instance, now

    def emit(self, ref: Ref, reason: str, message: str, *, warning: bool = False) -> None:
        doc = body(
            ref,
            reason,
            message,
            warning=warning,
            component=self.component,
            instance=self.instance,
            now=self._now(),
        )
        try:
            self._kube.create(apitypes.EVENTS, ref.namespace, doc)
        except gateway.GatewayError as e:
            log.warning(
                "event %s on %s %s/%s not written: %s",
                reason,
                ref.kind,
                ref.namespace,
                ref.name,
                logs.bounded(e, 200),
            )
