"""What the operational tests check on an installed fleet (``deployed.Fleet``), whichever
overlay installed it: ``tests/deployed/test_deployed.py`` (the local overlays, Tether's own
CA) and ``tests/deployed/test_cert_manager_deployed.py`` (the cert-manager overlay) each run
these scenarios as tests of their own, on their module's fleet, in this order; the last
unenrolls the runtime.

``stored``, ``configuration`` and ``create_configuration`` are a customer's ConfigMap marked
as configuration and its record in the KCP; ``flow`` makes changes at a steady pace and
times each one's arrival."""

from __future__ import annotations

import base64
import functools
import json
import os
import pathlib
import signal
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from kubernetes import client

from listener.storage import records
from testing import cgroups, deployed, overlays, podrunner, podspec, prometheus, watchenv
from tether.kube import apitypes

CUSTOMER_NS = "shop"
DEFAULT_WATCH = "configuration"  # manifests/kcp/watches: ConfigMaps labelled as configuration
DEFAULT_WATCH_STORAGE = "tether-configuration"  # its spec.storage.namespace (manifests/kcp/watches)
CERT_SECONDS = 90  # renewed at two thirds: 60 s after issue


def stored(
    fleet: deployed.Fleet, namespace: str, name: str, watch: str = DEFAULT_WATCH
) -> dict[str, Any] | None:
    # the shipped Watch stores in its own namespace (spec.storage), the test's Watches in kcp-system
    where = DEFAULT_WATCH_STORAGE if watch == DEFAULT_WATCH else deployed.KCP_NS
    done = deployed.kubectl(
        fleet.kcp,
        "get",
        apitypes.RUNTIME_CONFIGMAPS.plural,
        "-n",
        where,
        "-o",
        "json",
        records.object_name(records.Key(deployed.RUNTIME_ID, watch, namespace, name)),
        check=False,
    )
    return json.loads(done.stdout) if done.returncode == 0 else None


def configuration(name: str, data: dict[str, str], namespace: str = CUSTOMER_NS) -> dict[str, Any]:
    """A ConfigMap its owner marks as configuration: what the shipped Watch covers."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {watchenv.OPT_IN_LABEL: "true"},
        },
        "data": data,
    }


def create_configuration(fleet: deployed.Fleet, name: str, **data: str) -> None:
    """``kubectl create`` of a ConfigMap marked as configuration (the shipped Watch's label)."""
    manifest = fleet.work / f"configmap-{name}.json"
    manifest.write_text(json.dumps(configuration(name, data)))
    deployed.kubectl(fleet.skr, "create", "-f", str(manifest))


def every_deployment_runs_ready_under_its_own_service_account(fleet: deployed.Fleet) -> None:
    for plane, runner, names in (
        (
            fleet.kcp,
            fleet.kcp_pods,
            ["tether-listener", "tether-janitor", "tether-compass", "tether-enroller"],
        ),
        (fleet.skr, fleet.skr_pods, ["tether-webhook", "tether-poller"]),
    ):
        # the status the runner wrote back is what kubectl waits on
        done = deployed.kubectl(
            plane,
            "wait",
            "--for=condition=Available",
            "deployment",
            "--all",
            "-n",
            overlays.NAMESPACE,
            "--timeout=60s",
        )
        assert all(f"deployment.apps/{n} condition met" in done.stdout for n in names), done.stdout
        accounts = set()
        for name in names:
            dep = json.loads(
                deployed.kubectl(
                    plane, "get", "deployment", name, "-n", overlays.NAMESPACE, "-o", "json"
                ).stdout
            )
            replicas = 1 if name == "tether-janitor" else 2  # the janitor: one, leader-elected
            assert dep["status"]["readyReplicas"] == dep["spec"]["replicas"] == replicas
            sa = dep["spec"]["template"]["spec"]["serviceAccountName"]
            pods = runner.pods_of(name)
            assert len(pods) == replicas and {p.facts.service_account for p in pods} == {sa}
            accounts.add(sa)
            # the mounted token is the TokenRequest API's, for exactly that ServiceAccount
            token = (pods[0].dir / "volumes" / "kube-api-access" / "token").read_text()
            review: Any = client.AuthenticationV1Api(plane.api_client()).create_token_review(
                client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token))
            )
            assert review.status.authenticated
            assert review.status.user.username == f"system:serviceaccount:{overlays.NAMESPACE}:{sa}"
        assert len(accounts) == len(names)  # each part its own
    done = deployed.kubectl(
        fleet.kcp,
        "wait",
        "--for=condition=Ready",
        f"runtimeenrollment/{deployed.KYMA}",
        "-n",
        deployed.KCP_NS,
        "--timeout=60s",
    )
    assert "condition met" in done.stdout
    row = deployed.kubectl(fleet.kcp, "get", "runtimeenrollments", "-n", deployed.KCP_NS).stdout
    assert deployed.RUNTIME_ID in row and "True" in row  # the printer columns
    table = fleet.kcp_pods.table() + fleet.skr_pods.table()
    assert_limits_enforced(fleet, table)


