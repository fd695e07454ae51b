"""Events sent in the background (``compass.event_sender``), against the real KCP: after
``drain`` every queued Event is stored; with the queue at its limit the caller sends its
own Event (nothing dropped, nothing unbounded)."""

from __future__ import annotations

from kubernetes import client

from compass import event_sender
from tether.kube import events, gateway


def _stored(api: client.ApiClient, ns: str, name: str) -> list[str]:
    evs = client.CoreV1Api(api).list_namespaced_event(
        ns, field_selector=f"involvedObject.name={name}"
    )
    return sorted(str(e.reason) for e in evs.items)


def test_drain_waits_for_every_queued_event(kcp_api: client.ApiClient, kcp_namespace: str) -> None:
    sender = event_sender.Background(gateway.Kube(kcp_api), "tether-compass", "test", threads=3)
    try:
        ref = events.Ref("v1", "ConfigMap", kcp_namespace, "rt-1", "")
        for i in range(30):
            sender.emit(ref, f"Step{i:02d}", "m")
        sender.drain()
        assert sender.pending() == 0
        assert _stored(kcp_api, kcp_namespace, "rt-1") == [f"Step{i:02d}" for i in range(30)]
    finally:
        sender.close()


def test_at_the_limit_the_caller_sends_its_own(
    kcp_api: client.ApiClient, kcp_namespace: str
) -> None:
    sender = event_sender.Background(gateway.Kube(kcp_api), "tether-compass", "test", limit=0)
    try:
        ref = events.Ref("v1", "ConfigMap", kcp_namespace, "rt-2", "")
        sender.emit(ref, "Inline", "m")
        # Sent before emit returned: no drain needed.
        assert _stored(kcp_api, kcp_namespace, "rt-2") == ["Inline"]
    finally:
        sender.close()
