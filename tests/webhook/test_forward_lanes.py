"""A forwarder round reads its objects back several at once
(``TETHER_WEBHOOK_FORWARDER_READ_LANES``) from the real SKR apiserver, and sends them in one
POST in the order they were taken."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

from kubernetes import client
from prometheus_client import CollectorRegistry

from testing import controlplane
from testing.receiver import RUNTIME_ID, Receiver, RuntimeCert
from tether.kube import gateway
from tether.runtime import sender
from tether.wire import watches
from webhook import forwarder, keyqueue, metrics, readback
from webhook import settings as settings_mod

KEYS = 12


class CountingReader(readback.Reader):
    """The real read-back, counting the GETs in progress at once. A GET waits (up to
    ``wait`` seconds) for a second one to start, so that reads one after another show as a
    maximum of 1 and reads at once as more, however the threads are scheduled."""

    def __init__(self, skr: gateway.Kube, wait: float) -> None:
        super().__init__(skr)
        self.wait = wait
        self.lock = threading.Condition()
        self.now = self.most = self.calls = 0

    def get(
        self, namespace: str, name: str, target: watches.Target | None = None
    ) -> dict[str, Any] | None:
        with self.lock:
            self.now += 1
            self.calls += 1
            self.most = max(self.most, self.now)
            self.lock.notify_all()
            self.lock.wait_for(lambda: self.most > 1, timeout=self.wait)
        try:
            return super().get(namespace, name, target)
        finally:
            with self.lock:
                self.now -= 1


def _forwarder(
    skr: controlplane.ControlPlane, receiver: Receiver, cert: RuntimeCert, lanes: int
) -> tuple[forwarder.Forwarder, keyqueue.KeyQueue, CountingReader]:
    fs = dataclasses.replace(settings_mod.ForwarderSettings(), readback_lanes=lanes)
    queue = keyqueue.KeyQueue(100)
    reader = CountingReader(
        gateway.from_kubeconfig(str(skr.kubeconfig)), 2.0 if lanes > 1 else 0.05
    )
    client_ = sender.ListenerClient(
        sender.ClientSettings(
            receiver.url, RUNTIME_ID, str(receiver.ca_file), str(cert.cert_file), str(cert.key_file)
        )
    )
    return (
        forwarder.Forwarder(
            fs, RUNTIME_ID, queue, reader, client_, metrics.build(CollectorRegistry())
        ),
        queue,
        reader,
    )


def test_a_round_reads_its_objects_back_at_once_and_sends_them_in_order(
    skr: controlplane.ControlPlane,
    skr_api: client.ApiClient,
    namespace: str,
    receiver: Receiver,
    runtime_cert: RuntimeCert,
) -> None:
    core = client.CoreV1Api(skr_api)
    names = [f"cm-{i:02d}" for i in range(KEYS)]
    for n in names:
        core.create_namespaced_config_map(
            namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=n), data={"k": n})
        )
    fwd, queue, reader = _forwarder(skr, receiver, runtime_cert, lanes=4)
    for n in reversed(names):  # taken in arrival order, sent in it
        assert queue.put(keyqueue.Item(namespace, n, "", "CREATE", "", time.time())) == "enqueued"
    t0 = time.monotonic()
    try:
        assert fwd._step([], set())
    finally:
        fwd.stop(grace=0)
    assert 1 < reader.most <= 4, reader.most  # several at once, never more than the lanes
    assert reader.calls == KEYS
    assert time.monotonic() - t0 < 30
    (post,) = receiver.requests  # one round, one POST
    got = [r["name"] for r in post["body"]["items"]]
    assert got == list(reversed(names))
    assert all(r["data"] == {"k": r["name"]} for r in post["body"]["items"])
    assert len(queue) == 0 and queue.in_flight() == 0  # every key done


def test_one_lane_reads_one_after_another(
    skr: controlplane.ControlPlane,
    skr_api: client.ApiClient,
    namespace: str,
    receiver: Receiver,
    runtime_cert: RuntimeCert,
) -> None:
    core = client.CoreV1Api(skr_api)
    for n in ("a", "b"):
        core.create_namespaced_config_map(
            namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=n), data={"k": n})
        )
    fwd, queue, reader = _forwarder(skr, receiver, runtime_cert, lanes=1)
    for n in ("a", "b"):
        queue.put(keyqueue.Item(namespace, n, "", "CREATE", "", time.time()))
    try:
        assert fwd._step([], set())
    finally:
        fwd.stop(grace=0)
    assert reader.most == 1 and reader.calls == 2
    assert [r["name"] for r in receiver.records()] == ["a", "b"]
    assert all(r["source"] == "webhook" for r in receiver.records())
