"""Only the API server's word moves the KCP (issue 38, item 4), on the real planes.

A pod of the runtime reaches the webhook's Service and posts AdmissionReviews the API server
never sent: DELETEs of objects that never existed. Each becomes a tombstone of a key never
stored (the forwarder reads the object back, finds it absent), which the listener keeps
apart from the runtime's records quota (docs/listener.md, "Unbacked tombstones"). And where
the API server can present a client certificate, the webhook refuses every other caller
(``TETHER_WEBHOOK_CLIENT_CA_FILE``, docs/webhook.md "Who may call the webhook"), shown here
with real TLS clients (the session's SKR apiserver has no admission configuration) and in
test_apiserver_identity.py with a kube-apiserver that presents the certificate.
"""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import pathlib
import ssl
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from listener.storage import records
from testing import controlplane
from testing import webhookstack as stack
from testing.listenerenv import Env, ListenerProcess, Runtime, add_runtime
from tether.base import certs
from tether.kube import apitypes

pytestmark = pytest.mark.processes
QUOTA_RECORDS = 12
UNBACKED = 5
FORGED = 500
RCM = apitypes.RUNTIME_CONFIGMAPS


def send(url: str, ctx: ssl.SSLContext, body: bytes) -> tuple[int, bytes]:
    host, port = url.removeprefix("https://").split(":")
    conn = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=30)
    try:
        conn.request("POST", "/validate", body, {"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def stored(env: Env, rid: str) -> list[dict[str, Any]]:
    resp: Any = client.CustomObjectsApi(env.api).list_namespaced_custom_object(
        RCM.group,
        RCM.version,
        env.namespace,
        RCM.plural,
        label_selector=f"{apitypes.RUNTIME_ID_LABEL}={rid}",
    )
    return list(resp["items"])


def eventually(check: Callable[[], Any], what: str, timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"not within {timeout:.0f}s: {what}"
        time.sleep(0.3)


@pytest.fixture(scope="module")
def small_listener(listener_env: Env) -> Iterator[ListenerProcess]:
    """A listener with a small records quota, so that forged tombstones counted against it
    would fill it many times over."""
    p = ListenerProcess(
        listener_env,
        "forged",
        TETHER_LISTENER_QUOTA_RECORDS=str(QUOTA_RECORDS),
        TETHER_LISTENER_UNBACKED_TOMBSTONES=str(UNBACKED),
    )
    yield p
    p.stop()


def webhook(
    tmp: pathlib.Path,
    rt: Runtime,
    listener: ListenerProcess,
    env: Env,
    skr: controlplane.ControlPlane,
    **extra: str,
) -> stack.WebhookProcess:
    return stack.WebhookProcess(
        tmp,
        {
            "TETHER_RUNTIME_ID": rt.id,
            "TETHER_LISTENER_URL": listener.url,
            "TETHER_LISTENER_CA_FILE": str(env.server_ca_file),
            "TETHER_CLIENT_CERT_FILE": str(rt.cert_file),
            "TETHER_CLIENT_KEY_FILE": str(rt.key_file),
            "TETHER_KUBECONFIG": str(skr.kubeconfig),
            **extra,
        },
    ).start()


def test_forged_deletions_from_a_pod_leave_the_runtimes_quota_to_its_real_objects(
    skr: controlplane.ControlPlane,
    skr_api: client.ApiClient,
    namespace: str,
    listener_env: Env,
    small_listener: ListenerProcess,
    tmp_path: pathlib.Path,
) -> None:
    rt = add_runtime(listener_env, f"rt-{uuid.uuid4().hex[:10]}")
    proc = webhook(tmp_path, rt, small_listener, listener_env, skr)
    vwc = stack.vwc_body(
        f"tether-forged-{namespace}", proc.url + "/validate", proc.ca.cert_pem, namespace
    )
    stack.register(skr_api, vwc)
    try:
        # the attack: a caller without the API server's identity (no client certificate)
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            answers = list(
                pool.map(
                    lambda i: send(proc.url, proc.context(), stack.review(namespace, f"ghost-{i}"))[
                        0
                    ],
                    range(FORGED),
                )
            )
        assert answers == [200] * FORGED  # an open webhook (the default) admits them all
        # every one read back as gone and acknowledged (a batch re-sent after a timeout
        # comes back duplicate)
        eventually(
            lambda: (
                proc.metric("tether_webhook_readbacks_total", result="tombstone") >= FORGED
                and sum(
                    proc.metric("tether_webhook_forwarded_records_total", outcome=o)
                    for o in ("persisted", "duplicate")
                )
                >= FORGED
            ),
            f"{FORGED} forged tombstones sent: {proc.log()}",
            timeout=300,
        )
        ghosts = [o for o in stored(listener_env, rt.id) if records.is_unbacked(o["metadata"])]
        assert 0 < len(ghosts) <= UNBACKED
        assert small_listener.metrics().count("unbacked_tombstones_evicted_total") >= 1
        # the runtime's real writes: its whole quota is still its own (these, and the
        # victim below)
        core = client.CoreV1Api(skr_api)
        names = [f"real-{i}" for i in range(QUOTA_RECORDS - 1)]
        for name in names:
            core.create_namespaced_config_map(
                namespace,
                client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data={"k": name}),
            )

        def real() -> set[str]:
            return {
                o["spec"]["name"]
                for o in stored(listener_env, rt.id)
                if not records.is_unbacked(o["metadata"]) and not o["spec"]["deleted"]
            }

        eventually(lambda: real() >= set(names), f"every real ConfigMap stored: {real()}")
        # a forged DELETE (at a forged, huge resourceVersion) of a name the runtime then
        # really uses cannot hide the object: the tombstone's resourceVersion is the API
        # server's, so the real object's record is newer and replaces it
        assert send(proc.url, proc.context(), stack.review(namespace, "victim"))[0] == 200

        def victim() -> dict[str, Any] | None:
            return next(
                (o for o in stored(listener_env, rt.id) if o["spec"]["name"] == "victim"), None
            )

        forged = eventually(victim, "the forged tombstone of victim")
        assert forged["spec"]["deleted"] and records.is_unbacked(forged["metadata"])
        assert int(forged["spec"]["resourceVersion"]) < 999999999999
        created = core.create_namespaced_config_map(
            namespace,
            client.V1ConfigMap(metadata=client.V1ObjectMeta(name="victim"), data={"k": "real"}),
        )
        eventually(
            lambda: (
                (v := victim()) is not None
                and not v["spec"]["deleted"]
                and v["spec"]["resourceVersion"] == created.metadata.resource_version
            ),
            f"the real victim stored over the forged tombstone: {victim()}",
        )
    finally:
        stack.unregister(skr_api, vwc["metadata"]["name"])
        proc.stop()


def test_with_a_client_ca_only_the_api_servers_certificate_may_call(
    skr: controlplane.ControlPlane,
    listener_env: Env,
    small_listener: ListenerProcess,
    namespace: str,
    tmp_path: pathlib.Path,
) -> None:
    rt = add_runtime(listener_env, f"rt-{uuid.uuid4().hex[:10]}")
    apiserver_ca = certs.CertificateAuthority.create("skr-webhook-client-ca")
    ca_file = tmp_path / "webhook-client-ca.crt"
    ca_file.write_bytes(apiserver_ca.cert_pem)
    proc = webhook(
        tmp_path,
        rt,
        small_listener,
        listener_env,
        skr,
        TETHER_WEBHOOK_CLIENT_CA_FILE=str(ca_file),
        TETHER_WEBHOOK_CLIENT_NAMES="kube-apiserver-webhook-client",
    )
    try:

        def with_cert(ca: certs.CertificateAuthority, cn: str) -> ssl.SSLContext:
            tag = uuid.uuid4().hex[:6]
            c, k = tmp_path / f"{tag}.crt", tmp_path / f"{tag}.key"
            ca.issue(cn, client=True).write(c, k)
            ctx = proc.context()
            ctx.load_cert_chain(str(c), str(k))
            return ctx

        before = proc.metric("tether_webhook_admission_requests_total")
        # no certificate (any pod): 401, nothing admitted; the probes still answer
        status, body = send(proc.url, proc.context(), stack.review(namespace, "forged"))
        assert status == 401 and json.loads(body)["error"] == "unauthenticated"
        assert proc.get("/readyz")[0] == 200 and proc.get("/healthz")[0] == 200
        # a certificate of another CA (the runtime's own client certificate, say): refused
        # in the handshake
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            send(
                proc.url,
                with_cert(
                    certs.CertificateAuthority.create("other"), "kube-apiserver-webhook-client"
                ),
                stack.review(namespace, "x"),
            )
        # the right CA, another name: 403
        status, body = send(
            proc.url, with_cert(apiserver_ca, "some-pod"), stack.review(namespace, "forged")
        )
        assert status == 403 and json.loads(body)["error"] == "forbidden"
        assert proc.metric("tether_webhook_admission_requests_total") == before
        assert proc.metric("tether_webhook_callers_refused_total", reason="no-certificate") == 1
        assert proc.metric("tether_webhook_callers_refused_total", reason="name") == 1
        # the API server's certificate: admitted as ever
        status, body = send(
            proc.url,
            with_cert(apiserver_ca, "kube-apiserver-webhook-client"),
            stack.review(namespace, "really-deleted"),
        )
        assert status == 200 and json.loads(body)["response"]["allowed"] is True
        assert proc.metric("tether_webhook_admission_requests_total") == before + 1
    finally:
        proc.stop()
