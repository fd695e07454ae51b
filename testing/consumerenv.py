"""The consumer library's test environment: stored records written straight into a KCP (no
listener), etcd compaction, and a consumer run on a thread that collects what it delivers.

    store = Store(kcp_gateway, namespace, watch="configuration")
    store.put("rt-1", "team-a", "app", data={"k": "v"}, kyma="kyma-1")   # create or update
    store.remove("rt-1", "team-a", "app")
    compact(plane)                                   # etcd forgets every older revision
"""

from __future__ import annotations

import contextlib
import datetime
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from listener.storage import records
from testing import controlplane, listenerenv
from tether.kube import apitypes, gateway
from tether.runtime import consumer

RCM = apitypes.RUNTIME_CONFIGMAPS


def record(
    runtime: str,
    watch: str,
    ns: str,
    name: str,
    *,
    data: dict[str, str] | None = None,
    deleted: bool = False,
    rv: str = "1",
) -> dict[str, Any]:
    """A record as the listener stores it (tether.wire.changes' fields)."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "runtimeId": runtime,
        "watch": watch,
        "namespace": ns,
        "name": name,
        "resource": {"group": "", "version": "v1", "kind": "ConfigMap"},
        "uid": f"uid-{name}",
        "resourceVersion": rv,
        "observedAt": now,
        "deleted": deleted,
        "source": "webhook",
        "epoch": 0,
        "labels": {},
        "annotations": {},
        "data": dict(data or {}),
    }


class Store:
    """Writes RuntimeConfigMap objects of one Watch in one KCP namespace, as the listener would
    (its body, plus the Kyma CR name label)."""

    def __init__(self, kcp: gateway.Kube, namespace: str, watch: str) -> None:
        self.kcp, self.namespace, self.watch = kcp, namespace, watch

    def name(self, runtime: str, ns: str, name: str) -> str:
        return records.object_name(records.Key(runtime, self.watch, ns, name))

    def put(
        self,
        runtime: str,
        ns: str,
        name: str,
        *,
        data: dict[str, str] | None = None,
        kyma: str = "",
        deleted: bool = False,
        pad: int = 0,
    ) -> int:
        """Create or update the key's object; its new resourceVersion."""
        rec = record(runtime, self.watch, ns, name, data=data, deleted=deleted)
        if pad:
            rec["data"]["pad"] = "x" * pad
        body = records.body(rec, self.namespace)
        if kyma:
            body["metadata"]["labels"][apitypes.KYMA_NAME_LABEL] = kyma
        obj_name = body["metadata"]["name"]
        current = self.kcp.get_or_none(RCM, self.namespace, obj_name)
        if current is None:
            out = self.kcp.create(RCM, self.namespace, body)
        else:
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            out = self.kcp.replace(RCM, self.namespace, obj_name, body)
        return int(out["metadata"]["resourceVersion"])

    def remove(self, runtime: str, ns: str, name: str) -> None:
        self.kcp.delete(RCM, self.namespace, self.name(runtime, ns, name))


@contextlib.contextmanager
def own_kcp() -> Iterator[tuple[controlplane.ControlPlane, gateway.Kube]]:
    """A KCP plane of the caller's own (its API server may be restarted, its etcd compacted)
    with the RuntimeConfigMap CRD, and an admin gateway to it."""
    with controlplane.ControlPlane("kcp") as plane:
        kcp = gateway.from_kubeconfig(str(plane.kubeconfig))
        try:
            listenerenv.install_crd(kcp.api_client)
            yield plane, kcp
        finally:
            kcp.close()


def fresh_namespace(kcp: gateway.Kube, prefix: str = "c") -> str:
    import uuid

    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    kcp.create(gateway.NAMESPACES, None, {"metadata": {"name": name}})
    return name


def etcd_revision(plane: controlplane.ControlPlane) -> int:
    import json

    out = _etcdctl(plane, "endpoint", "status", "-w", "json")
    return int(json.loads(out)[0]["Status"]["header"]["revision"])


def compact(plane: controlplane.ControlPlane) -> int:
    """Compact etcd at its current revision (what the API server does every 5 minutes);
    the revision compacted at."""
    rev = etcd_revision(plane)
    _etcdctl(plane, "compact", str(rev))
    return rev


def _etcdctl(plane: controlplane.ControlPlane, *args: str) -> str:
    tool = controlplane.binaries() / "etcdctl"
    proc = subprocess.run(
        [str(tool), f"--endpoints=http://127.0.0.1:{plane.etcd_port}", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if proc.returncode != 0:
        raise controlplane.ControlPlaneError(f"etcdctl {args[0]} failed: {proc.stderr[-500:]}")
    return proc.stdout


class Collector:
    """A consumer iterated on its own thread; what it delivered, in order."""

    def __init__(self, source: consumer.Consumer) -> None:
        self.source = source
        self.got: list[consumer.Event] = []
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True, name="collector")
        self._thread.start()

    def _run(self) -> None:
        try:
            for ev in self.source:
                with self._lock:
                    self.got.append(ev)
        except BaseException as e:  # noqa: BLE001 - the test reads it
            self.error = e

    def events(self) -> list[consumer.Event]:
        with self._lock:
            return list(self.got)

    def changes(self) -> list[consumer.Change]:
        return [e for e in self.events() if isinstance(e, consumer.Change)]

    def wait(self, cond: Callable[[list[consumer.Event]], bool], timeout: float = 30.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.error is not None:
                raise AssertionError(f"the consumer failed: {self.error!r}")
            if cond(self.events()):
                return
            time.sleep(0.05)
        raise AssertionError(f"not within {timeout}s; got {self.events()!r}"[:4000])

    def stop(self, timeout: float = 10.0) -> None:
        self.source.stop.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise AssertionError("the consumer did not stop within its bound")


def synced(events: list[consumer.Event]) -> Iterator[consumer.Synced]:
    return (e for e in events if isinstance(e, consumer.Synced))
