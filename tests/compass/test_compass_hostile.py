"""Compass next to hostile runtimes (``testing.hostile``): a runtime whose API server
trickles, answers hundreds of MiB, redirects into the KCP or hangs after its headers, and one
whose kubeconfig runs a command, cost the run at most their calls' deadlines; the well-behaved
runtime beside them gets its token, memory stays bounded, and each is reported with the
bound it broke (issue 22)."""

from __future__ import annotations

import pathlib
import time
import tracemalloc

import yaml
from kubernetes import client

from testing import compassenv as h
from testing import controlplane, hostile

SKR_TIMEOUT = 2.0


def _condition_text(m: dict | None) -> str:  # type: ignore[type-arg]
    st = (m or {}).get("status") or {}
    return " ".join(f"{c.get('reason')}: {c.get('message')}" for c in st.get("conditions") or [])


def test_hostile_runtimes_cost_their_deadline_and_the_good_one_gets_its_token(
    kcp_api: client.ApiClient,
    kcp_namespace: str,
    mapping_crd: str,
    clean_director: h.Director,
    skr: controlplane.ControlPlane,
    kcp: controlplane.ControlPlane,
    tmp_path: pathlib.Path,
) -> None:
    ns, tenant = kcp_namespace, "ga-hostile"
    marker = tmp_path / "ran"
    with (
        hostile.serving("trickle", interval=0.3) as trickle,
        hostile.serving("huge", size=300 * 1024 * 1024, chunked=True) as huge,
        hostile.serving("redirect", location=kcp.url + "/api/v1/secrets") as redirect,
        hostile.serving("hang") as hang,
    ):
        exec_config = yaml.safe_load(hang.kubeconfig(token=None))
        exec_config["users"][0]["user"] = {
            "exec": {
                "apiVersion": "client.authentication.k8s.io/v1",
                "command": "/bin/sh",
                "args": ["-c", f"touch {marker}"],
            }
        }
        kubeconfigs = {
            "h-trickle": trickle.kubeconfig(),
            "h-huge": huge.kubeconfig(),
            "h-redirect": redirect.kubeconfig(),
            "h-hang": hang.kubeconfig(),
            "h-exec": yaml.safe_dump(exec_config).encode(),
        }
        for i, (name, content) in enumerate(kubeconfigs.items()):
            h.create_kubeconfig_secret(kcp_api, ns, name, content)
            h.create_kyma(kcp_api, ns, name, h.kyma_labels(tenant, f"hostile-{i}"))
        h.create_kubeconfig_secret(kcp_api, ns, "h-good", skr)
        h.create_kyma(kcp_api, ns, "h-good", h.kyma_labels(tenant, "hostile-good"))
        svc, _ = h.make_service(
            kcp_api, h.make_settings(clean_director, ns, concurrency=2, skr_timeout=SKR_TIMEOUT)
        )
        tracemalloc.start()
        try:
            t0 = time.monotonic()
            svc.job.run()
            took = time.monotonic() - t0
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        # six runtimes, two at a time; a hostile one costs at most a few calls' deadlines
        assert took < 3 * 3 * (SKR_TIMEOUT + 1), took
        assert peak < 64 * 1024 * 1024, peak  # 300 MiB offered, at most one cap per call read
        h.run_until(
            svc,
            lambda: (
                ((h.get_mapping(kcp_api, ns, "h-good") or {}).get("status") or {}).get("state")
                == "Ready"
            ),
            runs=5,
        )
        assert h.agent_secret(skr) is not None
        expected = {
            "h-trickle": "DeadlineExceeded",
            "h-huge": "ResponseTooLarge",
            "h-redirect": "RedirectRefused",
            "h-hang": "DeadlineExceeded",
            "h-exec": "KubeconfigRefused",
        }
        for name, why in expected.items():
            text = _condition_text(h.get_mapping(kcp_api, ns, name))
            assert why in text, (name, text)
        assert "users[0].user.exec" in _condition_text(h.get_mapping(kcp_api, ns, "h-exec"))
        assert not marker.exists()
        assert hang.requests and all(
            auth == "Bearer hostile-test-token" for _, _, auth in hang.requests
        )
        svc.close()