def assert_limits_enforced(fleet: deployed.Fleet, table: str) -> None:
    """Each container runs in its own cgroup with its manifest's limits (read back from the
    cgroup's files), as a kubelet would run it; without writable cgroups the test fails,
    unless TETHER_PODRUNNER_LIMITS=off says so on purpose (testing/cgroups.py)."""
    support = fleet.kcp_pods.limits
    if os.environ.get(cgroups.ENV, "").lower() == "off":
        assert f"container 'webhook'.resources: not enforced ({cgroups.ENV}=off)" in table
        return
    assert support.enforced, (
        f"limits not enforced: {support.reason} (set {cgroups.ENV}=off to run without)"
    )
    assert (
        "note: deployment tether-webhook container 'webhook'.resources: enforced (cgroup v" in table
    )
    for runner in (fleet.kcp_pods, fleet.skr_pods):
        for pod in list(runner.pods.values()):
            for c in pod.containers:
                limits = cgroups.limits_of(c.spec)
                assert c.group is not None and c.popen is not None, f"{pod.name}/{c.name}"
                assert c.popen.pid in c.group.pids(), f"{pod.name}/{c.name} not in its cgroup"
                if limits.memory is not None:
                    memory = "memory.limit_in_bytes" if support.version == 1 else "memory.max"
                    assert c.group.read(memory) == str(limits.memory), f"{pod.name}/{c.name}"
                assert c.last_reason != "OOMKilled", f"{pod.name}/{c.name} OOM-killed\n{table}"


def a_configmap_change_made_with_kubectl_arrives_in_the_kcp(
    fleet: deployed.Fleet, tmp_path: pathlib.Path
) -> None:
    create_configuration(fleet, "checkout", currency="EUR")
    rec = fleet.wait_for("the record in the KCP", lambda: stored(fleet, CUSTOMER_NS, "checkout"))
    assert rec["spec"]["data"] == {"currency": "EUR"} and rec["spec"]["source"] == "webhook"
    manifest = tmp_path / "cm.yaml"
    manifest.write_text(yaml.safe_dump(configuration("checkout", {"currency": "CHF"})))
    deployed.kubectl(fleet.skr, "apply", "-f", str(manifest))
    fleet.wait_for(
        "the update in the KCP",
        lambda: (
            (r := stored(fleet, CUSTOMER_NS, "checkout"))
            and r["spec"]["data"] == {"currency": "CHF"}
        ),
    )
    deployed.kubectl(fleet.skr, "-n", CUSTOMER_NS, "delete", "configmap", "checkout")
    fleet.wait_for(
        "the tombstone in the KCP",
        lambda: (r := stored(fleet, CUSTOMER_NS, "checkout")) and r["spec"]["deleted"],
    )


def admin_get(
    fleet: deployed.Fleet, path: str, token: str | None
) -> tuple[int, dict[str, str], str]:
    """GET a page of the admin Service, its certificate verified for its name (the local
    overlay's CA), as a browser on this machine would reach it."""
    ip, port = deployed.admin_address(fleet)
    ctx = ssl.create_default_context(cafile=str(fleet.work / "kcp-ca.crt"))
    with (
        socket.create_connection((ip, port), timeout=10) as raw,
        ctx.wrap_socket(raw, server_hostname=deployed.ADMIN_HOST) as tls,
    ):
        auth = f"Authorization: Bearer {token}\r\n" if token else ""
        tls.sendall(
            f"GET {path} HTTP/1.1\r\nHost: {deployed.ADMIN_HOST}\r\n{auth}"
            "Connection: close\r\n\r\n".encode()
        )
        data = b""
        while chunk := tls.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])}
    return int(lines[0].split()[1]), headers, body.decode(errors="replace")


