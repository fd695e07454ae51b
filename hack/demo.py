"""The whole of Tether on this machine: `make demo`.

Starts two real control planes (an SKR runtime and the KCP), a Director stand-in, and every
part of Tether as the processes they are in production (listener and webhook under
gunicorn with TLS, poller and compass leader-elected), wires them with freshly issued
certificates, then shows a ConfigMap change travel from the runtime into the KCP and the
runtime get its Compass registration and one-time token Secret.

    .venv/bin/python hack/demo.py            # runs until Ctrl-C
    .venv/bin/python hack/demo.py --once     # the scenario, then stop (a smoke check)

Logs of every process are in the work folder printed at the start.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import pathlib
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import yaml
from kubernetes import client

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from common import certs  # noqa: E402
from compass import model  # noqa: E402
from listener import records  # noqa: E402
from testing import controlplane  # noqa: E402

KCP_NS = "kcp-system"
RUNTIME_ID = "demo-runtime-1"
DOMAIN = "c-demo1.kyma.local"
KYMA = "demo-kyma"
CRDS = [controlplane.KYMA_CRD,
        REPO / "manifests" / "kcp" / "crds" / "tether.kyma-project.io_runtimeconfigmaps.yaml",
        REPO / "manifests" / "kcp" / "compass" / "crd.yaml"]
VWC = REPO / "manifests" / "skr" / "webhook" / "validatingwebhookconfiguration.yaml"


def say(msg: str) -> None:
    print(f"[demo] {msg}", flush=True)


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            got = probe()
        except (client.ApiException, urllib.error.URLError, OSError):
            got = None
        if got:
            return got
        time.sleep(0.2)
    raise SystemExit(f"[demo] timed out waiting for {what}")


class Proc:
    """One Tether process with its log file."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], work: pathlib.Path) -> None:
        self.name, self.log = name, work / f"{name}.log"
        with open(self.log, "ab") as out:
            self.popen = subprocess.Popen(args, env={**os.environ, **env}, cwd=REPO, stdout=out,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          start_new_session=True,
                                          preexec_fn=controlplane.die_with_parent())

    def alive(self) -> None:
        if self.popen.poll() is not None:
            tail = self.log.read_text(errors="replace")[-3000:]
            raise SystemExit(f"[demo] {self.name} exited with {self.popen.returncode}:\n{tail}")

    def stop(self) -> None:
        controlplane.stop_group(self.popen, timeout=20)


