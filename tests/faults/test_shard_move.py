"""Runtimes sharded across KCPs: one runtime moved from KCP A to KCP B without losing a change
(issue 26 item 4; docs/operations.md, "Moving a runtime to another KCP").

Real planes: the fault suite's SKR and KCP planes (KCP A) and a KCP plane of this module's
own (KCP B). In each KCP a real enroller (``reconcile.Enroller`` in-process, one run at a
time: what ``tether enroller`` schedules) with its own CA and its own listener URL, and a real
listener (gunicorn, mTLS) trusting that KCP's CA only. The runtime's webhook and poller are
real processes (``testing.faultstack.Stack``), first sending to A. A customer writes
ConfigMaps throughout.

The planes run no kubelet: the enroller's bundle is stored in the SKR apiserver but runs no
pod. Where a pod would restart with the runtime's re-rendered Secret, the harness restarts
the webhook and the poller with what that Secret holds (B's listener URL, CA and the client
certificate B's enroller issued).
"""

from __future__ import annotations

import base64
import contextlib
import io
import logging
import pathlib
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from enroller import decide, metrics, reconcile, render
from enroller import settings as settings_mod
from testing import compassenv, controlplane, faultstack, listenerenv, localnet, pollerenv
from tether.kube import apitypes, gateway, skr_clients

ENROLLMENT_CRD = (
    controlplane.REPO_ROOT
    / "manifests"
    / "kcp"
    / "crds"
    / "tether.kyma-project.io_runtimeenrollments.yaml"
)


@pytest.fixture(scope="module")
def kcp_b() -> Iterator[controlplane.ControlPlane]:
    with controlplane.planes("shard-kcp-b") as p:
        yield p["shard-kcp-b"]


class Shard:
    """One KCP's enroller for the moved runtime (its Kyma CR ``kyma`` in ``env.namespace``)."""

    def __init__(self, env: listenerenv.Env, listener_url: str, kyma: str, rid: str) -> None:
        self.env, self.url, self.kyma, self.rid = env, listener_url, kyma, rid
        controlplane.install_crds(env.api, ENROLLMENT_CRD)
        self.gw = gateway.from_kubeconfig(str(env.kcp.kubeconfig))
        self.audit_text = io.StringIO()
        audit = logging.getLogger(f"test.shard.audit.{uuid.uuid4().hex[:6]}")
        audit.setLevel(logging.INFO)
        audit.propagate = False
        audit.addHandler(logging.StreamHandler(self.audit_text))
        s = settings_mod.Settings(
            listener_url=listener_url,
            listener_ca=env.server_ca_file.read_bytes(),
            kcp_namespace=env.namespace,
            namespace=env.namespace,
            backoff_base=0.0,
        )
        self.enroller = reconcile.Enroller(
            s,
            self.gw,
            skr_clients.SkrClients(self.gw, env.namespace, localnet.policy(timeout=s.skr_timeout)),
            metrics.Metrics(),
            audit,
        )

    def run(self) -> dict[str, int]:
        return self.enroller.run({self.kyma})

    def client_ca(self) -> bytes:
        """What this KCP's listener trusts: its enroller's CA bundle."""
        return self.enroller.cas.ensure().bundle

    def enrolled(self) -> dict[str, Any]:
        """The Kyma CR's ``Enrolled`` condition in this KCP."""
        e: Any = client.CustomObjectsApi(self.env.api).get_namespaced_custom_object(
            apitypes.RUNTIME_ENROLLMENTS.group,
            apitypes.RUNTIME_ENROLLMENTS.version,
            self.env.namespace,
            apitypes.RUNTIME_ENROLLMENTS.plural,
            self.kyma,
        )
        return dict(next(c for c in e["status"]["conditions"] if c["type"] == "Enrolled"))

    def annotate(self, notes: dict[str, str | None]) -> None:
        client.CustomObjectsApi(self.env.api).patch_namespaced_custom_object(
            apitypes.KYMAS.group,
            apitypes.KYMAS.version,
            self.env.namespace,
            apitypes.KYMAS.plural,
            self.kyma,
            {"metadata": {"annotations": notes}},
        )

    def kyma_exists(self) -> bool:
        return self.gw.get_or_none(apitypes.KYMAS, self.env.namespace, self.kyma) is not None

    def close(self) -> None:
        """The finalizer released (a test that failed half way), the client closed."""
        if self.kyma_exists():
            self.gw.patch(
                apitypes.KYMAS, self.env.namespace, self.kyma, {"metadata": {"finalizers": None}}
            )
        self.gw.close()