def the_admin_pages_show_the_runtime_to_an_operator_and_refuse_others(
    fleet: deployed.Fleet,
) -> None:
    token = deployed.operator_token(fleet.kcp)
    status, headers, _ = admin_get(fleet, "/fleet", None)
    assert status == 303 and headers["location"].startswith("/login")
    # a valid token whose ServiceAccount RBAC does not grant the pages: 403
    other = deployed.operator_token(fleet.kcp, "someone-else")
    deployed.kubectl(fleet.kcp, "delete", "clusterrolebinding", "someone-else-admin-viewer")
    deadline = time.monotonic() + 60
    while (status := admin_get(fleet, "/fleet", other)[0]) != 403 and time.monotonic() < deadline:
        time.sleep(1)  # the admin part reuses an allowed answer for up to 30 s
    assert status == 403
    create_configuration(fleet, "seen-by-admin", k="v")

    def runtime_page() -> str | None:
        code, _, body = admin_get(fleet, f"/runtimes/{deployed.RUNTIME_ID}", token)
        return body if code == 200 and "seen-by-admin" in body else None

    # the listener merges the record into the runtime's RuntimeDelivery, the admin part lists it
    # merged by the listener after a later request of the runtime (at most once per 15 s per
    # worker; the poller heartbeats every 60 s), then read fresh by the runtime page
    body = fleet.wait_for("the record on the runtime page", runtime_page, timeout=180)
    assert "<polyline" in body or "<circle" in body  # the lag chart has a point
    code, _, page = admin_get(fleet, "/fleet", token)
    assert code == 200 and deployed.RUNTIME_ID in page
    row = page.split(f'data-runtime="{deployed.RUNTIME_ID}"', 1)[1].split("</tr>", 1)[0]
    assert "<td>Ready</td>" in row and "never" not in row.split("</td>")[4]  # heartbeat seen
    code, _, parts_page = admin_get(fleet, "/parts", token)
    assert code == 200 and 'data-part="tether-listener"' in parts_page
    assert "2/2" in parts_page.split('data-part="tether-listener"', 1)[1].split("</tr>", 1)[0]


def compass_registers_the_runtime_with_the_director(fleet: deployed.Fleet) -> None:
    def ready() -> bool:
        done = deployed.kubectl(
            fleet.kcp,
            "get",
            "compassmappings",
            deployed.KYMA,
            "-n",
            deployed.KCP_NS,
            "-o",
            "json",
            check=False,
        )
        return (
            done.returncode == 0
            and (json.loads(done.stdout).get("status") or {}).get("state") == "Ready"
        )

    fleet.wait_for("the Compass mapping Ready", ready, timeout=90)
    secret = json.loads(
        deployed.kubectl(
            fleet.skr,
            "get",
            "secret",
            "compass-agent-configuration",
            "-n",
            "kyma-system",
            "-o",
            "json",
        ).stdout
    )
    assert base64.b64decode(secret["data"]["RUNTIME_ID"]).decode()
    # exactly one compass replica holds the Lease and acts
    lease = json.loads(
        deployed.kubectl(
            fleet.kcp, "get", "lease", "tether-compass", "-n", overlays.NAMESPACE, "-o", "json"
        ).stdout
    )
    holders = {p.name for p in fleet.kcp_pods.pods_of("tether-compass")}
    assert (
        lease["spec"]["holderIdentity"].rsplit("_", 1)[0] in holders
    )  # HOSTNAME_PID: a pod's name


KCP_JOBS = (
    "tether-listener",
    "tether-janitor",
    "tether-compass",
    "tether-enroller",
    "tether-admin",
)
ALERT_FOR_SECONDS = 5  # the shipped rules' for: durations (5m to 30m), shortened to see them fire


