"""The enroller against real planes: the KCP (session plane, own namespace) and two runtime
planes of its own (an installed webhook configuration intercepts its plane's ConfigMaps).
The enroller runs in-process (``reconcile.Enroller``: exactly what ``tether enroller``
schedules), one run at a time, its clock shifted where a test needs time to pass."""

from __future__ import annotations

import base64
import datetime
import pathlib

import pytest
from cryptography import x509
from kubernetes import client

from enroller import pki, reconcile, render
from testing import adminenv, compassenv, controlplane, listenerenv
from testing.enrollenv import Env, reads, runtime_objects, secret_pem, writes
from tether.base import certs
from tether.wire import digests

pytestmark = pytest.mark.processes


def test_a_kyma_cr_gets_its_runtime_enrolled_and_nothing_is_written_when_nothing_changed(
    env: Env, runtimes: list[controlplane.ControlPlane]
) -> None:
    rid = env.kyma("alpha", runtimes[0])
    e = env.enroller()
    assert e.run() == {"Ready": 1}
    got = runtime_objects(runtimes[0])
    assert got["deployments"] == ["tether-poller", "tether-webhook"]
    assert got["clusterroles"] == ["tether-poller", "tether-webhook"]
    client_cert = x509.load_pem_x509_certificate(secret_pem(got[render.CLIENT_SECRET], "tls.crt"))
    assert certs.common_name(client_cert) == rid and certs.dns_sans(client_cert) == [
        "alpha.kyma.example.com"
    ]
    assert (
        base64.b64decode(got[render.CLIENT_SECRET].data["listener-url"])
        == b"https://listener.kcp.example.com"
    )
    # the webhook configuration's caBundle verifies the serving certificate
    bundle = pki.load_certificates(base64.b64decode(got["vwc"].webhooks[0].client_config.ca_bundle))
    serving = x509.load_pem_x509_certificate(secret_pem(got[render.SERVING_SECRET], "tls.crt"))
    assert pki.issued_by(serving, bundle) and pki.issued_by(client_cert, bundle)
    assert "tether-webhook.tether-system.svc" in certs.dns_sans(serving)
    # the listener's trust bundle is published next to the CA
    trust = (
        client.CoreV1Api(env.api)
        .read_namespaced_config_map("tether-runtime-ca", env.ns)
        .data["ca.crt"]
    )
    assert pki.issued_by(client_cert, pki.load_certificates(trust.encode()))
    kyma = client.CustomObjectsApi(env.api).get_namespaced_custom_object(
        "operator.kyma-project.io", "v1beta2", env.ns, "kymas", "alpha"
    )
    assert reconcile.FINALIZER in kyma["metadata"]["finalizers"]
    assert env.condition("alpha", "Enrolled")["status"] == "True"
    assert env.condition("alpha", "CertificateValid")["status"] == "True"
    ready = env.condition("alpha", "Ready")
    assert (ready["status"], ready["reason"]) == (
        "False",
        "NoAvailableReplicas",
    )  # no pods run here
    assert "Enrolled" in env.events("alpha")
    # the Version column: the image the runtime is given (the bundle's, none set here)
    bundled = {
        c["image"]
        for o in render.load_bundle(render.BUNDLE_FILE.read_text())
        if o["kind"] == "Deployment"
        for c in o["spec"]["template"]["spec"]["containers"]
    }
    assert len(bundled) == 1  # tether:<setup.cfg's version> (make bundle)
    assert env.enrollment("alpha")["status"]["version"] in bundled  # type: ignore[index]
    assert (
        "certificate_issued" in env.audit_text.getvalue()
        and "PRIVATE" not in env.audit_text.getvalue()
    )

    before_w, before_r = writes(e), reads(e)
    rv = env.enrollment("alpha")["metadata"]["resourceVersion"]  # type: ignore[index]
    assert e.run() == {"Ready": 1}
    assert writes(e) == before_w  # nothing changed: nothing written in the runtime
    assert (
        reads(e) - before_r == 3
    )  # client Secret, webhook configuration, webhook Deployment (not serving)
    assert env.enrollment("alpha")["metadata"]["resourceVersion"] == rv  # nor in the KCP


