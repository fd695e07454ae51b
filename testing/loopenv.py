"""The whole loop on real planes, for the end-to-end tests and the injection benchmark: a
customer's ConfigMap in the runtime (SKR apiserver) -> the webhook in Watch mode (its Watch
list in a ``tether-watches`` ConfigMap, one registered webhook per Watch, as the enroller
renders them) -> the listener (mTLS) -> a RuntimeConfigMap in the KCP -> the configuration
injector (``tether injector``) -> the runtime's component CR in the KCP.

The component CR stands for a module's: ``sample_crd`` (kind Sample, ``spec.configuration``
a map of strings, a status subresource with conditions), one CR per runtime labelled
``kyma-project.io/runtime-id``. ``inject_watch`` is a Watch of the labelled ConfigMaps of one
SKR namespace, in force in one runtime, naming that CR's ``spec.configuration`` as its
``inject`` target.

``Api``/``Stream``: raw JSON over HTTPS as system:masters, and a watch whose every event is
stamped on arrival (``time.monotonic``) on its own thread: the benchmark's clock.
"""

from __future__ import annotations

import http.client
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Self, cast

from kubernetes import client

from testing import controlplane, pollerenv, rawapi, watchenv
from testing import listenerenv as lt
from testing import webhookstack as stack
from tether.kube import apitypes
from tether.wire import watches, watchwire

REPO = controlplane.REPO_ROOT
SAMPLE_GROUP = "sample.loop.tether-test.example.com"
SAMPLES = "samples"
LABEL = "tether-loop.example.com/inject"  # the Watch's selector: the customer's opt-in label
CM = {"group": "", "version": "v1", "resource": "configmaps", "kind": "ConfigMap"}


# -- the component CR ---------------------------------------------------------------------


def sample_crd(group: str = SAMPLE_GROUP) -> dict[str, Any]:
    """A module's CRD as the injector meets it: structural, spec.configuration a map of
    strings, status conditions (a list keyed by type), the status subresource."""
    condition = {
        "type": "object",
        "required": ["type", "status"],
        "properties": {
            k: {"type": "string"}
            for k in ("type", "status", "reason", "message", "lastTransitionTime")
        }
        | {"observedGeneration": {"type": "integer", "format": "int64"}},
    }
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "configuration": {"type": "object", "additionalProperties": {"type": "string"}},
                    "replicas": {"type": "integer"},
                },
            },
            "status": {
                "type": "object",
                "properties": {
                    "observedGeneration": {"type": "integer", "format": "int64"},
                    "conditions": {
                        "type": "array",
                        "items": condition,
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["type"],
                    },
                },
            },
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{SAMPLES}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {
                "plural": SAMPLES,
                "singular": "sample",
                "kind": "Sample",
                "listKind": "SampleList",
            },
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


def sample_name(runtime_id: str) -> str:
    return f"sample-{runtime_id}"[:63]


def create_sample(
    api: client.ApiClient, namespace: str, runtime_id: str, group: str = SAMPLE_GROUP
) -> dict[str, Any]:
    """The runtime's component CR (the module's own field ``replicas`` beside the injector's)."""
    body = {
        "apiVersion": f"{group}/v1",
        "kind": "Sample",
        "metadata": {
            "name": sample_name(runtime_id),
            "namespace": namespace,
            "labels": {apitypes.RUNTIME_ID_LABEL: runtime_id},
        },
        "spec": {"replicas": 1},
    }
    return cast(
        dict[str, Any],
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            group, "v1", namespace, SAMPLES, body
        ),
    )


def sample(
    api: client.ApiClient, namespace: str, runtime_id: str, group: str = SAMPLE_GROUP
) -> dict[str, Any]:
    return cast(
        dict[str, Any],
        client.CustomObjectsApi(api).get_namespaced_custom_object(
            group, "v1", namespace, SAMPLES, sample_name(runtime_id)
        ),
    )


def configuration(
    api: client.ApiClient, namespace: str, runtime_id: str, group: str = SAMPLE_GROUP
) -> dict[str, str] | None:
    """``spec.configuration`` of the runtime's Sample (None: the field is absent)."""
    got = sample(api, namespace, runtime_id, group).get("spec", {}).get("configuration")
    return None if got is None else dict(got)


