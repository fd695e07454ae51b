"""The staged rollout of the runtime bundle on real planes: a KCP (session plane, own
namespace) and three runtime planes, the enroller in-process (``reconcile.Enroller``), one
run at a time, its clock shifted where the gate's timeout must pass.

What a node would do is played by ``kubelet``: it writes each webhook Deployment's status
as a Deployment controller and kubelet would: a template whose image is ``BROKEN`` never
becomes ready (its new pod never available, the old ones kept), any other rolls out. What a
listener would do is played by ``beat``: the heartbeat Lease of each runtime whose webhook
serves its current template, renewed now.

Shown: a good bundle (a new image) going through the waves 1 runtime, 1, 1 with the gate
between them, the later waves holding the previous image until their turn; then a broken
bundle: the first wave fails its gate (halted at the timeout, an Event, the metric), the
other runtimes never see it, the failed wave gets the previous bundle back and rolls out
again, and the rollout is RolledBack, also after a restart of the enroller."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from enroller import reconcile, render
from testing import controlplane
from testing.enrollenv import Env
from tether.kube import gateway

pytestmark = pytest.mark.processes
GOOD, NEXT, BROKEN = (
    "example.com/tether:1.0.0",
    "example.com/tether:2.0.0",
    "example.com/tether:3.0.0-broken",
)
GATE = 600.0
NAMES = ("ro-a", "ro-b", "ro-c")


@pytest.fixture(scope="module")
def fleet() -> Iterator[dict[str, controlplane.ControlPlane]]:
    with controlplane.planes(*NAMES) as p:
        yield dict(p)


@pytest.fixture
def env(
    kcp: controlplane.ControlPlane,
    kcp_namespace: str,
    kyma_crd: str,
    enrollment_crd: None,
    tmp_path: Any,
) -> Iterator[Env]:
    e = Env(kcp, kcp_namespace, tmp_path)
    yield e
    custom: Any = client.CustomObjectsApi(e.api)
    for k in custom.list_namespaced_custom_object(
        "operator.kyma-project.io", "v1beta2", e.ns, "kymas"
    )["items"]:
        custom.patch_namespaced_custom_object(
            "operator.kyma-project.io",
            "v1beta2",
            e.ns,
            "kymas",
            k["metadata"]["name"],
            {"metadata": {"finalizers": None}},
        )
    e.gw.close()
    e.api.close()


def image(plane: controlplane.ControlPlane) -> str:
    return str(webhook_dict(plane)["spec"]["template"]["spec"]["containers"][0]["image"])


def kubelet(fleet: dict[str, controlplane.ControlPlane]) -> None:
    for plane in fleet.values():
        with plane.api_client() as api:
            apps = client.AppsV1Api(api)
            dep = apps.read_namespaced_deployment("tether-webhook", render.NAMESPACE)
            want, gen = dep.spec.replicas or 1, dep.metadata.generation if dep.metadata else 0
            broken = image(plane) == BROKEN
            status = (
                {
                    "observedGeneration": gen,
                    "replicas": want + 1,
                    "updatedReplicas": 1,
                    "readyReplicas": want,
                    "availableReplicas": want,
                    "unavailableReplicas": 1,
                }
                if broken
                else {
                    "observedGeneration": gen,
                    "replicas": want,
                    "updatedReplicas": want,
                    "readyReplicas": want,
                    "availableReplicas": want,
                }
            )
            apps.patch_namespaced_deployment_status(
                "tether-webhook", render.NAMESPACE, {"status": status}
            )


def beat(env: Env, e: reconcile.Enroller, fleet: dict[str, controlplane.ControlPlane]) -> None:
    at = e.now() + datetime.timedelta(seconds=1)
    coordination: Any = client.CoordinationV1Api(env.api)
    for name, plane in fleet.items():
        if image(plane) == BROKEN:
            continue
        rid = f"rt-{name}"
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": f"hb-{rid}",
                "labels": {
                    "tether.kyma-project.io/heartbeat": "true",
                    "kyma-project.io/runtime-id": rid,
                },
            },
            "spec": {"holderIdentity": rid, "renewTime": at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")},
        }
        try:
            coordination.patch_namespaced_lease(f"hb-{rid}", env.ns, {"spec": body["spec"]})
        except client.ApiException as ex:
            if ex.status != 404:
                raise
            coordination.create_namespaced_lease(env.ns, body)


def record(env: Env, e: reconcile.Enroller) -> dict[str, Any]:
    cm = env.gw.get(gateway.CONFIGMAPS, env.ns, e.s.rollout_config_map)
    state: dict[str, Any] = json.loads(cm["data"]["state.json"])
    return state


def cycle(
    env: Env, e: reconcile.Enroller, fleet: dict[str, controlplane.ControlPlane]
) -> dict[str, Any]:
    """One full run, then the fleet's nodes and listener catch up."""
    counts = e.run()
    assert counts == {"Ready": 3}, counts
    kubelet(fleet)
    beat(env, e, fleet)
    return record(env, e)