def test_the_runtime_enrollment_is_owned_by_its_kyma_cr(env: Env) -> None:
    """An ownerReference to the Kyma CR (issue 28, item 2): written at creation, and given to
    an enrollment that lost it (or predates it) at its next write."""
    env.kyma("iota", None)  # no kubeconfig Secret: a failing runtime still has its enrollment
    e = env.enroller()
    e.run()
    custom = client.CustomObjectsApi(env.api)
    uid = custom.get_namespaced_custom_object(
        "operator.kyma-project.io", "v1beta2", env.ns, "kymas", "iota"
    )["metadata"]["uid"]
    want = [
        {
            "apiVersion": "operator.kyma-project.io/v1beta2",
            "kind": "Kyma",
            "name": "iota",
            "uid": uid,
            "controller": False,
        }
    ]
    assert env.enrollment("iota")["metadata"]["ownerReferences"] == want  # type: ignore[index]
    custom.patch_namespaced_custom_object(
        "tether.kyma-project.io",
        "v1alpha1",
        env.ns,
        "runtimeenrollments",
        "iota",
        {"metadata": {"ownerReferences": None}},
    )
    assert "ownerReferences" not in env.enrollment("iota")["metadata"]  # type: ignore[index]
    e.run()
    assert env.enrollment("iota")["metadata"]["ownerReferences"] == want  # type: ignore[index]


def test_kubectl_wait_works_for_every_status_object(
    env: Env, runtimes: list[controlplane.ControlPlane]
) -> None:
    """The documented ``kubectl wait`` forms (docs/operations.md, "Waiting with kubectl";
    issue 28, item 2), run with the control plane's kubectl against the KCP: conditions for
    the RuntimeEnrollment and the CompassMapping, a status field for the
    RuntimeDelivery and the RuntimeStateSummary (no conditions: they are counts)."""
    controlplane.install_crds(env.api, *listenerenv.CRD_FILES, adminenv.MAPPING_CRD)
    env.kyma("kappa", runtimes[0], runtime_id="rt-kappa")
    env.enroller().run()

    def wait(*args: str, timeout: str = "20s") -> int:
        r = env.kcp.kubectl("wait", "-n", env.ns, f"--timeout={timeout}", *args)
        return r.returncode

    assert wait("--for=condition=Enrolled", "runtimeenrollment/kappa") == 0
    assert (
        wait("--for=condition=Ready", "runtimeenrollment/kappa", timeout="1s") != 0
    )  # no pods run here
    custom = client.CustomObjectsApi(env.api)
    now = "2026-12-01T10:00:00Z"
    for plural, status in (
        ("runtimedeliveries", {"updatedAt": now, "lastChangeAt": now}),
        ("runtimestatesummaries", {"updatedAt": now}),
    ):
        custom.create_namespaced_custom_object(
            "tether.kyma-project.io",
            "v1alpha1",
            env.ns,
            plural,
            {
                "apiVersion": "tether.kyma-project.io/v1alpha1",
                "kind": "X",
                "metadata": {"name": "tether-rt-w"},
                "spec": {"runtimeId": "rt-w"},
            }
            | {
                "kind": {
                    "runtimedeliveries": "RuntimeDelivery",
                    "runtimestatesummaries": "RuntimeStateSummary",
                }[plural]
            },
        )
        assert (
            wait("--for=jsonpath={.status.updatedAt}", f"{plural}/tether-rt-w", timeout="1s") != 0
        )
        custom.patch_namespaced_custom_object_status(
            "tether.kyma-project.io", "v1alpha1", env.ns, plural, "tether-rt-w", {"status": status}
        )
        assert wait("--for=jsonpath={.status.updatedAt}", f"{plural}/tether-rt-w") == 0
    assert wait("--for=jsonpath={.status.lastChangeAt}", "runtimedelivery/tether-rt-w") == 0
    custom.create_namespaced_custom_object(
        "tether.kyma-project.io",
        "v1alpha1",
        env.ns,
        "compassmappings",
        {
            "apiVersion": "tether.kyma-project.io/v1alpha1",
            "kind": "CompassMapping",
            "metadata": {"name": "kappa"},
            "spec": {},
        },
    )
    custom.patch_namespaced_custom_object_status(
        "tether.kyma-project.io",
        "v1alpha1",
        env.ns,
        "compassmappings",
        "kappa",
        {
            "status": {
                "state": "Ready",
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "Ready",
                        "message": "registered and configured",
                        "lastTransitionTime": now,
                    }
                ],
            }
        },
    )
    assert wait("--for=condition=Ready", "compassmapping/kappa") == 0
    assert wait("--for=jsonpath={.status.state}=Ready", "compassmapping/kappa") == 0