def inject_watch(
    name: str,
    kcp_namespace: str,
    skr_namespace: str,
    runtime_id: str,
    target_namespace: str,
    group: str = SAMPLE_GROUP,
    **spec: Any,
) -> dict[str, Any]:
    """A Watch of the ConfigMaps labelled ``LABEL=yes`` in ``skr_namespace``, in force in
    ``runtime_id`` only, injecting into its Sample's ``spec.configuration``."""
    return watchenv.watch(
        name,
        CM,
        kcp_namespace,
        selector={"matchLabels": {LABEL: "yes"}},
        namespaces=[skr_namespace],
        runtimes={"selector": {"matchLabels": {apitypes.RUNTIME_ID_LABEL: runtime_id}}},
        inject={
            "resource": {"group": group, "version": "v1", "resource": SAMPLES},
            "namespace": target_namespace,
            "field": "spec.configuration",
        },
        **spec,
    )


# -- the runtime side ---------------------------------------------------------------------


def start_webhook(
    skr: controlplane.ControlPlane,
    skr_api: client.ApiClient,
    work: pathlib.Path,
    rt: lt.Runtime,
    listener_url: str,
    in_force: Sequence[watches.Watch],
    skr_namespace: str,
    **env: str,
) -> tuple[stack.WebhookProcess, str]:
    """The webhook in Watch mode for ``rt``: its Watch list in ``skr_namespace``, one
    registered webhook per Watch. Returns the process and the registration's name."""
    core = client.CoreV1Api(skr_api)
    wire = client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=watchwire.WIRE_CONFIGMAP),
        data={watchwire.WIRE_KEY: watchwire.to_wire(tuple(in_force))},
    )
    try:
        core.create_namespaced_config_map(skr_namespace, wire)
    except client.ApiException as e:
        if e.status != 409:
            raise
        core.replace_namespaced_config_map(watchwire.WIRE_CONFIGMAP, skr_namespace, wire)
    proc = stack.WebhookProcess(
        work,
        {
            "TETHER_RUNTIME_ID": rt.id,
            "TETHER_LISTENER_URL": listener_url,
            "TETHER_LISTENER_CA_FILE": str(rt.env.server_ca_file),
            "TETHER_CLIENT_CERT_FILE": str(rt.cert_file),
            "TETHER_CLIENT_KEY_FILE": str(rt.key_file),
            "TETHER_KUBECONFIG": str(skr.kubeconfig),
            "TETHER_WATCHES_CONFIGMAP": f"{skr_namespace}/{watchwire.WIRE_CONFIGMAP}",
            **env,
        },
    ).start()
    template = stack.vwc_body("x", proc.url + "/validate", proc.ca.cert_pem, skr_namespace)[
        "webhooks"
    ][0]
    name = f"tether-loop-{skr_namespace}"
    stack.register(
        skr_api,
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": watchwire.webhook_entries(tuple(in_force), template),
        },
    )
    return proc, name


def put(
    core: client.CoreV1Api,
    namespace: str,
    name: str,
    data: dict[str, str],
    labels: dict[str, str] | None = None,
) -> str:
    """Create or merge-patch a labelled ConfigMap (``LABEL=yes`` unless ``labels``);
    returns the written resourceVersion."""
    meta = client.V1ObjectMeta(name=name, labels=labels if labels is not None else {LABEL: "yes"})
    try:
        made = core.create_namespaced_config_map(
            namespace, client.V1ConfigMap(metadata=meta, data=data)
        )
    except client.ApiException as e:
        if e.status != 409:
            raise
        made = core.patch_namespaced_config_map(name, namespace, {"data": data})
    assert made.metadata is not None
    return str(made.metadata.resource_version)


def wait_until(
    predicate: Callable[[], Any],
    timeout: float,
    what: str,
    interval: float = 0.1,
    on_wait: Callable[[], None] | None = None,
) -> Any:
    """``pollerenv.wait_until``, trying every 0.1 s."""
    return pollerenv.wait_until(predicate, timeout, what, interval, on_wait)


def wait_registered(
    env: lt.Env,
    core: client.CoreV1Api,
    rt: lt.Runtime,
    skr_namespace: str,
    watch: str,
    timeout: float = 60.0,
) -> None:
    """The API server picks a registration up, and the listener a new Watch, asynchronously:
    touch a labelled probe ConfigMap until its record is stored under ``watch``."""
    n = [0]

    def touch() -> None:
        n[0] += 1
        if n[0] % 3 == 1:
            put(core, skr_namespace, "loop-probe", {"n": str(n[0])})

    wait_until(
        lambda: env.stored_one(rt.id, skr_namespace, "loop-probe", watch) is not None,
        timeout,
        f"the probe stored under {watch}",
        interval=0.3,
        on_wait=touch,
    )


# -- the KCP side -------------------------------------------------------------------------


