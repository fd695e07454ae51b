"""Compass's audit never holds up its run (``tether.base.auditwriter``): a real ``tether compass``
with its audit file on a full file system (``/dev/full``: every write fails with ENOSPC)
still registers a runtime and delivers its token; the lines it could not write
(``compass.runtime_registered``, ``compass.token_issued``) are counted in
``tether_compass_audit_lost_total{reason="write_error"}`` (both reasons exported at 0 from
the start) and said on its stderr, never with a token."""

from __future__ import annotations

import errno
import os
import pathlib
import subprocess
import sys
import time

import pytest
import requests
from kubernetes import client

from testing import compassenv as h
from testing import controlplane, localnet
from testing.listenerenv import metric_value
from tether.base import auditwriter

pytestmark = pytest.mark.processes  # starts processes of its own (testing/tiers.py)

LOST = "tether_compass_audit_lost_total"


def test_compass_with_its_audit_on_a_full_disk_still_registers(
    kcp: controlplane.ControlPlane,
    kcp_api: client.ApiClient,
    kcp_namespace: str,
    mapping_crd: str,
    clean_director: h.Director,
    skr: controlplane.ControlPlane,
    tmp_path: pathlib.Path,
) -> None:
    if not os.path.exists("/dev/full"):
        pytest.fail("/dev/full is missing: the full-disk case cannot be shown on this machine")
    ns, d = kcp_namespace, clean_director
    h.create_kubeconfig_secret(kcp_api, ns, "full-00", skr)
    h.create_kyma(kcp_api, ns, "full-00", h.kyma_labels("ga-full", "full-shoot-0"))
    secret_file = tmp_path / "client_secret"
    secret_file.write_text(d.store.client_secret)
    port = controlplane.free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("TETHER_")},
        **localnet.ENV,
        "KUBECONFIG": str(kcp.kubeconfig),
        "TETHER_KCP_NAMESPACE": ns,
        "TETHER_COMPASS_DIRECTOR_URL": d.graphql_url,
        "TETHER_COMPASS_OAUTH_TOKEN_URL": d.token_url,
        "TETHER_COMPASS_OAUTH_CLIENT_ID": d.store.client_id,
        "TETHER_COMPASS_OAUTH_CLIENT_SECRET_FILE": str(secret_file),
        "TETHER_COMPASS_DIRECTOR_CA_FILE": str(d.ca_file),
        "TETHER_COMPASS_INTERVAL_SECONDS": "1",
        "TETHER_COMPASS_LEASE_NAMESPACE": ns,
        "TETHER_COMPASS_BIND": f"127.0.0.1:{port}",
        "TETHER_AUDIT_LOG": "/dev/full",
    }
    log_file = tmp_path / "compass.log"
    with open(log_file, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "command.cli", "compass"],
            env=env,
            cwd=controlplane.REPO_ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=controlplane.die_with_parent(),
        )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            m = h.get_mapping(kcp_api, ns, "full-00")
            if m and (m.get("status") or {}).get("state") == "Ready":
                break
            assert proc.poll() is None, log_file.read_text()[-3000:]
            time.sleep(0.3)
        assert (h.get_mapping(kcp_api, ns, "full-00") or {})["status"]["state"] == "Ready"
        assert (h.agent_secret(skr) or {}).get("TOKEN")  # the token was delivered
        text = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
            if metric_value(text, LOST, reason="write_error") >= 2:
                break
            time.sleep(0.3)
        assert metric_value(text, LOST, reason="write_error") >= 2, text[-3000:]
        for reason in auditwriter.REASONS:  # every reason exported, queue_full still at 0
            assert f'{LOST}{{reason="{reason}"}} ' in text
        assert metric_value(text, LOST, reason="queue_full") == 0
    finally:
        controlplane.stop_group(proc, 30)
    log_text = log_file.read_text()
    assert "audit lines lost" in log_text and os.strerror(errno.ENOSPC) in log_text
    token = (h.agent_secret(skr) or {}).get("TOKEN")
    assert token and token not in log_text
