"""The manual path for a runtime the KCP cannot reach: ``tether certs render`` prints the
runtime's objects, which ``kubectl apply -f -`` accepts (server-side dry run on the SKR
plane: nothing is installed in the shared plane)."""

from __future__ import annotations

import base64
import pathlib
import subprocess
import sys

import pytest
import yaml
from cryptography import x509
from kubernetes import client

from enroller import pki, render
from testing import controlplane
from tether.base import certs

pytestmark = pytest.mark.processes  # starts processes of its own (testing/tiers.py)


def test_rendered_objects_are_accepted_by_kubectl_apply(
    skr: controlplane.ControlPlane, skr_api: client.ApiClient, tmp_path: pathlib.Path
) -> None:
    ca = certs.CertificateAuthority.create("watcher")
    ca.write(tmp_path / "ca.crt", tmp_path / "ca.key")
    listener_ca = certs.CertificateAuthority.create("listener")
    (tmp_path / "listener-ca.crt").write_bytes(listener_ca.cert_pem)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "command.cli",
            "certs",
            "render",
            "rt-manual",
            "--domain",
            "m.kyma.example.com",
            "--ca-dir",
            str(tmp_path),
            "--listener-url",
            "https://listener.example.com",
            "--listener-ca",
            str(tmp_path / "listener-ca.crt"),
            "--hours",
            "24",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=controlplane.REPO_ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert "PRIVATE KEY" not in done.stderr and "holds private keys" in done.stderr
    objs = list(yaml.safe_load_all(done.stdout))
    secret = next(
        o for o in objs if o["kind"] == "Secret" and o["metadata"]["name"] == render.CLIENT_SECRET
    )
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    assert certs.common_name(cert) == "rt-manual" and pki.issued_by(cert, [ca.cert])
    try:
        client.CoreV1Api(skr_api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name="tether-system"))
        )
    except client.ApiException as e:
        if e.status != 409:
            raise
    applied = subprocess.run(
        [
            str(controlplane.binaries() / "kubectl"),
            f"--kubeconfig={skr.kubeconfig}",
            "apply",
            "--dry-run=server",
            "-f",
            "-",
        ],
        input=done.stdout,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert applied.returncode == 0, applied.stderr
    assert (
        "validatingwebhookconfiguration.admissionregistration.k8s.io/tether-configmaps"
        " created (server dry run)" in applied.stdout
    )

    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "command.cli",
            "certs",
            "render",
            "rt-manual",
            "--domain",
            "x",
            "--ca-dir",
            str(tmp_path),
            "--listener-url",
            "http://plain",
            "--listener-ca",
            str(tmp_path / "listener-ca.crt"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=controlplane.REPO_ROOT,
    )
    assert (
        bad.returncode == 2 and bad.stderr.startswith("tether certs: ") and "https://" in bad.stderr
    )
