"""The poller's test helpers: the poller in-process (one Runner) or as `tether poller` subprocesses,
and the state of a runtime and of the KCP to compare."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import requests
from kubernetes import client

from listener.fleet import statesummary
from listener.storage import records
from poller import metrics, run, scan
from testing import controlplane
from testing.listenerenv import Env, Runtime
from tether.kube import apitypes, gateway
from tether.runtime import sender
from tether.wire import conversion, filters, statehash

REPO = controlplane.REPO_ROOT


TETHER = REPO / ".venv" / "bin" / "tether"


LABEL = "tether-test.kyma-project.io/case"


SKR_RBAC = REPO / "manifests" / "skr" / "poller" / "rbac.yaml"


SA_USER = "system:serviceaccount:tether-system:tether-poller"


def unique_selector() -> tuple[dict[str, str], str]:
    """Labels for a test's ConfigMaps and the selector that sees only them (the SKR plane
    is shared with other tests)."""
    value = uuid.uuid4().hex[:10]
    return {LABEL: value}, f"{LABEL}={value}"


def client_settings(rt: Runtime, url: str) -> sender.ClientSettings:
    return sender.ClientSettings(
        base_url=url,
        runtime_id=rt.id,
        ca_file=str(rt.env.server_ca_file),
        cert_file=str(rt.cert_file),
        key_file=str(rt.key_file),
        read_timeout=30.0,
    )


class InProcess:
    """One poller ``Runner`` wired to the real planes (no scheduler)."""

    def __init__(
        self,
        rt: Runtime,
        url: str,
        skr_api: client.ApiClient,
        selector: str,
        lister: Callable[[scan.Lister], run.PageSource] = lambda x: x,
        **run_kw: Any,
    ) -> None:
        self.metrics = metrics.Metrics()
        self.filter = filters.ConfigMapFilter.build(filters.DEFAULT_IGNORED_NAMESPACES, selector)
        self.client = sender.ListenerClient(client_settings(rt, url))
        self.lister = scan.Lister(
            gateway.Kube(skr_api),
            self.filter,
            page_size=run_kw.pop("page_size", 500),
            timeout=30,
            on_request=self.metrics.apiserver_requests.inc,
        )
        self.runner = run.Runner(
            rt.id,
            run.RunSettings(**run_kw),
            self.filter,
            lister(self.lister),
            self.client,
            self.metrics,
            identity=self.lister.identity,
        )

    def run(self, **kw: Any) -> run.Result:
        return self.runner.run(**kw)

    def sample(self, name: str, **labels: str) -> float:
        v = self.metrics.registry.get_sample_value(name, labels)
        return 0.0 if v is None else v

    def close(self) -> None:
        self.client.close()


class PollerProcess:
    """``.venv/bin/tether poller`` as a subprocess with its probes on a free port."""

    def __init__(
        self, workdir: pathlib.Path, name: str, env: dict[str, str], code: pathlib.Path = REPO
    ) -> None:
        """``code``: the source tree to run (another release's, for version-skew tests)."""
        self.code = code
        self.port = controlplane.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.identity = name
        self.log_path = workdir / f"poller-{name}.log"
        base = {
            k: v for k, v in os.environ.items() if not k.startswith("TETHER_") and k != "KUBECONFIG"
        }
        self.env = {
            **base,
            "TETHER_POLLER_BIND": f"127.0.0.1:{self.port}",
            "TETHER_POLLER_IDENTITY": name,
            "TETHER_LOG_FORMAT": "text",
            "TETHER_POLLER_RESYNC_CRON": "off",
            **env,
        }
        self.command = [str(TETHER), "poller"]
        if code != REPO:
            self.env["PYTHONPATH"] = str(code)
            self.command = [sys.executable, "-m", "command.cli", "poller"]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> PollerProcess:
        assert TETHER.exists(), f"{TETHER} missing: run make venv"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.command,
                env=self.env,
                cwd=self.code,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=controlplane.die_with_parent(),
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"poller exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if requests.get(self.url + "/healthz", timeout=2).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.1)
        raise AssertionError(f"poller not healthy in {timeout}s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples of ``name`` whose labels include ``labels``."""
        return metric_sum(requests.get(self.url + "/metrics", timeout=5).text, name, **labels)

    def kill(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc is None:
            return 0
        controlplane.stop_group(self.proc, timeout)
        return self.proc.returncode


def poller_env(
    rt: Runtime,
    url: str,
    skr: controlplane.ControlPlane,
    selector: str,
    lease_namespace: str,
    **extra: str,
) -> dict[str, str]:
    return {
        "TETHER_RUNTIME_ID": rt.id,
        "TETHER_LISTENER_URL": url,
        "TETHER_LISTENER_CA_FILE": str(rt.env.server_ca_file),
        "TETHER_CLIENT_CERT_FILE": str(rt.cert_file),
        "TETHER_CLIENT_KEY_FILE": str(rt.key_file),
        "TETHER_KUBECONFIG": str(skr.kubeconfig),
        "TETHER_LABEL_SELECTOR": selector,
        "TETHER_POLLER_LEASE_NAMESPACE": lease_namespace,
        "TETHER_POLLER_LEASE_NAME": "poller-" + rt.id,
        **extra,
    }


def runtime_state(
    core: client.CoreV1Api, namespace: str, selector: str
) -> dict[tuple[str, str], dict[str, Any]]:
    """The watched ConfigMaps of ``namespace`` as the records a sender would build."""
    resp: Any = core.list_namespaced_config_map(
        namespace, label_selector=selector, _preload_content=False
    )
    doc = json.loads(resp.data)
    out = {}
    for obj in doc["items"]:
        rec = conversion.from_configmap(obj, runtime_id="x", source="poller")
        out[(rec["namespace"], rec["name"])] = {
            k: rec.get(k)
            for k in ("uid", "resourceVersion", "labels", "annotations", "data", "binaryData")
        }
    return out


def kcp_state(
    env: Env, runtime_id: str, namespace: str
) -> tuple[dict[tuple[str, str], dict[str, Any]], dict[tuple[str, str], dict[str, Any]]]:
    """(live records, tombstones) the KCP holds for ``runtime_id`` in ``namespace``."""
    live, dead = {}, {}
    for obj in env.stored(runtime_id):
        spec = obj["spec"]
        if spec["namespace"] != namespace:
            continue
        key = (spec["namespace"], spec["name"])
        if spec["deleted"]:
            dead[key] = spec
        else:
            live[key] = {
                k: spec.get(k, {})
                for k in ("uid", "resourceVersion", "labels", "annotations", "data", "binaryData")
            }
    return live, dead


def summary_settled(env: Env, runtime_id: str) -> bool:
    """The runtime's RuntimeStateSummary holds every record it stores: its bucket hashes are
    the stored records folded (the listener's merges of what was written have landed)."""
    s = apitypes.RUNTIME_STATE_SUMMARIES
    try:
        obj: Any = client.CustomObjectsApi(env.api).get_namespaced_custom_object(
            s.group, s.version, env.namespace, s.plural, statesummary.name_of(runtime_id)
        )
    except client.ApiException as e:
        if e.status == 404:
            return False
        raise
    stored = statehash.stored_of(obj.get("status"))
    items = [
        i
        for i in (records.digest_item(o["metadata"]) for o in env.stored(runtime_id))
        if i is not None
    ]
    return stored is not None and stored.hashes == statehash.fold(items).hashes


def wait_until(
    predicate: Callable[[], Any],
    timeout: float,
    what: str,
    interval: float = 0.2,
    on_wait: Callable[[], None] | None = None,
) -> Any:
    """``predicate()``'s first true value; ``on_wait`` between tries (e.g. write a probe)."""
    deadline = time.monotonic() + timeout
    while True:
        got = predicate()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        if on_wait is not None:
            on_wait()
        time.sleep(interval)


def metric_sum(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` in a Prometheus text exposition whose labels include
    ``labels`` (``listenerenv.metric_value``: the one sample with exactly those labels)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#") or not (line.startswith(name + "{") or line.startswith(name + " ")):
            continue
        head, value = line.rsplit(" ", 1)
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            total += float(value)
    return total