def held(core: client.CoreV1Api) -> tuple[str, dict[str, bytes]]:
    """The runtime's client Secret: its resourceVersion and data."""
    s: Any = core.read_namespaced_secret(render.CLIENT_SECRET, render.NAMESPACE)
    return s.metadata.resource_version, {k: base64.b64decode(v) for k, v in (s.data or {}).items()}


def pods_send_to(stack: faultstack.Stack) -> set[str | None]:
    """The listener URLs the runtime's Deployments' pod templates name (a change restarts the
    pods)."""
    deps: Any = client.AppsV1Api(stack.api).list_namespaced_deployment(render.NAMESPACE)
    return {
        (d.spec.template.metadata.annotations or {}).get(render.LISTENER_ANNOTATION)
        for d in deps.items
    }


def restart_senders(stack: faultstack.Stack, data: dict[str, bytes], d: pathlib.Path) -> None:
    """What a pod restart does with the re-rendered Secret: the webhook and the poller
    started again with its listener URL, CA and client certificate."""
    for key in ("ca.crt", "tls.crt", "tls.key"):
        (d / f"moved-{key}").write_bytes(data[key])
    moved = {
        "TETHER_LISTENER_URL": data["listener-url"].decode(),
        "TETHER_LISTENER_CA_FILE": str(d / "moved-ca.crt"),
        "TETHER_CLIENT_CERT_FILE": str(d / "moved-tls.crt"),
        "TETHER_CLIENT_KEY_FILE": str(d / "moved-tls.key"),
    }
    assert stack.webhook is not None
    stack.webhook.stop()
    stack.webhook.env.update(moved)
    stack.webhook.start()  # same port and serving certificate: its registration holds
    for p in stack.pollers:
        p.stop()
    stack.pollers.append(
        pollerenv.PollerProcess(d, "poller-moved", {**stack.poller_env, **moved}).start()
    )


def test_a_runtime_moves_to_another_kcp_without_losing_a_change(
    fskr: controlplane.ControlPlane,
    fault_env: listenerenv.Env,
    kcp_b: controlplane.ControlPlane,
    tmp_path: pathlib.Path,
    report: Callable[..., None],
) -> None:
    env_a = listenerenv.own_namespace(fault_env, "sha")
    api_b = kcp_b.api_client()
    listenerenv.install_crd(api_b)
    controlplane.install_crds(api_b, controlplane.KYMA_CRD)
    env_b = listenerenv.make_env(kcp_b, api_b, tmp_path, f"shb-{uuid.uuid4().hex[:6]}")
    stack = faultstack.Stack(fskr, env_a, tmp_path).start()
    rt, kyma = stack.runtime, f"kyma-{stack.runtime.id.lower()}"[:60]
    compassenv.create_kubeconfig_secret(env_a.api, env_a.namespace, kyma, fskr)
    port_b = controlplane.free_port()
    a = Shard(env_a, stack.proxy.url, kyma, rt.id)
    b = Shard(env_b, f"https://127.0.0.1:{port_b}", kyma, rt.id)
    listener_b: faultstack.FixedPortListener | None = None
    customer: faultstack.Workload | None = None
    try:
        (tmp_path / "b-client-ca.crt").write_bytes(b.client_ca())
        listener_b = faultstack.FixedPortListener(
            env_b,
            "shard-b",
            port_b,
            TETHER_LISTENER_CLIENT_CA_FILE=str(tmp_path / "b-client-ca.crt"),
        )
        customer = faultstack.Workload(
            stack.core, stack.namespace, stack.labels, rate=5.0, seed=26
        ).start()
        _move(stack, a, b, tmp_path, customer, report, listener_b)
    finally:
        if (
            customer is not None
        ):  # stopped by finish(); else (a failure half way) stopped here first
            with contextlib.suppress(AssertionError):
                customer.stop()
        for shard in (b, a):  # the bundle out of the shared SKR plane: its owner removes it
            shard.enroller.installer.remove_objects(kyma, rt.id)
            shard.close()
        stack.close()
        if listener_b is not None:
            listener_b.stop()
        listenerenv.remove_namespace(env_a)
        api_b.close()


