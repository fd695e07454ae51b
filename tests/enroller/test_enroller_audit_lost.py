"""The enroller's audit never holds up its run (``tether.base.auditwriter``): a real ``tether
enroller`` with its audit file on a full file system (``/dev/full``: every write fails with
ENOSPC) still creates its watcher CA (an audit line: ``ca_created``) and completes its runs;
the line it could not write is counted in ``tether_enroller_audit_lost_total{reason=
"write_error"}`` (both reasons exported at 0 from the start) and said on its stderr."""

from __future__ import annotations

import errno
import os
import pathlib
import time
import urllib.request

import pytest
from kubernetes import client

from testing import controlplane
from testing.enrollenv import CRD, EnrollerProcess
from testing.listenerenv import metric_value
from testing.pollerenv import wait_until
from tether.base import auditwriter, certs

pytestmark = pytest.mark.processes
LOST = "tether_enroller_audit_lost_total"


def metrics(e: EnrollerProcess) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{e.port}/metrics", timeout=5) as r:
            text: str = r.read().decode()
            return text
    except OSError:
        return ""


def test_the_enroller_with_its_audit_on_a_full_disk_still_runs(
    kcp: controlplane.ControlPlane,
    kcp_api: client.ApiClient,
    kcp_namespace: str,
    kyma_crd: str,
    tmp_path: pathlib.Path,
) -> None:
    if not os.path.exists("/dev/full"):
        pytest.fail("/dev/full is missing: the full-disk case cannot be shown on this machine")
    controlplane.install_crds(kcp_api, CRD)
    ns = kcp_namespace
    listener_ca = certs.CertificateAuthority.create("listener")
    (tmp_path / "listener-ca.crt").write_bytes(listener_ca.cert_pem)
    env = {
        "TETHER_ENROLLER_KUBECONFIG": str(kcp.kubeconfig),
        "TETHER_KCP_NAMESPACE": ns,
        "TETHER_ENROLLER_NAMESPACE": ns,
        "TETHER_ENROLLER_LISTENER_URL": "https://listener.example.com",
        "TETHER_ENROLLER_LISTENER_CA_FILE": str(tmp_path / "listener-ca.crt"),
        "TETHER_ENROLLER_INTERVAL_SECONDS": "2",
        "TETHER_ENROLLER_REACT_SECONDS": "1",
        "TETHER_LOG_FORMAT": "text",
        "TETHER_AUDIT_LOG": "/dev/full",
    }
    started = time.time()
    e = EnrollerProcess("audit-full", env, tmp_path)
    try:
        first = wait_until(lambda: metrics(e), 60, "the enroller's /metrics", interval=0.3)
        for reason in auditwriter.REASONS:  # the series exist before the first loss
            assert (
                f'{LOST}{{reason="{reason}"}} 0.0' in first
                or metric_value(first, LOST, reason=reason) > 0
            ), first[-3000:]
        # it leads, creates its CA (the audit line that is lost) and completes its runs
        wait_until(
            lambda: (
                metric_value(metrics(e), "tether_enroller_last_success_timestamp_seconds") > started
            ),
            90,
            "a completed run",
            interval=0.3,
        )
        wait_until(
            lambda: metric_value(metrics(e), LOST, reason="write_error") >= 1,
            30,
            "the lost ca_created line counted",
            interval=0.3,
        )
        ca = client.CoreV1Api(kcp_api).read_namespaced_secret("tether-enroller-ca", ns)
        assert ca.data and "tls.crt" in ca.data, sorted(ca.data or {})  # the CA it created
        assert e.popen.poll() is None
    finally:
        e.stop()
    log_text = e.log.read_text()
    assert "audit lines lost" in log_text and os.strerror(errno.ENOSPC) in log_text
