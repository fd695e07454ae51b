"""Every call into a runtime is bounded, each bound shown by the attack it stops
(``testing.hostile``: a tenant's API server over real TLS), next to a real runtime plane that
still gets through; and a runtime's kubeconfig is parsed, never loaded: a refused field runs
nothing, reads no file and sends no request (``tether.kube.skr_clients`` on the real KCP)."""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import os
import pathlib
import tempfile
import threading
import time
import tracemalloc
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from kubernetes import client

from testing import compassenv, controlplane, hostile, localnet
from tether.base import certs
from tether.kube import gateway, skr_clients
from tether.kube.gateway import bounded

TIMEOUT = 2.0
LIMITS = gateway.Limits(max_bytes=1024 * 1024, max_connections=2, denied=localnet.DENIED)


def runtime(h: hostile.Hostile, limits: gateway.Limits = LIMITS, **kw: object) -> gateway.Kube:
    return gateway.from_runtime_kubeconfig(h.kubeconfig(**kw), limits, timeout=TIMEOUT)  # type: ignore[arg-type]


def timed(call: object) -> tuple[BaseException | None, float]:
    t0 = time.monotonic()
    try:
        call()  # type: ignore[operator]
    except Exception as e:  # noqa: BLE001 - returned for the test to check
        return e, time.monotonic() - t0
    return None, time.monotonic() - t0


def test_a_real_runtime_gets_through_the_bounded_gateway(skr: controlplane.ControlPlane) -> None:
    api = gateway.from_runtime_kubeconfig(skr.kubeconfig.read_bytes(), LIMITS, timeout=TIMEOUT)
    try:
        assert api.request("GET", "/version")["gitVersion"].startswith("v1.")
        assert api.get_or_none(gateway.NAMESPACES, None, "kube-system") is not None
    finally:
        api.close()


@pytest.mark.parametrize("mode", ["trickle", "trickle_head", "hang"])
def test_a_trickling_or_hanging_server_is_cut_at_the_call_deadline(mode: str) -> None:
    # one byte every 0.3 s: each socket read gets data in time, only the wall clock ends it
    # (the body would take 18,000 s, the padded headers 1,200 s)
    with hostile.serving(mode, interval=0.3) as h:
        api = runtime(h)
        error, took = timed(lambda: api.get(gateway.SECRETS, "kyma-system", "x"))
        api.close()
        assert isinstance(error, gateway.DeadlineExceeded), error
        assert error.reason == "DeadlineExceeded"
        assert took < TIMEOUT + 1.5, took
        assert len(h.requests) == 1  # not retried past the deadline


@pytest.mark.parametrize("chunked", [False, True], ids=["announced", "chunked"])
def test_a_huge_answer_is_refused_without_holding_it(chunked: bool) -> None:
    with hostile.serving("huge", size=300 * 1024 * 1024, chunked=chunked) as h:
        api = runtime(h)
        tracemalloc.start()
        try:
            error, _ = timed(lambda: api.get(gateway.SECRETS, "kyma-system", "x"))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        api.close()
        assert isinstance(error, gateway.TooLarge), error
        assert "1048576" in str(error)
        # announced: refused from the header; chunked: read up to the cap, never the 300 MiB
        assert peak < 8 * 1024 * 1024, peak


def test_a_redirect_is_never_followed() -> None:
    with hostile.serving("ok") as inside, hostile.serving("redirect") as h:
        h.location = inside.url + "/api/v1/namespaces/kube-system/secrets"
        api = runtime(h)
        error, _ = timed(lambda: api.get(gateway.SECRETS, "kyma-system", "x"))
        api.close()
        assert isinstance(error, gateway.Redirected), error
        assert inside.requests == [] and inside.connections == 0
        assert "kube-system" not in str(error)  # the target is not echoed back


def test_a_name_resolving_into_a_denied_network_opens_no_connection() -> None:
    with hostile.serving("ok") as h:
        # "localhost" resolves to loopback, which the default deny-list holds
        api = gateway.from_runtime_kubeconfig(
            h.kubeconfig(server=f"https://localhost:{h.port}"), gateway.Limits(), timeout=TIMEOUT
        )
        error, _ = timed(lambda: api.get(gateway.SECRETS, "kyma-system", "x"))
        api.close()
        assert isinstance(error, gateway.AddressRefused), error
        assert h.connections == 0 and h.requests == []