def images(fleet: dict[str, controlplane.ControlPlane]) -> dict[str, str]:
    return {f"rt-{n}": image(p) for n, p in fleet.items()}


def test_a_good_bundle_goes_wave_by_wave_and_a_broken_one_halts_and_rolls_back(
    env: Env, fleet: dict[str, controlplane.ControlPlane]
) -> None:
    for name, plane in fleet.items():
        env.kyma(name, plane)
    over: dict[str, Any] = dict(
        rollout_gate_timeout=datetime.timedelta(seconds=GATE),
        rollout_max_refusals=5,
        heartbeat_namespace=env.ns,
    )
    first = env.enroller(image=GOOD, **over)
    assert cycle(env, first, fleet)["phase"] == "Complete"  # nothing recorded: taken as good
    assert set(images(fleet).values()) == {GOOD}

    # a good bundle: one runtime per wave, the others keep the previous image until their turn
    e = env.enroller(image=NEXT, **over)
    state = cycle(env, e, fleet)
    order = [w[0] for w in state["waves"]]
    assert (state["phase"], state["wave"], len(order)) == ("Progressing", 0, 3)
    for i, rid in enumerate(order):
        held = images(fleet)
        assert held[rid] == NEXT and all(held[r] == GOOD for r in order[i + 1 :]), (i, held)
        state = cycle(env, e, fleet)  # the gate passes: the next wave begins in this run's end
        if i + 1 < len(order):
            assert (state["phase"], state["wave"]) == ("Progressing", i + 1), state["unhealthy"]
            state = cycle(env, e, fleet)  # the next wave applied
    assert state["phase"] == "Complete" and set(images(fleet).values()) == {NEXT}, state
    assert "RolloutComplete" in reasons(env, e)

    # a broken bundle: its first wave never rolls out; the gate fails at its timeout
    bad = env.enroller(image=BROKEN, **over)
    state = cycle(env, bad, fleet)
    canary = state["waves"][0][0]
    assert state["phase"] == "Progressing" and images(fleet)[canary] == BROKEN
    state = cycle(env, bad, fleet)
    assert state["phase"] == "Progressing" and "webhook not serving" in json.dumps(
        state["unhealthy"]
    )
    env.offset += datetime.timedelta(seconds=GATE + 1)
    state = cycle(env, bad, fleet)
    assert state["phase"] == "Halted" and "wave 1 failed its gate" in state["reason"], state
    assert bad.stats.rollout_halts._value.get() == 1
    assert "RolloutHalted" in reasons(env, bad)
    # the next run gives the canary the previous bundle back; nobody else ever saw the broken one
    state = cycle(env, bad, fleet)
    assert set(images(fleet).values()) == {NEXT}, images(fleet)
    assert state["phase"] == "RolledBack" and state["good"] != state["target"], state
    assert all(reconcile_rolled_out(p) for p in fleet.values())
    assert bad.stats.rollout_phase.labels("RolledBack")._value.get() == 1
    # a restart with the same broken bundle keeps it rolled back
    again = env.enroller(image=BROKEN, **over)
    assert cycle(env, again, fleet)["phase"] == "RolledBack"
    assert set(images(fleet).values()) == {NEXT}


def reconcile_rolled_out(plane: controlplane.ControlPlane) -> bool:
    from enroller import rollouts

    return rollouts.rolled_out(webhook_dict(plane))


def webhook_dict(plane: controlplane.ControlPlane) -> dict[str, Any]:
    with plane.api_client() as api:
        raw: dict[str, Any] = client.ApiClient().sanitize_for_serialization(
            client.AppsV1Api(api).read_namespaced_deployment("tether-webhook", render.NAMESPACE)
        )
        return raw


def reasons(env: Env, e: reconcile.Enroller) -> list[str]:
    evs = client.CoreV1Api(env.api).list_namespaced_event(env.ns).items
    return [str(ev.reason) for ev in evs if ev.involved_object.name == e.s.rollout_config_map]