def test_deleted_objects_in_the_runtime_are_restored_in_one_run(
    env: Env, runtimes: list[controlplane.ControlPlane]
) -> None:
    env.kyma("beta", runtimes[1])
    e = env.enroller()
    e.run()
    serial = x509.load_pem_x509_certificate(
        secret_pem(runtime_objects(runtimes[1])[render.CLIENT_SECRET], "tls.crt")
    ).serial_number
    api = runtimes[1].api_client()
    client.AdmissionregistrationV1Api(api).delete_validating_webhook_configuration(
        render.WEBHOOK_CONFIG
    )
    client.CoreV1Api(api).delete_namespaced_secret(render.CLIENT_SECRET, render.NAMESPACE)
    api.close()
    assert e.run() == {"Ready": 1}
    got = runtime_objects(runtimes[1])
    assert "vwc" in got and render.CLIENT_SECRET in got
    assert e.stats.applies.labels("repaired")._value.get() == 1
    # a lost client Secret means a new certificate (its key is gone with it)
    assert (
        x509.load_pem_x509_certificate(
            secret_pem(got[render.CLIENT_SECRET], "tls.crt")
        ).serial_number
        != serial
    )
    assert "Renewed" in env.events("beta")
    # a client Secret whose key is not its certificate's (edited by hand) is reissued
    api = runtimes[1].api_client()
    other = certs.CertificateAuthority.create("x").issue("x", client=True)
    client.CoreV1Api(api).patch_namespaced_secret(
        render.CLIENT_SECRET,
        render.NAMESPACE,
        {"data": {"tls.key": base64.b64encode(other.key_pem).decode()}},
    )
    api.close()
    e.run()
    fixed = runtime_objects(runtimes[1])[render.CLIENT_SECRET]
    assert reconcile._key_matches(secret_pem(fixed, "tls.crt"), fixed.data["tls.key"])
    assert "certificate_issued client key_mismatch" in env.audit_text.getvalue()


def test_a_new_image_is_rolled_out_to_every_runtime(
    env: Env, runtimes: list[controlplane.ControlPlane]
) -> None:
    env.kyma("eta", runtimes[0], runtime_id="rt-eta")
    env.enroller().run()
    e = env.enroller(image="registry.example.com/tether:0.3.0")  # a new release, a new enroller
    assert e.run() == {"Ready": 1}
    api = runtimes[0].api_client()
    images = {
        c.image
        for d in client.AppsV1Api(api).list_namespaced_deployment(render.NAMESPACE).items
        for c in d.spec.template.spec.containers
    }
    api.close()
    assert images == {"registry.example.com/tether:0.3.0"}
    assert e.stats.applies.labels("updated")._value.get() == 1
    assert env.enrollment("eta")["status"]["version"] == "registry.example.com/tether:0.3.0"  # type: ignore[index]


def test_a_new_listener_url_re_renders_the_runtimes_this_kcps_ca_enrolled(
    env: Env, runtimes: list[controlplane.ControlPlane]
) -> None:
    """The listener moved to a new ingress name: the runtimes still name the old URL, but
    their certificates are of this KCP's CA, so they are ours (not another KCP's) and get
    the new URL."""
    env.kyma("theta", runtimes[0], runtime_id="rt-theta")
    assert env.enroller().run() == {"Ready": 1}
    moved = "https://listener-new.kcp.example.com"
    try:
        assert env.enroller(listener_url=moved).run() == {"Ready": 1}
        api = runtimes[0].api_client()
        secret = client.CoreV1Api(api).read_namespaced_secret(
            render.CLIENT_SECRET, render.NAMESPACE
        )
        api.close()
        assert base64.b64decode(secret.data["listener-url"]).decode() == moved
    finally:  # the shared runtime plane back on the URL the other tests' enrollers have
        assert env.enroller().run() == {"Ready": 1}