def test_a_literal_denied_address_is_refused_when_parsed() -> None:
    with hostile.serving("ok") as h:
        with pytest.raises(gateway.KubeconfigRefused) as e:
            gateway.from_runtime_kubeconfig(
                h.kubeconfig(server=f"https://127.0.0.2:{h.port}"), LIMITS
            )
        assert e.value.field == "clusters[0].cluster.server"
        assert h.connections == 0


def test_connections_per_runtime_are_capped() -> None:
    with hostile.serving("hang") as h:
        api = runtime(h, gateway.Limits(max_bytes=1024, max_connections=1, denied=localnet.DENIED))
        with concurrent.futures.ThreadPoolExecutor(4) as ex:
            holder = ex.submit(lambda: timed(lambda: api.get(gateway.SECRETS, "a", "b"))[0])
            assert hostile.wait_for(lambda: len(h.requests) == 1)
            # while the one connection hangs, three more calls wait for it, until their deadline
            waiting = list(
                ex.map(
                    lambda _: timed(lambda: api.get(gateway.SECRETS, "a", "b", timeout=0.5)),
                    range(3),
                )
            )
            assert h.connections == 1
            assert holder.result() is not None
        api.close()
        assert all(isinstance(e, gateway.DeadlineExceeded) and took < 1.5 for e, took in waiting), (
            waiting
        )


def test_an_error_answer_is_bounded_and_classified() -> None:
    with hostile.serving("not_found") as h:
        api = runtime(h)
        assert api.get_or_none(gateway.SECRETS, "kyma-system", "x") is None
        api.close()
        assert h.requests[0][2] == "Bearer hostile-test-token"  # the kubeconfig's own token only


# -- refused kubeconfigs: nothing run, no file read, no request sent ----------------------------


def _with_user(h: hostile.Hostile, **user: object) -> bytes:
    doc = yaml.safe_load(h.kubeconfig(token=None))
    doc["users"][0]["user"] = user
    return yaml.safe_dump(doc).encode()


def test_refused_kubeconfig_fields_run_nothing_read_nothing_send_nothing(
    kcp: controlplane.ControlPlane,
    kcp_api: client.ApiClient,
    kcp_namespace: str,
    skr: controlplane.ControlPlane,
    tmp_path: pathlib.Path,
) -> None:
    marker = tmp_path / "ran"
    token_file = tmp_path / "kcp-token"
    token_file.write_text("KCP-SERVICE-ACCOUNT-TOKEN")
    script = tmp_path / "cred.sh"
    script.write_text(
        f'#!/bin/sh\ntouch {marker}\necho \'{{"apiVersion":'
        '"client.authentication.k8s.io/v1","kind":"ExecCredential",'
        '"status":{"token":"x"}}\'\n'
    )
    script.chmod(0o755)
    with hostile.serving("ok") as h:
        plain = yaml.safe_load(h.kubeconfig())
        cases = {
            "exec": (
                _with_user(
                    h,
                    exec={"apiVersion": "client.authentication.k8s.io/v1", "command": str(script)},
                ),
                "users[0].user.exec",
            ),
            "authprov": (
                _with_user(
                    h,
                    **{
                        "auth-provider": {
                            "name": "oidc",
                            "config": {"cmd-path": str(script), "id-token": "x"},
                        }
                    },
                ),
                "users[0].user.auth-provider",
            ),
            "tokenfile": (_with_user(h, tokenFile=str(token_file)), "users[0].user.tokenFile"),
            "certpath": (
                _with_user(
                    h, **{"client-certificate": str(token_file), "client-key": str(token_file)}
                ),
                "users[0].user.client-certificate",
            ),
            "plainhttp": (
                yaml.safe_dump(
                    {
                        **plain,
                        "clusters": [
                            {"name": "hostile", "cluster": {"server": f"http://127.0.0.1:{h.port}"}}
                        ],
                    }
                ).encode(),
                "clusters[0].cluster.server",
            ),
            "loopback": (
                h.kubeconfig(server=f"https://127.0.0.2:{h.port}"),
                "clusters[0].cluster.server",
            ),
            "proxy": (
                yaml.safe_dump(
                    {
                        **plain,
                        "clusters": [
                            {
                                "name": "hostile",
                                "cluster": {
                                    **plain["clusters"][0]["cluster"],
                                    "proxy-url": f"http://127.0.0.1:{h.port}",
                                },
                            }
                        ],
                    }
                ).encode(),
                "clusters[0].cluster.proxy-url",
            ),
        }
        for kyma, (content, _) in cases.items():
            compassenv.create_kubeconfig_secret(kcp_api, kcp_namespace, kyma, content)
        compassenv.create_kubeconfig_secret(kcp_api, kcp_namespace, "good", skr)
        clients = skr_clients.SkrClients(
            gateway.from_kubeconfig(str(kcp.kubeconfig)), kcp_namespace, localnet.policy()
        )
        try:
            for kyma, (_, field) in cases.items():
                with pytest.raises(skr_clients.KubeconfigRefused) as e:
                    clients.get(kyma)
                assert e.value.field == field, (kyma, e.value)
                assert "KCP-SERVICE-ACCOUNT-TOKEN" not in str(e.value)
            good = clients.get("good")
            assert good.request("GET", "/version")["gitVersion"].startswith("v1.")
        finally:
            clients.close()
        assert not marker.exists()
        assert h.connections == 0 and h.requests == []


