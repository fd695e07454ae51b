"""The configuration injector as a cluster runs it: Tether installed from the local overlays
(``testing.deployed``) with the optional injector overlay (``manifests/kcp/injector``), every
Deployment run by the pod runner under its manifest's ServiceAccount; the example module
(``manifests/examples/injector``: its CRD, the platform team's write grant, the Watch with
``inject``) applied as an operator would. A customer's ConfigMap created with kubectl in the
runtime reaches the runtime's Sample CR in the KCP, through the installed webhook, listener
and injector, with no right beyond the manifests'.

Own planes (module scope), as the operational test's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from testing import controlplane, deployed, overlays
from tether.kube import apitypes

pytestmark = pytest.mark.processes

EXAMPLES = controlplane.REPO_ROOT / "manifests" / "examples" / "injector"
MODULE_NS = "sample-system"  # the example Watch's namespace in the runtime
LABEL = "sample.kyma-project.io/configuration"  # the example Watch's selector
SAMPLE = "sample-local-1"
INJECTOR_SA = f"system:serviceaccount:{overlays.NAMESPACE}:tether-injector"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[deployed.Fleet]:
    with controlplane.planes("inject-skr", "inject-kcp") as planes:
        f = deployed.install(
            planes["inject-skr"],
            planes["inject-kcp"],
            tmp_path_factory.mktemp("inject"),
            timeout=180,
            backoff_seconds=1.0,
            injector=True,
            enroller_env={"TETHER_ENROLLER_INTERVAL_SECONDS": "5"},
        )
        try:
            yield f
        finally:
            f.stop()


def sample(fleet: deployed.Fleet) -> dict[str, Any]:
    return dict(
        json.loads(
            deployed.kubectl(
                fleet.kcp,
                "get",
                "samples.sample.kyma-project.io",
                SAMPLE,
                "-n",
                deployed.KCP_NS,
                "-o",
                "json",
            ).stdout
        )
    )


def apply_json(
    fleet: deployed.Fleet, plane: controlplane.ControlPlane, name: str, obj: dict[str, Any]
) -> None:
    manifest = fleet.work / f"{name}.json"
    manifest.write_text(json.dumps(obj))
    deployed.kubectl(plane, "apply", "-f", str(manifest))


def can(fleet: deployed.Fleet, verb: str, resource: str, namespace: str) -> bool:
    done = deployed.kubectl(
        fleet.kcp,
        "auth",
        "can-i",
        verb,
        resource,
        "-n",
        namespace,
        f"--as={INJECTOR_SA}",
        check=False,
    )
    return done.stdout.strip() == "yes"


def test_a_configmap_made_with_kubectl_reaches_the_modules_cr_through_the_deployed_injector(
    fleet: deployed.Fleet,
) -> None:
    assert fleet.kcp_pods.status("tether-injector").get("availableReplicas") == 1, (
        fleet.kcp_pods.table()
    )
    deployed.kubectl(fleet.kcp, "apply", "-f", str(EXAMPLES / "sample-crd.yaml"))
    deployed.kubectl(
        fleet.kcp,
        "wait",
        "--for=condition=Established",
        "crd/samples.sample.kyma-project.io",
        "--timeout=60s",
    )
    deployed.kubectl(fleet.kcp, "apply", "-f", str(EXAMPLES / "sample-writer.yaml"))
    apply_json(
        fleet,
        fleet.kcp,
        "sample",
        {
            "apiVersion": "sample.kyma-project.io/v1",
            "kind": "Sample",
            "metadata": {
                "name": SAMPLE,
                "namespace": deployed.KCP_NS,
                "labels": {apitypes.RUNTIME_ID_LABEL: deployed.RUNTIME_ID},
            },
            "spec": {"replicas": 1},
        },
    )
    deployed.kubectl(fleet.kcp, "apply", "-f", str(EXAMPLES / "records.yaml"))
    deployed.kubectl(fleet.kcp, "apply", "-f", str(EXAMPLES / "watch.yaml"))
    deployed.kubectl(fleet.skr, "create", "namespace", MODULE_NS)
    # the injector reads only what its manifests and the platform team's grant allow
    assert can(fleet, "list", "runtimeconfigmaps.tether.kyma-project.io", "sample-configuration")
    for other in ("tether-configuration", deployed.KCP_NS):  # the shipped Watch's, the listener's
        assert not can(fleet, "list", "runtimeconfigmaps.tether.kyma-project.io", other)
    assert not can(fleet, "patch", "samples.sample.kyma-project.io", "sample-configuration")

    value = "blue-7f3a-only-in-the-cr"
    deployed.kubectl(
        fleet.skr,
        "create",
        "configmap",
        "sample-settings",
        "-n",
        MODULE_NS,
        f"--from-literal=color={value}",
        "--from-literal=size=xl",
    )
    deployed.kubectl(
        fleet.skr, "label", "configmap", "sample-settings", "-n", MODULE_NS, f"{LABEL}=true"
    )
    touches = iter(range(1_000_000))

    def arrived() -> Any:
        """The registration follows a new Watch within the enroller's interval; until then
        a change is the poller's (60 s): touch the ConfigMap every few seconds."""
        conf = (sample(fleet).get("spec") or {}).get("configuration")
        if conf is None and (n := next(touches)) % 6 == 5:
            deployed.kubectl(
                fleet.skr,
                "annotate",
                "configmap",
                "sample-settings",
                "-n",
                MODULE_NS,
                f"touched={n}",
                "--overwrite",
            )
        return conf

    t0 = time.monotonic()
    assert fleet.wait_for(
        "the value in the Sample CR", arrived, timeout=120, logs_of="tether-injector", poll=0.5
    ) == {"color": value, "size": "xl"}
    print(
        f"the first value in the Sample CR {time.monotonic() - t0:.1f} s "
        "after the ConfigMap's creation"
    )

    obj = sample(fleet)
    assert obj["spec"]["replicas"] == 1
    cond = fleet.wait_for(
        "the ConfigurationInjected condition",
        lambda: next(
            (
                c
                for c in (sample(fleet).get("status") or {}).get("conditions") or []
                if c["type"] == "ConfigurationInjected"
            ),
            None,
        ),
        timeout=90,
        logs_of="tether-injector",
        poll=0.5,
    )
    assert cond["status"] == "True" and value not in json.dumps(cond)

    t0 = time.monotonic()
    deployed.kubectl(
        fleet.skr,
        "patch",
        "configmap",
        "sample-settings",
        "-n",
        MODULE_NS,
        "--type=merge",
        "-p",
        json.dumps({"data": {"color": "green"}}),
    )
    fleet.wait_for(
        "the edit in the Sample CR",
        lambda: (sample(fleet).get("spec") or {}).get("configuration", {}).get("color") == "green",
        timeout=30,
        logs_of="tether-injector",
        poll=0.5,
    )
    print(
        f"an edit reached the Sample CR in {time.monotonic() - t0:.2f} s "
        "(kubectl round trips included)"
    )
    deployed.kubectl(fleet.skr, "delete", "configmap", "sample-settings", "-n", MODULE_NS)
    fleet.wait_for(
        "the values removed with the ConfigMap",
        lambda: "configuration" not in (sample(fleet).get("spec") or {}),
        timeout=30,
        logs_of="tether-injector",
        poll=0.5,
    )
    logs = fleet.kcp_pods.logs("tether-injector") + fleet.kcp_pods.logs("tether-listener")
    assert value not in logs