def test_an_image_pull_secret_is_copied_into_the_runtime_and_pulled_with(
    env: Env, runtimes: list[controlplane.ControlPlane]
) -> None:
    """TETHER_ENROLLER_IMAGE_PULL_SECRET_FILE (issue 28, item 3): the runtime gets the
    Secret tether-image-pull (kubernetes.io/dockerconfigjson) and every Tether pod spec
    names it; a changed credential is applied again (removal takes it away: the next test)."""
    config = b'{"auths": {"registry.example.com": {"auth": "dXNlcjpwYXNz"}}}'
    env.kyma("theta", runtimes[1], runtime_id="rt-theta")
    assert env.enroller(image_pull_secret=config).run() == {"Ready": 1}
    api = runtimes[1].api_client()
    try:
        secret = runtime_objects(runtimes[1])[render.PULL_SECRET]
        assert secret.type == "kubernetes.io/dockerconfigjson"
        assert secret_pem(secret, ".dockerconfigjson") == config
        deployments = client.AppsV1Api(api).list_namespaced_deployment(render.NAMESPACE).items
        assert {d.metadata.name for d in deployments} == {"tether-webhook", "tether-poller"}
        assert all(
            [r.name for r in d.spec.template.spec.image_pull_secrets or []] == [render.PULL_SECRET]
            for d in deployments
        )
        rotated = b'{"auths": {"registry.example.com": {"auth": "dXNlcjpuZXc="}}}'
        e = env.enroller(image_pull_secret=rotated)
        e.run()
        assert e.stats.applies.labels("updated")._value.get() == 1
        assert (
            secret_pem(runtime_objects(runtimes[1])[render.PULL_SECRET], ".dockerconfigjson")
            == rotated
        )
    finally:
        api.close()


def test_certificates_are_renewed_at_two_thirds_of_their_lifetime(
    env: Env, runtimes: list[controlplane.ControlPlane]
) -> None:
    env.kyma("gamma", runtimes[0], runtime_id="rt-gamma")
    e = env.enroller(cert_lifetime=datetime.timedelta(seconds=90))
    e.run()
    first = runtime_objects(runtimes[0])
    c1 = x509.load_pem_x509_certificate(secret_pem(first[render.CLIENT_SECRET], "tls.crt"))
    env.offset = datetime.timedelta(seconds=10)
    e.run()
    assert (
        x509.load_pem_x509_certificate(
            secret_pem(runtime_objects(runtimes[0])[render.CLIENT_SECRET], "tls.crt")
        ).serial_number
        == c1.serial_number
    )
    env.offset = (
        pki.renew_at(c1) - datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=1)
    )
    e.run()
    second = runtime_objects(runtimes[0])
    c2 = x509.load_pem_x509_certificate(secret_pem(second[render.CLIENT_SECRET], "tls.crt"))
    s2 = x509.load_pem_x509_certificate(secret_pem(second[render.SERVING_SECRET], "tls.crt"))
    assert c2.serial_number != c1.serial_number and certs.common_name(c2) == "rt-gamma"
    assert (
        s2.serial_number
        != x509.load_pem_x509_certificate(
            secret_pem(first[render.SERVING_SECRET], "tls.crt")
        ).serial_number
    )
    assert "Renewed" in env.events("gamma")
    assert "certificate_issued client expiring" in env.audit_text.getvalue()
    # the runtime's digest key (docs/watches.md): written once, kept by the renewal's re-apply
    key = secret_pem(first[render.CLIENT_SECRET], digests.KEY)
    assert len(key) == digests.MIN_KEY_BYTES
    assert secret_pem(second[render.CLIENT_SECRET], digests.KEY) == key
    assert base64.b64encode(key).decode() not in env.audit_text.getvalue()


def test_a_client_secret_without_its_digest_key_gets_one_and_keeps_it(
    env: Env, runtimes: list[controlplane.ControlPlane]
) -> None:
    """A Secret an older enroller wrote (or edited by hand) carries no key: the next run
    applies one, whatever the installed digest says; later runs keep it."""
    env.kyma("delta", runtimes[1], runtime_id="rt-delta")
    e = env.enroller()
    e.run()
    api = runtimes[1].api_client()
    try:
        core = client.CoreV1Api(api)
        core.patch_namespaced_secret(
            render.CLIENT_SECRET,
            render.NAMESPACE,
            [{"op": "remove", "path": f"/data/{digests.KEY}"}],
        )
        assert (
            digests.KEY
            not in core.read_namespaced_secret(render.CLIENT_SECRET, render.NAMESPACE).data
        )
        before = writes(e)
        e.run()
        assert writes(e) > before  # applied although nothing else changed
        key = secret_pem(
            core.read_namespaced_secret(render.CLIENT_SECRET, render.NAMESPACE), digests.KEY
        )
        assert len(key) == digests.MIN_KEY_BYTES
        before = writes(e)
        e.run()
        assert writes(e) == before  # the key there: nothing written
        assert (
            secret_pem(
                core.read_namespaced_secret(render.CLIENT_SECRET, render.NAMESPACE), digests.KEY
            )
            == key
        )
    finally:
        api.close()