def https_ok(url: str, ctx: ssl.SSLContext) -> bool:
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=2) as r:
            return bool(r.status == 200)
    except urllib.error.HTTPError:
        return False


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def tether(part: str) -> list[str]:
    return [sys.executable, "-m", "common.cli", part]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--once", action="store_true", help="run the scenario, then stop everything")
    args = ap.parse_args(argv)
    work = pathlib.Path(tempfile.mkdtemp(prefix="tether-demo-"))
    say(f"work folder (logs, certificates): {work}")
    procs: list[Proc] = []
    t0 = time.monotonic()
    try:
        with controlplane.planes("skr", "kcp") as planes:
            skr, kcp = planes["skr"], planes["kcp"]
            say(f"{controlplane.kube_apiserver_version()}: planes ready in {time.monotonic() - t0:.1f}s")
            run(skr, kcp, work, procs, once=args.once)
    except KeyboardInterrupt:
        say("stopping")
    finally:
        for p in reversed(procs):
            p.stop()
        if args.once:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def run(skr: controlplane.ControlPlane, kcp: controlplane.ControlPlane, work: pathlib.Path,
        procs: list[Proc], *, once: bool) -> None:
    kubectl = str(controlplane.binaries() / "kubectl")
    kcp_api, skr_api = kcp.api_client(), skr.api_client()
    kcore, score = client.CoreV1Api(kcp_api), client.CoreV1Api(skr_api)
    custom = client.CustomObjectsApi(kcp_api)

    # -- the management plane: CRDs, namespaces, the Kyma CR and the runtime's kubeconfig
    controlplane.install_crds(kcp_api, *CRDS)
    for ns in (KCP_NS, "tether-system"):
        kcore.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    for ns in ("tether-system", "kyma-system", "demo"):
        score.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    custom.create_namespaced_custom_object("operator.kyma-project.io", "v1beta2", KCP_NS, "kymas", {
        "apiVersion": "operator.kyma-project.io/v1beta2", "kind": "Kyma",
        "metadata": {"name": KYMA, "annotations": {"skr-domain": DOMAIN}, "labels": {
            "kyma-project.io/runtime-id": RUNTIME_ID, model.GLOBAL_ACCOUNT: "ga-demo",
            model.SUBACCOUNT: "sa-demo", model.SHOOT_NAME: "c-demo1", model.INSTANCE_ID: "inst-demo",
            model.PLAN_ID: "plan-demo", model.PLAN_NAME: "azure"}},
        "spec": {"channel": "regular", "modules": [{"name": "application-connector"}]}})
    kcore.create_namespaced_secret(KCP_NS, client.V1Secret(
        metadata=client.V1ObjectMeta(name=f"kubeconfig-{KYMA}", labels={model.KYMA_NAME: KYMA}),
        data={"config": base64.b64encode(skr.kubeconfig.read_bytes()).decode()}))
    say(f"KCP: Kyma CR {KCP_NS}/{KYMA} (runtime {RUNTIME_ID}, skr-domain {DOMAIN})")

    # -- certificates: a KCP CA for the listener and runtime identities, one for the webhook
    ca = certs.CertificateAuthority.create("tether-demo-kcp-ca")
    ca.write(work / "kcp-ca.crt", work / "kcp-ca.key")
    ca.issue("tether-listener", dns_names=["localhost"], ip_addresses=["127.0.0.1"],
             server=True).write(work / "listener.crt", work / "listener.key")
    ca.issue(RUNTIME_ID, dns_names=[DOMAIN], client=True).write(work / "runtime.crt", work / "runtime.key")
    ca.issue("director", dns_names=["localhost"], ip_addresses=["127.0.0.1"],
             server=True).write(work / "director.crt", work / "director.key")
    wca = certs.CertificateAuthority.create("tether-demo-webhook-ca")
    wca.issue("tether-webhook", ip_addresses=["127.0.0.1"], server=True).write(
        work / "webhook.crt", work / "webhook.key")
    ctx = certs.client_context(work / "kcp-ca.crt", work / "runtime.crt", work / "runtime.key")
    wctx = ssl.create_default_context(cadata=wca.cert_pem.decode())

    # -- the Director stand-in
    director_port, secret = controlplane.free_port(), secrets.token_urlsafe(24)
    secret_file = work / "director-client-secret"
    fd = os.open(secret_file, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, secret.encode())
    os.close(fd)
    director = Proc("director", [sys.executable, "-m", "standins.director", "--port", str(director_port),
                                 "--cert", str(work / "director.crt"), "--key", str(work / "director.key"),
                                 f"--client-secret={secret}"], {}, work)
    procs.append(director)
    director_url = f"https://127.0.0.1:{director_port}"
    wait_for("the Director stand-in", lambda: director.alive() or https_ok(director_url + "/healthz", ctx) or
             _port_open(director_port))

    # -- the listener (KCP)
    lport, lops = controlplane.free_port(), controlplane.free_port()
    listener_url = f"https://127.0.0.1:{lport}"
    procs.append(Proc("listener", tether("listener"), {
        "TETHER_LISTENER_BIND": f"127.0.0.1:{lport}", "TETHER_LISTENER_WORKERS": "2",
        "TETHER_LISTENER_OPS_BIND": f"127.0.0.1:{lops}",
        "TETHER_LISTENER_TLS_CERT_FILE": str(work / "listener.crt"),
        "TETHER_LISTENER_TLS_KEY_FILE": str(work / "listener.key"),
        "TETHER_LISTENER_CLIENT_CA_FILE": str(work / "kcp-ca.crt"),
        "TETHER_LISTENER_KUBECONFIG": str(kcp.kubeconfig), "TETHER_LISTENER_NAMESPACE": KCP_NS,
        "TETHER_LISTENER_LOG_FORMAT": "text",
        "TETHER_LISTENER_AUDIT_LOG": str(work / "listener-audit.log")}, work))
    wait_for("the listener", lambda: procs[-1].alive() or http_ok(f"http://127.0.0.1:{lops}/readyz"))
    say(f"listener ready: {listener_url} (mTLS; health, readiness, metrics "
        f"http://127.0.0.1:{lops}; audit log {work / 'listener-audit.log'})")

    # -- the listener's janitor (KCP, leader-elected): tombstone retention, orphaned runtimes
    jport = controlplane.free_port()
    procs.append(Proc("janitor", tether("janitor"), {
        "TETHER_LISTENER_KUBECONFIG": str(kcp.kubeconfig), "TETHER_LISTENER_NAMESPACE": KCP_NS,
        "TETHER_LISTENER_JANITOR_BIND": f"127.0.0.1:{jport}", "TETHER_LISTENER_LOG_FORMAT": "text",
        "TETHER_LISTENER_AUDIT_LOG": str(work / "janitor-audit.log")}, work))
    wait_for("the janitor", lambda: procs[-1].alive() or http_ok(f"http://127.0.0.1:{jport}/healthz"))
    say(f"janitor started (probes/metrics http://127.0.0.1:{jport})")

    # -- the webhook (SKR), registered with the runtime's apiserver
    runtime_env = {"TETHER_RUNTIME_ID": RUNTIME_ID, "TETHER_LISTENER_URL": listener_url,
                   "TETHER_LISTENER_CA_FILE": str(work / "kcp-ca.crt"),
                   "TETHER_CLIENT_CERT_FILE": str(work / "runtime.crt"),
                   "TETHER_CLIENT_KEY_FILE": str(work / "runtime.key"),
                   "TETHER_KUBECONFIG": str(skr.kubeconfig), "TETHER_LOG_FORMAT": "text"}
    wport = controlplane.free_port()
    procs.append(Proc("webhook", tether("webhook"), {
        **runtime_env, "TETHER_WEBHOOK_BIND": f"127.0.0.1:{wport}", "TETHER_WEBHOOK_WORKERS": "1",
        "TETHER_WEBHOOK_CERT_FILE": str(work / "webhook.crt"),
        "TETHER_WEBHOOK_KEY_FILE": str(work / "webhook.key")}, work))
    wait_for("the webhook", lambda: procs[-1].alive() or https_ok(f"https://127.0.0.1:{wport}/readyz", wctx))
    vwc = yaml.safe_load(VWC.read_text())
    for hook in vwc["webhooks"]:
        hook["clientConfig"] = {"url": f"https://127.0.0.1:{wport}/validate",
                                "caBundle": base64.b64encode(wca.cert_pem).decode()}
    client.AdmissionregistrationV1Api(skr_api).create_validating_webhook_configuration(vwc)
    say(f"webhook ready and registered: https://127.0.0.1:{wport}/validate")

    # -- the poller (SKR) and compass (KCP), both leader-elected
    pport = controlplane.free_port()
    procs.append(Proc("poller", tether("poller"), {
        **runtime_env, "TETHER_POLLER_BIND": f"127.0.0.1:{pport}",
        "TETHER_POLLER_INTERVAL_SECONDS": "20", "TETHER_POLLER_JITTER_SECONDS": "2"}, work))
    cport = controlplane.free_port()
    procs.append(Proc("compass", [*tether("compass"), "--kubeconfig", str(kcp.kubeconfig)], {
        "TETHER_COMPASS_DIRECTOR_URL": f"{director_url}/graphql",
        "TETHER_COMPASS_OAUTH_TOKEN_URL": f"{director_url}/oauth2/token",
        "TETHER_COMPASS_OAUTH_CLIENT_ID": "tether", "TETHER_COMPASS_OAUTH_CLIENT_SECRET_FILE": str(secret_file),
        "TETHER_COMPASS_DIRECTOR_CA_FILE": str(work / "kcp-ca.crt"), "TETHER_KCP_NAMESPACE": KCP_NS,
        "TETHER_COMPASS_INTERVAL_SECONDS": "5", "TETHER_COMPASS_METRICS_PORT": str(cport),
        "TETHER_LOG_FORMAT": "text", "TETHER_AUDIT_LOG": str(work / "compass-audit.log")}, work))
    say(f"poller (probes/metrics http://127.0.0.1:{pport}) and compass (http://127.0.0.1:{cport}) started")

    # -- the scenario: a customer's ConfigMap change travels to the KCP
    def stored() -> dict[str, Any] | None:
        name = records.object_name(records.Key(RUNTIME_ID, "demo", "app-config"))
        try:
            obj: dict[str, Any] = custom.get_namespaced_custom_object(
                records.GROUP, records.VERSION, KCP_NS, records.PLURAL, name)
        except client.ApiException:
            return None
        return obj

    t = time.monotonic()
    cm = score.create_namespaced_config_map("demo", client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="app-config"), data={"greeting": "hello"}))
    rv = cm.metadata.resource_version
    wait_for("the change in the KCP", lambda: (s := stored()) and s["spec"]["resourceVersion"] == rv)
    say(f"SKR ConfigMap demo/app-config created (rv {rv}) -> stored in the KCP as "
        f"{records.KIND} in {time.monotonic() - t:.2f}s")
    t = time.monotonic()
    cm = score.patch_namespaced_config_map("app-config", "demo", {"data": {"greeting": "hi"}})
    rv = cm.metadata.resource_version
    wait_for("the update in the KCP", lambda: (s := stored()) and s["spec"]["resourceVersion"] == rv)
    say(f"updated (rv {rv}) -> KCP holds data {stored()['spec']['data']} after {time.monotonic() - t:.2f}s")  # type: ignore[index]
    score.delete_namespaced_config_map("app-config", "demo")
    wait_for("the tombstone in the KCP", lambda: (s := stored()) and s["spec"]["deleted"])
    say("deleted -> the KCP holds a tombstone")

    # -- Compass: registered, token delivered to the runtime
    def mapping_state() -> str | None:
        m = custom.get_namespaced_custom_object("operator.kyma-project.io", "v1beta1", KCP_NS,
                                                "compassmanagermappings", KYMA)
        return (m.get("status") or {}).get("state") if m.get("status", {}).get("state") == "Ready" else None

    wait_for("the Compass mapping to be Ready", mapping_state, timeout=90)
    sec = score.read_namespaced_secret("compass-agent-configuration", "kyma-system")
    keys = sorted((sec.data or {}).keys())
    runtime = base64.b64decode(sec.data["RUNTIME_ID"]).decode()
    say(f"Compass: Kyma {KYMA} registered as Director runtime {runtime}; Secret "
        f"kyma-system/compass-agent-configuration in the runtime has {keys} (token not shown)")

    print(json.dumps({"skr_kubeconfig": str(skr.kubeconfig), "kcp_kubeconfig": str(kcp.kubeconfig),
                      "kubectl": kubectl, "listener": listener_url, "director": director_url,
                      "logs": str(work)}, indent=1), flush=True)
    if once:
        say("scenario done (--once): stopping")
        return
    say(f"try:  {kubectl} --kubeconfig {skr.kubeconfig} -n demo create configmap x --from-literal=a=b")
    say(f"then: {kubectl} --kubeconfig {kcp.kubeconfig} -n {KCP_NS} get runtimeconfigmaps")
    say("Ctrl-C stops everything")
    stop = False

    def on_term(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    while not stop:
        for p in procs:
            p.alive()
        time.sleep(1)


def _port_open(port: int) -> bool:
    import socket

    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