def by_poller_without_the_webhook(fleet: deployed.Fleet, attempts: int = 3) -> str:
    """Scale the runtime's webhook to zero, wait until its pods have stopped (one still
    terminating forwards what it admits), and create 60 ConfigMaps at once; the name of the
    last. The enroller re-applies its bundle (webhook replicas: 2) at every certificate
    renewal, every minute with this fleet's 90 s certificates: when the webhook came back
    while they were created (seen in CI on a loaded machine, when 60 kubectl calls took a
    minute), scale it down again and create another 60."""
    with fleet.skr.api_client() as api:
        core = client.CoreV1Api(api)
        for attempt in range(attempts):
            deployed.kubectl(
                fleet.skr,
                "-n",
                overlays.NAMESPACE,
                "scale",
                "deployment",
                "tether-webhook",
                "--replicas=0",
            )
            fleet.skr_pods.wait_stopped("tether-webhook", 90)
            names = [f"by-poller-{attempt}-{i}" for i in range(60)]
            for name in names:
                core.create_namespaced_config_map(
                    CUSTOMER_NS,
                    client.V1ConfigMap(
                        metadata=client.V1ObjectMeta(
                            name=name, labels={watchenv.OPT_IN_LABEL: "true"}
                        ),
                        data={"k": "v"},
                    ),
                )
            if not any(
                c.running for p in fleet.skr_pods.pods_of("tether-webhook") for c in p.containers
            ):
                return names[-1]
    raise AssertionError(f"the enroller brought the webhook back during each of {attempts} tries")


def a_real_prometheus_alerts_for_a_broken_webhook_path_and_a_stopped_listener(
    fleet: deployed.Fleet,
) -> None:
    """Prometheus (the upstream server, hack/build-prometheus.sh) with the shipped scrape
    configuration (Kubernetes service discovery of the pods the runner publishes, through
    the KCP's kubeconfig) and the shipped KCP rules (their for: shortened to 5 s): every KCP
    part is scraped; the runtime whose webhook is gone delivers only through its poller and
    TetherRuntimeWebhookPathFailing fires naming it; with no listener pod left
    TetherListenerDown fires, and resolves when the listener is back."""
    server = prometheus.Server(
        fleet.work / "prometheus",
        prometheus.scrape_jobs(fleet.kcp.kubeconfig, KCP_JOBS),
        prometheus.rule_groups(prometheus.KCP_RULES, ALERT_FOR_SECONDS),
    )
    try:
        for job in KCP_JOBS:
            server.wait(
                functools.partial(server.query, f'up{{job="{job}"}} == 1'), f"{job} scraped", 90
            )
        server.wait(
            lambda: [
                r
                for r in server.query('count(up{job="tether-listener"} == 1)')
                if float(r["value"][1]) == 2
            ],
            "both listener pods scraped",
            60,
        )
        # before the first scrapes every absent() held: an alert may have fired then (5 s);
        # with every part up none stays firing
        server.wait(
            lambda: server.firing("TetherListenerDown") is None,
            "no TetherListenerDown while the listener is up",
            30,
        )
        server.wait(
            lambda: (
                server.firing("TetherRuntimeWebhookPathFailing", runtime_id=deployed.RUNTIME_ID)
                is None
            ),
            "no TetherRuntimeWebhookPathFailing while the webhook delivers",
            30,
        )

        # the runtime's webhook gone: its changes reach the KCP through the poller only
        last = by_poller_without_the_webhook(fleet)
        fleet.wait_for(
            "the poller's records in the KCP",
            lambda: (r := stored(fleet, CUSTOMER_NS, last)) and r["spec"]["source"] == "poller",
            timeout=150,
        )
        alert = server.wait(
            lambda: server.firing(
                "TetherRuntimeWebhookPathFailing", runtime_id=deployed.RUNTIME_ID
            ),
            "TetherRuntimeWebhookPathFailing for the runtime",
            120,
        )
        assert deployed.RUNTIME_ID in alert["annotations"]["summary"]
        assert alert["annotations"]["runbook_url"].startswith("https://")
        deployed.kubectl(
            fleet.skr,
            "-n",
            overlays.NAMESPACE,
            "scale",
            "deployment",
            "tether-webhook",
            "--replicas=2",
        )
        fleet.skr_pods.wait_available(120, ["tether-webhook"])

        # no listener pod left: the part is gone, not just failing
        deployed.kubectl(
            fleet.kcp,
            "-n",
            overlays.NAMESPACE,
            "scale",
            "deployment",
            "tether-listener",
            "--replicas=0",
        )
        try:
            down = server.wait(
                lambda: server.firing("TetherListenerDown"), "TetherListenerDown", 90
            )
            assert down["labels"]["severity"] == "critical"
        finally:
            deployed.kubectl(
                fleet.kcp,
                "-n",
                overlays.NAMESPACE,
                "scale",
                "deployment",
                "tether-listener",
                "--replicas=2",
            )
            fleet.kcp_pods.wait_available(120, ["tether-listener"])
        server.wait(
            lambda: server.firing("TetherListenerDown") is None, "TetherListenerDown resolved", 90
        )
    finally:
        server.stop()