def test_a_ca_rollover_reissues_every_runtime_and_then_drops_the_old_ca(
    env: Env, runtimes: list[controlplane.ControlPlane]
) -> None:
    env.kyma("delta", runtimes[1], runtime_id="rt-delta")
    # a CA of 6000 s rolls over at two thirds of its life (~3900 s in); certificates of 600 s
    e = env.enroller(
        ca_lifetime=datetime.timedelta(seconds=6000),
        cert_lifetime=datetime.timedelta(seconds=600),
        rollover_propagation=datetime.timedelta(seconds=60),
    )
    e.run()
    old_ca = e.cas.ensure().current.cert
    env.offset = datetime.timedelta(seconds=3800)  # renewed (expired), still from the old CA
    e.run()

    def client_cert() -> x509.Certificate:
        return x509.load_pem_x509_certificate(
            secret_pem(runtime_objects(runtimes[1])[render.CLIENT_SECRET], "tls.crt")
        )

    def trusted() -> list[x509.Certificate]:
        pem = (
            client.CoreV1Api(env.api)
            .read_namespaced_config_map("tether-runtime-ca", env.ns)
            .data["ca.crt"]
        )
        return pki.load_certificates(pem.encode())

    env.offset = datetime.timedelta(seconds=3950)  # past two thirds of the CA's life
    assert e.run() == {"Ready": 1}
    ca = e.cas.ensure()
    assert ca.current.cert != old_ca and ca.previous == old_ca
    assert trusted() == [ca.current.cert, old_ca]  # both trusted while the runtimes move over
    # not yet: the listener may not have loaded the new bundle; the old certificate stays
    assert pki.issued_by(client_cert(), [old_ca])
    env.offset = datetime.timedelta(seconds=3950 + 61)  # past the propagation time
    assert e.run() == {"Ready": 1}
    ca = e.cas.ensure()
    assert ca.previous is None  # every runtime reissued: the old CA is dropped
    assert pki.issued_by(client_cert(), [ca.current.cert]) and not pki.issued_by(
        client_cert(), [old_ca]
    )
    serving = x509.load_pem_x509_certificate(
        secret_pem(runtime_objects(runtimes[1])[render.SERVING_SECRET], "tls.crt")
    )
    assert pki.issued_by(serving, [ca.current.cert])
    assert trusted() == [ca.current.cert]
    audit = env.audit_text.getvalue()
    assert "ca_rollover_started" in audit and "ca_rollover_finished" in audit
    assert "certificate_issued client foreign_issuer" in audit


def test_a_broken_runtime_is_reported_and_the_others_are_enrolled(
    env: Env, runtimes: list[controlplane.ControlPlane], tmp_path: pathlib.Path
) -> None:
    env.kyma("good", runtimes[0], runtime_id="rt-good")
    env.kyma("nokubeconfig", None)
    env.kyma("nodomain", runtimes[0], domain=None)
    dead = controlplane.ControlPlane("dead")  # a kubeconfig whose API server never runs
    try:
        dead._write_pki()
        env.kyma("unreachable", dead)
        e = env.enroller()
        assert e.run() == {"Ready": 1, "Failed": 3}
    finally:
        dead.stop()
    reasons = {
        n: env.condition(n, "Ready")["reason"] for n in ("nokubeconfig", "nodomain", "unreachable")
    }
    assert reasons == {
        "nokubeconfig": "KubeconfigMissing",
        "nodomain": "DomainMissing",
        "unreachable": "Unreachable",
    }
    assert env.condition("good", "Enrolled")["status"] == "True"
    assert e.stats.failures.labels("Unreachable")._value.get() == 1
    assert "Failed" in env.events("nodomain")
    assert not any(
        "PRIVATE" in c["message"] or "client-key-data" in c["message"]
        for n in reasons
        for c in env.enrollment(n)["status"]["conditions"]
    )  # type: ignore[index]


