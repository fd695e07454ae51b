"""The enroller's test environment on real planes: ``Env`` runs ``reconcile.Enroller``
in-process against the KCP (its settings, audit, clock offset, Kyma CRs and what it wrote),
``runtime_objects`` reads what it installed in a runtime, ``writes``/``reads`` its requests
counted; ``EnrollerProcess`` is ``tether enroller`` as a subprocess."""

from __future__ import annotations

import base64
import datetime
import io
import logging
import os
import pathlib
import subprocess
import sys
import urllib.request
import uuid
from typing import Any

from kubernetes import client

from enroller import metrics, reconcile, render
from enroller import settings as settings_mod
from testing import compassenv, controlplane, localnet
from tether.base import certs
from tether.kube import gateway, skr_clients

CRD = (
    controlplane.REPO_ROOT
    / "manifests"
    / "kcp"
    / "crds"
    / "tether.kyma-project.io_runtimeenrollments.yaml"
)


class Env:
    def __init__(self, kcp: controlplane.ControlPlane, ns: str, tmp: pathlib.Path) -> None:
        self.kcp, self.ns, self.tmp = kcp, ns, tmp
        self.api = kcp.api_client()
        self.gw = gateway.from_kubeconfig(str(kcp.kubeconfig))
        self.offset = datetime.timedelta()
        self.audit_text = io.StringIO()
        self.listener_ca = certs.CertificateAuthority.create("listener-ca")

    def settings(self, **over: Any) -> settings_mod.Settings:
        base = dict(
            listener_url="https://listener.kcp.example.com",
            listener_ca=self.listener_ca.cert_pem,
            kcp_namespace=self.ns,
            namespace=self.ns,
            backoff_base=0.0,
            concurrency=4,
        )
        base.update(over)
        return settings_mod.Settings(**base)  # type: ignore[arg-type]

    def enroller(self, **over: Any) -> reconcile.Enroller:
        audit = logging.getLogger(f"test.enroller.audit.{uuid.uuid4().hex[:6]}")
        audit.setLevel(logging.INFO)
        audit.propagate = False
        handler = logging.StreamHandler(self.audit_text)
        handler.setFormatter(
            logging.Formatter(
                "%(message)s %(kind)s %(cause)s", defaults={"kind": "-", "cause": "-"}
            )
        )
        audit.addHandler(handler)
        s = self.settings(**over)
        return reconcile.Enroller(
            s,
            self.gw,
            skr_clients.SkrClients(self.gw, self.ns, localnet.policy(timeout=s.skr_timeout)),
            metrics.Metrics(),
            audit,
            now=lambda: datetime.datetime.now(datetime.UTC) + self.offset,
        )

    def kyma(
        self,
        name: str,
        plane: controlplane.ControlPlane | None,
        *,
        domain: str | None = "auto",
        runtime_id: str | None = None,
        labels: dict[str, str] | None = None,
    ) -> str:
        rid = runtime_id or f"rt-{name}"
        labels = {
            **compassenv.kyma_labels("ga", name, **{"kyma-project.io/runtime-id": rid}),
            **(labels or {}),
        }
        body = {
            "apiVersion": "operator.kyma-project.io/v1beta2",
            "kind": "Kyma",
            "metadata": {
                "name": name,
                "namespace": self.ns,
                "labels": labels,
                "annotations": {}
                if domain is None
                else {"skr-domain": f"{name}.kyma.example.com" if domain == "auto" else domain},
            },
            "spec": {"channel": "regular"},
        }
        client.CustomObjectsApi(self.api).create_namespaced_custom_object(
            "operator.kyma-project.io", "v1beta2", self.ns, "kymas", body
        )
        if plane is not None:
            compassenv.create_kubeconfig_secret(self.api, self.ns, name, plane)
        return rid

    def enrollment(self, name: str) -> dict[str, Any] | None:
        try:
            obj: Any = client.CustomObjectsApi(self.api).get_namespaced_custom_object(
                "tether.kyma-project.io", "v1alpha1", self.ns, "runtimeenrollments", name
            )
            return dict(obj)
        except client.ApiException as e:
            if e.status == 404:
                return None
            raise

    def condition(self, name: str, kind: str) -> dict[str, Any]:
        e = self.enrollment(name)
        assert e is not None, f"no RuntimeEnrollment {name}"
        return next(c for c in e["status"]["conditions"] if c["type"] == kind)

    def events(self, name: str) -> list[str]:
        """The reasons of the Events about ``name``; those about its RuntimeEnrollment must
        carry its uid (kubectl describe lists only the Events whose involvedObject.uid is the
        object's)."""
        enrollment = self.enrollment(name)
        uid = ((enrollment or {}).get("metadata") or {}).get("uid")
        evs: Any = client.CoreV1Api(self.api).list_namespaced_event(self.ns).items
        for e in evs:
            o = e.involved_object
            if o.name == name and o.kind == "RuntimeEnrollment" and enrollment is not None:
                assert o.uid == uid, f"Event {e.reason}: involvedObject.uid {o.uid!r}, not {uid!r}"
        return [e.reason for e in evs if e.involved_object.name == name]


def runtime_objects(plane: controlplane.ControlPlane) -> dict[str, Any]:
    api = plane.api_client()
    try:
        core = client.CoreV1Api(api)
        out: dict[str, Any] = {}
        for name in (render.CLIENT_SECRET, render.SERVING_SECRET, render.PULL_SECRET):
            try:
                out[name] = core.read_namespaced_secret(name, render.NAMESPACE)
            except client.ApiException as e:
                if e.status != 404:
                    raise
        try:
            out["vwc"] = client.AdmissionregistrationV1Api(
                api
            ).read_validating_webhook_configuration(render.WEBHOOK_CONFIG)
        except client.ApiException as e:
            if e.status != 404:
                raise
        deployments: Any = client.AppsV1Api(api).list_namespaced_deployment(render.NAMESPACE).items
        out["deployments"] = sorted(d.metadata.name for d in deployments)
        roles: Any = (
            client.RbacAuthorizationV1Api(api)
            .list_cluster_role(label_selector="app.kubernetes.io/managed-by=tether-enroller")
            .items
        )
        out["clusterroles"] = sorted(r.metadata.name for r in roles)
        return out
    finally:
        api.close()


def secret_pem(secret: Any, key: str) -> bytes:
    return base64.b64decode(secret.data[key])


def writes(e: reconcile.Enroller) -> float:
    return e.stats.requests.labels("write")._value.get()  # type: ignore[no-any-return]


def reads(e: reconcile.Enroller) -> float:
    return e.stats.requests.labels("read")._value.get()  # type: ignore[no-any-return]


class EnrollerProcess:
    """``tether enroller`` as a subprocess with its probes on a free port; its log in
    ``work/<name>.log``."""

    def __init__(self, name: str, env: dict[str, str], work: pathlib.Path) -> None:
        self.port = controlplane.free_port()
        self.log = work / f"{name}.log"
        with open(self.log, "ab") as out:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "command.cli", "enroller"],
                env={
                    **{k: v for k, v in os.environ.items() if not k.startswith("TETHER_")},
                    **localnet.ENV,
                    **env,
                    "TETHER_ENROLLER_BIND": f"127.0.0.1:{self.port}",
                },
                cwd=controlplane.REPO_ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def leader(self) -> float | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=2) as r:
                for line in r.read().decode().splitlines():
                    if line.startswith("tether_enroller_leader "):
                        return float(line.split()[1])
        except OSError:
            return None
        return None

    def stop(self) -> None:
        controlplane.stop_group(self.popen, timeout=20)