class PartProcess:
    """``python -m command.cli <part>`` of a leader-elected KCP part as a subprocess (its
    settings from ``env``, ``TETHER_<PART>_BIND``/``_IDENTITY`` set), with its probes on a
    free port; ``kill`` is SIGKILL (mid-stream), ``stop`` SIGTERM."""

    part = ""  # as in ``tether <part>``
    defaults: dict[str, str] = {}  # before the caller's ``env``

    def __init__(self, workdir: pathlib.Path, name: str, env: dict[str, str]) -> None:
        self.port = controlplane.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / f"{self.part}-{name}-{self.port}.log"
        base = {
            k: v for k, v in os.environ.items() if not k.startswith("TETHER_") and k != "KUBECONFIG"
        }
        prefix = f"TETHER_{self.part.upper()}_"
        self.env = {
            **base,
            **self.defaults,
            prefix + "BIND": f"127.0.0.1:{self.port}",
            prefix + "IDENTITY": name,
            "TETHER_LOG_FORMAT": "text",
            **env,
        }
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> Self:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "command.cli", self.part],
                env=self.env,
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=controlplane.die_with_parent(),
            )
        wait_until(self._healthy, timeout, f"the {self.part} healthy:\n{self.log()}", interval=0.2)
        return self

    def _healthy(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.part} exited with {self.proc.returncode}:\n{self.log()}")
        return self.get("/healthz")[0] == 200

    def get(self, path: str) -> tuple[int, str]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            return resp.status, resp.read().decode(errors="replace")
        except OSError:
            return 0, ""
        finally:
            conn.close()

    def metric(self, name: str, **labels: str) -> float:
        return pollerenv.metric_sum(self.get("/metrics")[1], name, **labels)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:] if self.log_path.exists() else ""

    def kill(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return 0 if self.proc is None else self.proc.returncode
        controlplane.stop_group(self.proc, timeout)
        return self.proc.returncode


class InjectorProcess(PartProcess):
    """``tether injector`` as a subprocess (``PartProcess``)."""

    part = "injector"


def janitor_once(env: lt.Env, **overrides: str) -> str:
    """``tether janitor --once`` with the janitor's own user (its manifests' Roles)."""
    environ = {
        k: v for k, v in os.environ.items() if not k.startswith("TETHER_") and k != "KUBECONFIG"
    }
    environ.update(
        {
            "TETHER_LISTENER_KUBECONFIG": str(env.janitor_kubeconfig),
            "TETHER_LISTENER_NAMESPACE": env.namespace,
            "TETHER_LISTENER_AUDIT_LOG": str(env.dir / "janitor-loop-audit.jsonl"),
            "TETHER_LISTENER_LOG_FORMAT": "text",
            **overrides,
        }
    )
    out = subprocess.run(
        [sys.executable, "-m", "command.cli", "janitor", "--once"],
        cwd=REPO,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return out.stdout + out.stderr


# -- raw HTTPS and stamped watches ----------------------------------------------------------

Api = rawapi.Api


Handler = Callable[[str, dict[str, Any], float], None]


class Stream:
    """A watch of the collection at ``path`` from now on: ``on_event(type, object, at)`` for
    every ADDED/MODIFIED/DELETED event, ``at`` its arrival (time.monotonic), on the stream's
    own thread; resumes from the last resourceVersion after a broken connection."""

    def __init__(self, api: Api, path: str, on_event: Handler) -> None:
        self.api, self.path, self.on_event = api, path, on_event
        conn = api.connect()
        _, lst = api.call(conn, "GET", path + "?limit=1")
        conn.close()
        self.rv = str(lst["metadata"]["resourceVersion"])
        self._stop = threading.Event()
        self._sock: socket.socket | None = None
        self._thread = threading.Thread(target=self._run, name="loop-stream", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            conn = self.api.connect(timeout=3600)
            try:
                conn.request(
                    "GET",
                    f"{self.path}?watch=1&allowWatchBookmarks=true"
                    f"&resourceVersion={self.rv}&timeoutSeconds=3000",
                )
                resp = conn.getresponse()
                self._sock = conn.sock
                for line in resp:
                    at = time.monotonic()
                    ev = json.loads(line)
                    obj = ev.get("object") or {}
                    if ev.get("type") == "ERROR":
                        break
                    self.rv = (obj.get("metadata") or {}).get("resourceVersion", self.rv)
                    if ev.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                        self.on_event(ev["type"], obj, at)
            except (OSError, http.client.HTTPException, ValueError):
                time.sleep(0.2)
            finally:
                conn.close()

    def stop(self) -> None:
        self._stop.set()
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._thread.join(10)


def samples(group: str = SAMPLE_GROUP) -> apitypes.Resource:
    """The Sample CRD's resource type (``Resource.path`` gives its URLs)."""
    return apitypes.watched(group, "v1", SAMPLES)