def test_a_deleted_kyma_cr_leaves_a_clean_runtime(
    env: Env, runtimes: list[controlplane.ControlPlane]
) -> None:
    env.kyma("epsilon", runtimes[1], runtime_id="rt-epsilon")
    e = env.enroller(image_pull_secret=b'{"auths": {}}')  # removed with the rest
    e.run()
    assert runtime_objects(runtimes[1])["deployments"]
    assert render.PULL_SECRET in runtime_objects(runtimes[1])
    custom = client.CustomObjectsApi(env.api)
    custom.delete_namespaced_custom_object(
        "operator.kyma-project.io", "v1beta2", env.ns, "kymas", "epsilon"
    )
    # the finalizer holds it until Tether is gone from the runtime
    assert custom.get_namespaced_custom_object(
        "operator.kyma-project.io", "v1beta2", env.ns, "kymas", "epsilon"
    )["metadata"]["deletionTimestamp"]
    e.react()
    got = runtime_objects(runtimes[1])
    assert got["deployments"] == [] and got["clusterroles"] == [] and "vwc" not in got
    assert render.CLIENT_SECRET not in got and render.PULL_SECRET not in got
    with pytest.raises(client.ApiException) as gone:
        custom.get_namespaced_custom_object(
            "operator.kyma-project.io", "v1beta2", env.ns, "kymas", "epsilon"
        )
    assert gone.value.status == 404
    assert env.enrollment("epsilon") is None
    assert "runtime_removed" in env.audit_text.getvalue()


def test_an_unreachable_runtime_does_not_block_the_deletion_past_the_timeout(env: Env) -> None:
    """Installed, then its runtime unreachable: the deletion waits at most the timeout.
    A plane of its own (these planes run no namespace controller: a removal's Namespace
    stays Terminating, and nothing can be installed there again)."""
    with controlplane.planes("zeta-rt") as p:
        env.kyma("zeta", p["zeta-rt"], runtime_id="rt-zeta")
        assert env.enroller().run() == {"Ready": 1}, env.condition("zeta", "Ready")
    dead = controlplane.ControlPlane("dead2")  # its kubeconfig now names no API server
    try:
        dead._write_pki()
        client.CoreV1Api(env.api).delete_namespaced_secret("kubeconfig-zeta", env.ns)
        compassenv.create_kubeconfig_secret(env.api, env.ns, "zeta", dead)
        e = env.enroller(removal_timeout=0.0)  # a fresh process: the runtime not reachable
        client.CustomObjectsApi(env.api).delete_namespaced_custom_object(
            "operator.kyma-project.io", "v1beta2", env.ns, "kymas", "zeta"
        )
        e.run()
    finally:
        dead.stop()
    with pytest.raises(client.ApiException) as gone:
        client.CustomObjectsApi(env.api).get_namespaced_custom_object(
            "operator.kyma-project.io", "v1beta2", env.ns, "kymas", "zeta"
        )
    assert gone.value.status == 404
    assert "RemovalTimedOut" in env.events("zeta")


def test_a_runtime_never_written_to_gets_no_finalizer_and_goes_at_once(env: Env) -> None:
    """Issue 42: a Kyma CR whose kubeconfig is missing (or whose runtime cannot be reached)
    carried the finalizer and was held on deletion for the removal timeout (5 min 8 s)."""
    dead = controlplane.ControlPlane("dead3")
    try:
        dead._write_pki()
        env.kyma("eta", dead)
        env.kyma("theta", None)  # no kubeconfig
        e = env.enroller()
        assert e.run() == {"Failed": 2}
    finally:
        dead.stop()
    custom = client.CustomObjectsApi(env.api)
    for name in ("eta", "theta"):
        obj = custom.get_namespaced_custom_object(
            "operator.kyma-project.io", "v1beta2", env.ns, "kymas", name
        )
        assert reconcile.FINALIZER not in (obj["metadata"].get("finalizers") or [])
        custom.delete_namespaced_custom_object(
            "operator.kyma-project.io", "v1beta2", env.ns, "kymas", name
        )
        with pytest.raises(client.ApiException) as gone:  # no run needed: nothing holds it
            custom.get_namespaced_custom_object(
                "operator.kyma-project.io", "v1beta2", env.ns, "kymas", name
            )
        assert gone.value.status == 404