def a_verb_removed_from_the_listeners_role_fails_the_delivery_until_restored(
    fleet: deployed.Fleet,
) -> None:
    """Without ``create`` on runtimeconfigmaps (its ClusterRole: records live in each Watch's
    storage namespace) the listener cannot persist a new object: the runtime's delivery is
    refused with 503 (retried), nothing is stored; restored, the webhook's retry lands it."""
    records_role = ("clusterrole", "tether-listener-records")
    role = json.loads(deployed.kubectl(fleet.kcp, "get", *records_role, "-o", "json").stdout)
    rules = role["rules"]
    crd_rule = next(r for r in rules if r["resources"] == ["runtimeconfigmaps"])
    assert "create" in crd_rule["verbs"]
    crd_rule["verbs"] = [v for v in crd_rule["verbs"] if v != "create"]
    patch = json.dumps({"rules": rules})
    deployed.kubectl(fleet.kcp, "patch", *records_role, "--type=merge", "-p", patch)
    try:
        create_configuration(fleet, "denied", k="v")
        fleet.wait_for(
            "the listener's refusal in its log",
            lambda: (
                "KCP API forbidden during persist"
                in fleet.kcp_pods.logs("tether-listener", "listener")
            ),
        )
        assert stored(fleet, CUSTOMER_NS, "denied") is None
    finally:
        crd_rule["verbs"].append("create")
        deployed.kubectl(
            fleet.kcp, "patch", *records_role, "--type=merge", "-p", json.dumps({"rules": rules})
        )
    fleet.wait_for(
        "the retried delivery after the verb is back",
        lambda: stored(fleet, CUSTOMER_NS, "denied"),
        timeout=90,
    )


def a_crashed_container_is_restarted_and_ready_again(fleet: deployed.Fleet) -> None:
    pod = fleet.skr_pods.pods_of("tether-webhook")[0]
    before = pod.containers[0].restarts
    fleet.skr_pods.kill("tether-webhook", "webhook", signal.SIGKILL)
    fleet.wait_for("the restart", lambda: pod.containers[0].restarts > before)
    fleet.wait_for("the webhook ready again", lambda: pod.ready, timeout=90)
    fleet.skr_pods.wait_available(60)


def the_pod_runner_refuses_what_it_cannot_honour(fleet: deployed.Fleet) -> None:
    """A manifest field outside the runner's support is an error naming it, never skipped."""
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "odd", "namespace": "default"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "odd"}},
            "template": {
                "metadata": {"labels": {"app": "odd"}},
                "spec": {
                    "hostNetwork": True,
                    "containers": [{"name": "c", "image": "tether:0.1.0"}],
                },
            },
        },
    }
    client.AppsV1Api(fleet.skr.api_client()).create_namespaced_deployment("default", body)  # type: ignore[arg-type]
    with pytest.raises(
        podspec.Unsupported, match=r"deployment odd\.spec\.hostNetwork is not supported"
    ):
        podrunner.PodRunner(fleet.skr, "default", fleet.work).start()


def flow(
    fleet: deployed.Fleet, prefix: str, done: Callable[[], bool], seconds: float
) -> list[float]:
    """A ConfigMap created every two seconds (at least five) until ``done()`` or ``seconds``
    pass, each waited for in the KCP; the seconds each took to arrive."""
    lags: list[float] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if done() and len(lags) >= 5:  # asked every time: done() may record what it sees
            break
        name = f"{prefix}-{len(lags) + 1}"
        t0 = time.monotonic()
        create_configuration(fleet, name, n=str(len(lags)))
        fleet.wait_for(
            f"{name} in the KCP", functools.partial(stored, fleet, CUSTOMER_NS, name), timeout=30
        )
        lags.append(time.monotonic() - t0)
        time.sleep(max(0.0, 2.0 - (time.monotonic() - t0)))
    return lags