def test_the_deadline_is_per_thread() -> None:
    seen: list[float | None] = []
    with bounded.deadline(5.0):
        t = threading.Thread(target=lambda: seen.append(bounded.remaining()))
        t.start()
        t.join()
        assert (bounded.remaining() or 0) > 4
    assert seen == [None] and bounded.remaining() is None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _with_client_pair(cert_pem: bytes, key_pem: bytes) -> bytes:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "rt",
            "clusters": [
                {"name": "c", "cluster": {"server": "https://api.rt.example.invalid:6443"}}
            ],
            "users": [
                {
                    "name": "u",
                    "user": {
                        "client-certificate-data": _b64(cert_pem),
                        "client-key-data": _b64(key_pem),
                    },
                }
            ],
            "contexts": [{"name": "rt", "context": {"cluster": "c", "user": "u"}}],
        }
    ).encode()


def _kc_files() -> list[str]:
    """What this process holds open of a runtime's client certificate (memfds or files)."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if "tether-kc-" in target:
                out.append(target)
    return out


def test_a_client_certificate_is_loaded_without_a_file_and_a_bad_key_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    """Building a runtime's client writes its key to no directory (anonymous memory, closed
    at once); a key that does not fit the certificate, or an encrypted one, is refused."""
    made: list[object] = []
    mkdtemp = tempfile.mkdtemp

    def recorded(*args: Any, **kw: Any) -> str:
        made.append(args)
        return str(mkdtemp(*args, **kw))

    monkeypatch.setattr(tempfile, "mkdtemp", recorded)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # a temporary file would land here
    ca = certs.CertificateAuthority.create("bounds-client-ca")
    pair, other = ca.issue("client-a"), ca.issue("client-b")
    api = gateway.from_runtime_kubeconfig(_with_client_pair(pair.cert_pem, pair.key_pem), LIMITS)
    api.close()
    assert made == [] and list(tmp_path.iterdir()) == [] and _kc_files() == []
    with pytest.raises(gateway.KubeConfigError, match="certificates do not load"):
        gateway.from_runtime_kubeconfig(_with_client_pair(pair.cert_pem, other.key_pem), LIMITS)
    encrypted = pair.key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"pw"),
    )
    with pytest.raises(gateway.KubeConfigError, match="certificates do not load"):
        gateway.from_runtime_kubeconfig(_with_client_pair(pair.cert_pem, encrypted), LIMITS)
    assert made == [] and list(tmp_path.iterdir()) == [] and _kc_files() == []


def test_without_memfd_the_client_certificate_goes_through_a_private_directory_removed_at_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    monkeypatch.delattr(os, "memfd_create")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ca = certs.CertificateAuthority.create("bounds-client-ca")
    pair, other = ca.issue("client-a"), ca.issue("client-b")
    api = gateway.from_runtime_kubeconfig(_with_client_pair(pair.cert_pem, pair.key_pem), LIMITS)
    api.close()
    with pytest.raises(gateway.KubeConfigError, match="certificates do not load"):
        gateway.from_runtime_kubeconfig(_with_client_pair(pair.cert_pem, other.key_pem), LIMITS)
    assert list(tmp_path.iterdir()) == []
