"""The whole of Tether on this machine, as a cluster would run it: `make demo`.

Starts two real control planes (an SKR runtime and the KCP) and the Director stand-in,
applies the local overlays of `manifests/kcp` and `manifests/skr` with `kubectl apply -k`,
and runs every Deployment they contain with the pod runner (`testing/podrunner.py`: each
container a local process under its manifest's ServiceAccount token, security context,
mounted Secrets and probes), the optional configuration injector included. Then a ConfigMap
change travels from the runtime into the KCP, the runtime gets its Compass registration and
one-time token Secret, and the example module's configuration (manifests/examples/injector)
reaches its CR in the KCP through the injector. Then the optional delivery canary
(manifests/kcp/canary, docs/canary.md) probes the demo runtime every 15 s (60 s by default)
and its metrics show a successful probe. The enroller runs every 10 s here (60 s by
default), so a new Watch reaches the runtime within seconds.

    .venv/bin/python hack/demo.py            # runs until Ctrl-C
    .venv/bin/python hack/demo.py --once     # the scenario, then stop (a smoke check)

Logs of every container are in the work folder printed at the start
(pods-<plane>-tether-system/<pod>/logs/<container>.log).
"""

from __future__ import annotations

import argparse
import base64
import json
import pathlib
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any, cast

from kubernetes import client

from tether.kube import apitypes

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from listener.storage import records  # noqa: E402
from testing import canaryenv, controlplane, deployed  # noqa: E402

KCP_NS = deployed.KCP_NS
RUNTIME_ID = deployed.RUNTIME_ID
RECORDS_NS = "tether-configuration"  # the shipped Watch's storage namespace (manifests/kcp/watches)
EXAMPLES = REPO / "manifests" / "examples" / "injector"
SAMPLE = "sample-demo"
SAMPLES = ("sample.kyma-project.io", "v1", KCP_NS, "samples")