def changes_keep_arriving_while_the_certificates_are_renewed(fleet: deployed.Fleet) -> None:
    """Changes made every two seconds across a renewal of both certificates (lifetime 90 s):
    each arrives in the KCP, none later than one retry."""

    def serial() -> str:
        s = deployed.runtime_secret(fleet)
        return str(s["metadata"]["annotations"]["tether.kyma-project.io/client-serial"])

    first = serial()
    lags = flow(fleet, "flow", lambda: serial() != first, CERT_SECONDS + 20)
    assert serial() != first, "no renewal happened"
    assert "Renewed" in deployed.kubectl(fleet.kcp, "get", "events", "-n", deployed.KCP_NS).stdout
    # one retry of the webhook's forwarder is at most a few seconds; the poller (60 s) never needed
    assert max(lags) < 15, lags
    assert all(
        stored(fleet, CUSTOMER_NS, f"flow-{n}")["spec"]["source"] == "webhook"  # type: ignore[index]
        for n in range(1, len(lags) + 1)
    )


def a_deleted_kyma_cr_leaves_a_clean_runtime_whose_certificate_the_listener_refuses(
    fleet: deployed.Fleet, tmp_path: pathlib.Path
) -> None:
    """Last in this module: the runtime is unenrolled."""
    secret = deployed.runtime_secret(fleet)
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes(base64.b64decode(secret["data"]["tls.crt"]))
    key.write_bytes(base64.b64decode(secret["data"]["tls.key"]))
    listener_ca = json.loads(
        deployed.kubectl(
            fleet.kcp,
            "get",
            "configmap",
            "tether-listener-ca",
            "-n",
            overlays.NAMESPACE,
            "-o",
            "json",
        ).stdout
    )["data"]["ca.crt"]
    ip, port = fleet.kcp_pods.service_address("tether-listener", "https")

    def post() -> int:
        ctx = ssl.create_default_context(cadata=listener_ca)
        ctx.load_cert_chain(cert, key)
        with (
            socket.create_connection((ip, port), timeout=10) as raw,
            ctx.wrap_socket(raw, server_hostname=overlays.LISTENER_HOST) as s,
        ):
            body = b'{"items": []}'
            s.sendall(
                b"POST /v1/runtimes/"
                + deployed.RUNTIME_ID.encode()
                + b"/changes HTTP/1.1\r\nHost: "
                + overlays.LISTENER_HOST.encode()
                + b"\r\nContent-Type: application/json\r\n"
                b"Content-Length: "
                + str(len(body)).encode()
                + b"\r\nConnection: close\r\n\r\n"
                + body
            )
            return int(s.recv(64).split(b" ")[1])

    assert post() == 400  # authenticated: only the empty batch is wrong
    deployed.kubectl(
        fleet.kcp, "delete", "kyma", deployed.KYMA, "-n", deployed.KCP_NS, "--wait=false"
    )
    fleet.wait_for(
        "the Kyma CR gone (its finalizer released after the removal)",
        lambda: (
            deployed.kubectl(
                fleet.kcp, "get", "kyma", deployed.KYMA, "-n", deployed.KCP_NS, check=False
            ).returncode
            != 0
        ),
        timeout=90,
    )
    left = deployed.kubectl(
        fleet.skr,
        "get",
        "deployments,secrets,serviceaccounts",
        "-n",
        overlays.NAMESPACE,
        "-l",
        "app.kubernetes.io/managed-by=tether-enroller",
        "-o",
        "name",
    ).stdout
    assert left.strip() == ""
    hooks = deployed.kubectl(
        fleet.skr, "get", "validatingwebhookconfigurations", "-o", "name"
    ).stdout
    assert "tether-configmaps" not in hooks
    assert deployed.enrollment(fleet.kcp) is None
    # the runtime's heartbeat Lease was written where the listener's Role allows it, nowhere
    # else (its removal is the janitor's, after the orphan grace period)
    beats = deployed.kubectl(
        fleet.kcp,
        "get",
        "leases",
        "-A",
        "-l",
        "tether.kyma-project.io/heartbeat=true",
        "-o",
        "jsonpath={range .items[*]}{.metadata.namespace}{'\\n'}{end}",
    ).stdout
    assert beats.split() == ["tether-heartbeats"], beats
    # no Kyma CR carries the runtime ID any more (the listener caches lookups for 10 s)
    fleet.wait_for("the listener's 403", lambda: post() == 403, timeout=30)