def _move(
    stack: faultstack.Stack,
    a: Shard,
    b: Shard,
    d: pathlib.Path,
    customer: faultstack.Workload,
    report: Callable[..., None],
    listener_b: faultstack.FixedPortListener,
) -> None:
    rt = stack.runtime
    assert a.run() == {"Ready": 1}, (
        a.enrolled()
    )  # A installs the runtime: its Secret names A's listener
    assert held(stack.core)[1]["listener-url"].decode() == a.url and pods_send_to(stack) == {a.url}
    customer.wait_writes(15)
    # B's Kyma CR without the move asked for: refused, nothing written into the runtime
    listenerenv.create_kyma(b.env.api, b.env.namespace, rt.id, rt.domain)
    compassenv.create_kubeconfig_secret(b.env.api, b.env.namespace, b.kyma, stack.skr)
    rv = held(stack.core)[0]
    assert b.run() == {"Failed": 1}
    refused = b.enrolled()
    assert (
        refused["reason"] == "OwnedByAnotherKcp"
        and decide.TAKE_OVER_ANNOTATION in refused["message"]
    ), refused
    assert held(stack.core)[0] == rv, "B wrote into a runtime it does not own"

    start = time.monotonic()  # the move: asked for in B, from exactly A's listener
    b.annotate({decide.TAKE_OVER_ANNOTATION: a.url})
    assert b.run() == {"Ready": 1}, b.enrolled()
    assert "runtime_taken_over" in b.audit_text.getvalue()
    rv, data = held(stack.core)
    assert data["listener-url"].decode() == b.url and pods_send_to(stack) == {
        b.url
    }  # the pods restart
    assert (
        a.run() == {"Failed": 1} and a.enrolled()["reason"] == "OwnedByAnotherKcp"
    )  # A stops; no fight
    assert held(stack.core)[0] == rv, "A wrote into a runtime B took over"
    restart_senders(stack, data, d)
    customer.wait_writes(15)
    # A's Kyma CR deleted: its enroller removes nothing from the runtime B owns now
    client.CustomObjectsApi(a.env.api).delete_namespaced_custom_object(
        apitypes.KYMAS.group, apitypes.KYMAS.version, a.env.namespace, apitypes.KYMAS.plural, a.kyma
    )
    a.run()
    assert not a.kyma_exists(), "A's Kyma CR kept its finalizer"
    assert held(stack.core)[0] == rv, "A's removal touched the runtime B owns"
    moved = time.monotonic()
    customer.wait_writes(15)
    last = customer.finish()
    try:
        to_b = stack.wait_converged(start, timeout=120, env=b.env)
    except AssertionError as e:
        raise AssertionError(
            f"{e}\n--- listener B\n{faultstack.tail(listener_b.log_file)}"
        ) from None
    after_last = time.monotonic() - last
    assert b.run() == {"Ready": 1}  # B keeps it, writing nothing new
    assert held(stack.core)[0] == rv
    print(
        f"moved {rt.id} from A to B: B exact {to_b:.1f}s after the move's start, "
        f"{after_last:.1f}s after the last write; {customer.summary()}"
    )
    report(
        fault="runtime moved to another KCP (shard)",
        writes=len(customer.writes),
        failed=len(customer.failed()),
        retried=len(customer.retried()),
        fault_seconds=round(moved - start, 1),
        after_fault_seconds=round(start + to_b - moved, 1),
        converged_seconds=round(after_last, 1),
        move_to_b_exact_seconds=round(to_b, 1),
    )
