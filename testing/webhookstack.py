"""The webhook under real gunicorn (a subprocess) registered with the real SKR apiserver.

``WebhookProcess`` issues a serving certificate for 127.0.0.1, starts ``tether webhook``
with the given settings and waits for ``/readyz``. ``register`` creates a
ValidatingWebhookConfiguration from ``manifests/skr/webhook`` (the same rules, policy and
matchConditions) pointed at ``https://127.0.0.1:PORT/validate`` with the caBundle, scoped
to one test namespace; ``unregister`` deletes it. ``review`` is an AdmissionReview as the
API server sends it, for callers that forge one.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import pathlib
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

import yaml
from kubernetes import client

from testing import controlplane
from tether.base import certs

REPO = controlplane.REPO_ROOT
VWC_FILE = REPO / "manifests" / "skr" / "webhook" / "validatingwebhookconfiguration.yaml"


class WebhookProcess:
    def __init__(
        self, workdir: pathlib.Path, env: dict[str, str], code: pathlib.Path = REPO
    ) -> None:
        """``code``: the source tree to run (another version's, for version-skew tests)."""
        self.dir = workdir
        self.code = code
        self.ca = certs.CertificateAuthority.create("webhook-serving-ca")
        pair = self.ca.issue(
            "tether-webhook", dns_names=["localhost"], ip_addresses=["127.0.0.1"], server=True
        )
        self.cert_file, self.key_file = workdir / "webhook.crt", workdir / "webhook.key"
        pair.write(self.cert_file, self.key_file)
        self.ca_file = workdir / "webhook-ca.crt"
        self.ca_file.write_bytes(self.ca.cert_pem)
        self.port = controlplane.free_port()
        self.env = {
            **os.environ,
            "TETHER_WEBHOOK_BIND": f"127.0.0.1:{self.port}",
            "TETHER_WEBHOOK_CERT_FILE": str(self.cert_file),
            "TETHER_WEBHOOK_KEY_FILE": str(self.key_file),
            "TETHER_WEBHOOK_WORKERS": "1",
            "TETHER_WEBHOOK_THREADS": "4",
            "TETHER_LOG_FORMAT": "text",
            **env,
        }
        if code != REPO:
            self.env["PYTHONPATH"] = str(code)
        self.env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        self.command = [sys.executable, "-m", "command.cli", "webhook"]
        self.log_path = workdir / "webhook.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def start(self, timeout: float = 30.0) -> WebhookProcess:
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it
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
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"webhook exited with {self.proc.returncode}:\n{self.log()}")
            try:
                status, _ = self.get("/readyz")
                if status == 200:
                    return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        raise AssertionError(f"webhook not ready in {timeout}s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.url + path, context=self.context(), timeout=5) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def post(
        self, path: str, body: bytes, content_type: str = "application/json"
    ) -> tuple[int, bytes]:
        req = urllib.request.Request(
            self.url + path, data=body, method="POST", headers={"Content-Type": content_type}
        )
        try:
            with urllib.request.urlopen(req, context=self.context(), timeout=10) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples of ``name`` whose labels include ``labels``."""
        _, text = self.get("/metrics")
        total = 0.0
        for line in text.decode().splitlines():
            if not line.startswith(name + "{") and not line.startswith(name + " "):
                continue
            head, value = line.rsplit(" ", 1)
            if all(f'{k}="{v}"' in head for k, v in labels.items()):
                total += float(value)
        return total

    def stop(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        controlplane.stop_group(self.proc, timeout)
        return self.proc.returncode


def review(namespace: str, name: str, operation: str = "DELETE") -> bytes:
    """An AdmissionReview as the API server sends it for a ConfigMap (here: forged)."""
    old = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": str(uuid.uuid4()),
            # a forger's choice: far above anything the runtime will write
            "resourceVersion": "999999999999",
        },
    }
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": str(uuid.uuid4()),
                "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                "resource": {"group": "", "version": "v1", "resource": "configmaps"},
                "operation": operation,
                "namespace": namespace,
                "name": name,
                "dryRun": False,
                "userInfo": {"username": "system:admin"},
                "object": None,
                "oldObject": old,
            },
        }
    ).encode()


def vwc_body(name: str, url: str, ca_pem: bytes, namespace: str) -> dict[str, Any]:
    """The manifest's configuration, pointed at ``url`` and scoped to ``namespace``."""
    body: dict[str, Any] = copy.deepcopy(yaml.safe_load(VWC_FILE.read_text()))
    body["metadata"] = {"name": name}
    for hook in body["webhooks"]:
        hook["clientConfig"] = {"url": url, "caBundle": base64.b64encode(ca_pem).decode()}
        hook["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    return body


def register(api: client.ApiClient, body: dict[str, Any]) -> None:
    client.AdmissionregistrationV1Api(api).create_validating_webhook_configuration(body)  # type: ignore[arg-type]


def unregister(api: client.ApiClient, name: str) -> None:
    try:
        client.AdmissionregistrationV1Api(api).delete_validating_webhook_configuration(name)
    except client.ApiException as e:
        if e.status != 404:
            raise