def say(msg: str) -> None:
    print(f"[demo] {msg}", flush=True)


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            got = probe()
        except client.ApiException:
            got = None
        if got:
            return got
        time.sleep(0.2)
    raise SystemExit(f"[demo] timed out waiting for {what}")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--once", action="store_true", help="run the scenario, then stop everything")
    args = ap.parse_args(argv)
    work = pathlib.Path(tempfile.mkdtemp(prefix="tether-demo-"))
    say(f"work folder (overlays, certificates, container logs): {work}")
    t0 = time.monotonic()
    try:
        with controlplane.planes("skr", "kcp") as planes:
            skr, kcp = planes["skr"], planes["kcp"]
            say(
                f"{controlplane.kube_apiserver_version()}: planes ready in "
                f"{time.monotonic() - t0:.1f}s"
            )
            fleet = deployed.install(
                skr,
                kcp,
                work,
                timeout=180,
                say=say,
                backoff_seconds=2.0,
                injector=True,
                enroller_env={"TETHER_ENROLLER_INTERVAL_SECONDS": "10"},
            )
            try:  # the pods stop before their planes do
                for plane, runner in (("KCP", fleet.kcp_pods), ("SKR", fleet.skr_pods)):
                    say(f"{plane} tether-system, run by the pod runner:")
                    for line in runner.table().splitlines():
                        print(f"    {line}", flush=True)
                scenario(fleet)
                if args.once:
                    say("scenario done (--once): stopping")
                    return 0
                wait(fleet)
            finally:
                fleet.stop()
    except KeyboardInterrupt:
        say("stopping")
    finally:
        if args.once:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def scenario(fleet: deployed.Fleet) -> None:
    skr_api, kcp_api = fleet.skr.api_client(), fleet.kcp.api_client()
    score, custom = client.CoreV1Api(skr_api), client.CustomObjectsApi(kcp_api)
    score.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="demo")))

    def stored() -> dict[str, Any] | None:
        name = records.object_name(records.Key(RUNTIME_ID, "configuration", "demo", "app-config"))
        try:
            obj: dict[str, Any] = custom.get_namespaced_custom_object(
                apitypes.RUNTIME_CONFIGMAPS.group,
                apitypes.RUNTIME_CONFIGMAPS.version,
                RECORDS_NS,
                apitypes.RUNTIME_CONFIGMAPS.plural,
                name,
            )
        except client.ApiException:
            return None
        return obj

    t = time.monotonic()
    cm = score.create_namespaced_config_map(
        "demo",
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(
                name="app-config", labels={"tether.kyma-project.io/configuration": "true"}
            ),
            data={"greeting": "hello"},
        ),
    )
    rv = cm.metadata.resource_version
    wait_for(
        "the change in the KCP", lambda: (s := stored()) and s["spec"]["resourceVersion"] == rv
    )
    say(
        f"SKR ConfigMap demo/app-config created (rv {rv}) -> stored in the KCP as "
        f"{apitypes.RUNTIME_CONFIGMAP_KIND} in {time.monotonic() - t:.2f}s "
        "(through the installed webhook)"
    )
    t = time.monotonic()
    cm = score.patch_namespaced_config_map("app-config", "demo", {"data": {"greeting": "hi"}})
    rv = cm.metadata.resource_version
    wait_for(
        "the update in the KCP", lambda: (s := stored()) and s["spec"]["resourceVersion"] == rv
    )
    say(
        f"updated (rv {rv}) -> KCP holds data {stored()['spec']['data']} after "
        f"{time.monotonic() - t:.2f}s"
    )  # type: ignore[index]
    score.delete_namespaced_config_map("app-config", "demo")
    wait_for("the tombstone in the KCP", lambda: (s := stored()) and s["spec"]["deleted"])
    say("deleted -> the KCP holds a tombstone")

    injection(fleet, score, custom)
    canary(fleet)

    def mapping_ready() -> bool:
        m = custom.get_namespaced_custom_object(
            "tether.kyma-project.io", "v1alpha1", KCP_NS, "compassmappings", deployed.KYMA
        )
        return bool((m.get("status") or {}).get("state") == "Ready")

    wait_for("the Compass mapping to be Ready", mapping_ready, timeout=90)
    sec = score.read_namespaced_secret("compass-agent-configuration", "kyma-system")
    keys = sorted((sec.data or {}).keys())
    runtime = base64.b64decode(sec.data["RUNTIME_ID"]).decode()
    say(
        f"Compass: Kyma {deployed.KYMA} registered as Director runtime {runtime}; Secret "
        f"kyma-system/compass-agent-configuration in the runtime has {keys} (token not shown)"
    )
    skr_api.close()
    kcp_api.close()
    token = deployed.operator_token(fleet.kcp)
    ip, port = deployed.admin_address(fleet)
    host, ca = deployed.ADMIN_HOST, fleet.work / "kcp-ca.crt"
    token_file = fleet.work / "operator.token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    say(f"admin pages: https://{host}:{port}/fleet (served at {ip}:{port}; CA {ca})")
    say(
        f"  operator token (ServiceAccount tether-system/tether-operator, ClusterRole "
        f"tether-admin-viewer) in {token_file}:"
    )
    print(token, flush=True)
    say(
        f'  curl --cacert {ca} --resolve {host}:{port}:{ip} -H "Authorization: Bearer $(cat '
        f'{token_file})" https://{host}:{port}/fleet'
    )
    say(
        f"  browser: chromium --host-resolver-rules='MAP {host} {ip}' "
        f"--ignore-certificate-errors https://{host}:{port}/login  (paste the token)"
    )
    say(f"  terminal: tether status --kubeconfig {fleet.kcp.kubeconfig}")
    kubectl = str(controlplane.binaries() / "kubectl")
    print(
        json.dumps(
            {
                "skr_kubeconfig": str(fleet.skr.kubeconfig),
                "kcp_kubeconfig": str(fleet.kcp.kubeconfig),
                "kubectl": kubectl,
                "director": fleet.director_url,
                "work": str(fleet.work),
            },
            indent=1,
        ),
        flush=True,
    )


def injection(
    fleet: deployed.Fleet, score: client.CoreV1Api, custom: client.CustomObjectsApi
) -> None:
    """The example module (its CRD, the platform team's write grant, its Watch with inject and
    the Watch's storage namespace with its reader Role) applied with kubectl; a labelled
    ConfigMap in the runtime reaches the runtime's Sample CR in the KCP."""
    kubectl = str(controlplane.binaries() / "kubectl")
    say(f"KCP: {kubectl} apply -f manifests/examples/injector/... (the example module, its Watch)")
    deployed.kubectl(fleet.kcp, "apply", "-f", str(EXAMPLES / "sample-crd.yaml"))
    deployed.kubectl(
        fleet.kcp,
        "wait",
        "--for=condition=Established",
        "crd/samples.sample.kyma-project.io",
        "--timeout=60s",
    )
    for name in ("sample-writer.yaml", "records.yaml", "watch.yaml"):
        deployed.kubectl(fleet.kcp, "apply", "-f", str(EXAMPLES / name))
    custom.create_namespaced_custom_object(
        *SAMPLES,
        {
            "apiVersion": "sample.kyma-project.io/v1",
            "kind": "Sample",
            "metadata": {"name": SAMPLE, "labels": {apitypes.RUNTIME_ID_LABEL: RUNTIME_ID}},
            "spec": {"replicas": 1},
        },
    )
    score.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="sample-system")))
    t = time.monotonic()
    score.create_namespaced_config_map(
        "sample-system",
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(
                name="sample-settings", labels={"sample.kyma-project.io/configuration": "true"}
            ),
            data={"color": "blue"},
        ),
    )
    touches = iter(range(10**6))

    def configuration() -> Any:
        obj = cast(dict[str, Any], custom.get_namespaced_custom_object(*SAMPLES, SAMPLE))
        return (obj.get("spec") or {}).get("configuration")

    def injected() -> Any:
        """Until the enroller has rendered the new Watch into the runtime, a change is the
        poller's (60 s): touch the ConfigMap every few seconds."""
        conf = configuration()
        if conf is None and next(touches) % 15 == 14:
            score.patch_namespaced_config_map(
                "sample-settings",
                "sample-system",
                {"metadata": {"annotations": {"touched": str(time.time())}}},
            )
        return conf

    conf = wait_for("the value in the Sample CR", injected, timeout=120)
    say(
        f"SKR ConfigMap sample-system/sample-settings created -> the injector wrote {conf} into "
        f"Sample {KCP_NS}/{SAMPLE} spec.configuration after {time.monotonic() - t:.1f}s (the new "
        "Watch reached the runtime first)"
    )
    t = time.monotonic()
    score.patch_namespaced_config_map(
        "sample-settings", "sample-system", {"data": {"color": "green"}}
    )
    wait_for("the edit in the Sample CR", lambda: (configuration() or {}).get("color") == "green")
    say(f"edited -> Sample CR holds color=green after {time.monotonic() - t:.2f}s")


def canary(fleet: deployed.Fleet) -> None:
    """The optional delivery canary, from manifests/kcp/canary with the overlay an operator
    writes (the probe runtime named, its kubeconfig Secret in the canary's Role), run by the
    pod runner under its ServiceAccount: its metrics show a probe whose nonce reached the
    KCP (the shipped Watch `configuration`: stage stored)."""
    cdir = canaryenv.render_overlay(
        fleet.work / "overlay-kcp-canary",
        RUNTIME_ID,
        deployed.KYMA,
        {"TETHER_CANARY_INTERVAL_SECONDS": "15", "TETHER_CANARY_TIMEOUT_SECONDS": "10"},
    )
    deployed.kubectl(fleet.kcp, "apply", "-k", str(cdir))
    say(f"KCP: kubectl apply -k {cdir} (the optional delivery canary, probing {RUNTIME_ID})")
    fleet.kcp_pods.wait_available(120, names=["tether-canary"])
    for line in fleet.kcp_pods.table().splitlines():
        if "tether-canary" in line:
            print(f"    {line}", flush=True)
    ip = fleet.kcp_pods.pods_of("tether-canary")[0].ip

    def metric(name: str, **labels: str) -> float:
        return canaryenv.pod_metric(ip, name, **labels)

    wait_for(
        "a successful canary probe",
        lambda: metric("tether_canary_probes_total", stage="stored", outcome="ok") >= 1,
        timeout=90,
    )
    ok = metric("tether_canary_probes_total", stage="stored", outcome="ok")
    failed = sum(
        metric("tether_canary_probes_total", stage="stored", outcome=o)
        for o in ("timeout", "write_failed", "read_failed")
    )
    seconds = metric("tether_canary_seconds_sum", stage="stored") / max(
        1.0, metric("tether_canary_seconds_count", stage="stored")
    )
    since = time.time() - metric("tether_canary_last_success_timestamp_seconds", stage="stored")
    say(
        f"canary metrics (http://{ip}:9093/metrics): tether_canary_probes_total"
        f'{{stage="stored",outcome="ok"}} {ok:.0f}, failed {failed:.0f}; '
        f"write to stored {seconds:.2f}s on average; last success {since:.0f}s ago"
    )


def wait(fleet: deployed.Fleet) -> None:
    kubectl = str(controlplane.binaries() / "kubectl")
    say(
        f"try:  {kubectl} --kubeconfig {fleet.skr.kubeconfig} "
        "-n demo create configmap x --from-literal=a=b"
    )
    say(
        f"      {kubectl} --kubeconfig {fleet.skr.kubeconfig} -n demo label configmap x "
        "tether.kyma-project.io/configuration=true   # the shipped Watch's opt-in (docs/watches.md)"
    )
    say(
        f"then: {kubectl} --kubeconfig {fleet.kcp.kubeconfig} -n {RECORDS_NS} get runtimeconfigmaps"
    )
    say(f"      tether records {RUNTIME_ID} --kubeconfig {fleet.kcp.kubeconfig}")
    say(
        f"      {kubectl} --kubeconfig {fleet.kcp.kubeconfig} "
        f"-n {KCP_NS} get samples {SAMPLE} -o yaml"
    )
    say(f"pods: {kubectl} --kubeconfig {fleet.kcp.kubeconfig} -n tether-system get deployments")
    ip = fleet.kcp_pods.pods_of("tether-canary")[0].ip
    say(f"canary: curl -s http://{ip}:9093/metrics | grep ^tether_canary")
    say("Ctrl-C stops everything")
    stop = False

    def on_term(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    while not stop:
        time.sleep(1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
