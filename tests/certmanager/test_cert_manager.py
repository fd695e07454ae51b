"""The cert-manager overlay (``manifests/overlays/cert-manager``) with the real cert-manager:
its controller and cainjector built from the Go module ``github.com/cert-manager/cert-manager``
(``hack/build-cert-manager.sh``) and run as processes against a plane of their own, the
CRDs from that module. The overlay's Issuers and Certificates are applied as rendered; then:

* the listener's serving Secret is issued, valid, for the listener's DNS names, and serves
  a TLS handshake that a client trusting the overlay's listener CA accepts;
* the watcher CA Secret exists (a kubernetes.io/tls Secret, an EC P-256 CA);
* cainjector injects the watcher CA into the one caBundle Tether has (the runtime's
  ValidatingWebhookConfiguration; the KCP manifests have none);
* the enroller's CA store takes that Secret as its CA (publishing it to the listener's trust
  bundle, never writing the Secret, starting no rollover of its own) and the runtime
  certificates it issues verify against it the way the listener verifies them.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import logging
import pathlib
import socket
import ssl
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from kubernetes import client

from enroller import castore, pki
from listener.edge import peer
from testing import certmanager, controlplane
from tether.base import certs
from tether.kube import gateway

pytestmark = pytest.mark.processes

NS = certmanager.NAMESPACE
VWC = (
    controlplane.REPO_ROOT / "manifests" / "skr" / "webhook" / "validatingwebhookconfiguration.yaml"
)


class Setup:
    def __init__(
        self,
        plane: controlplane.ControlPlane,
        cm: certmanager.CertManager,
        objects: list[dict[str, Any]],
    ) -> None:
        self.plane, self.cm, self.objects = plane, cm, objects
        self.api = plane.api_client()

    def certificate(self, name: str) -> dict[str, Any]:
        return next(
            o for o in self.objects if o["kind"] == "Certificate" and o["metadata"]["name"] == name
        )

    def secret(self, name: str) -> tuple[str, dict[str, bytes]]:
        found = certmanager.secret_data(self.api, NS, name)
        assert found is not None, f"no Secret {NS}/{name}"
        return found


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    work = tmp_path_factory.mktemp("cert-manager")
    with controlplane.planes("cert-manager") as planes:
        plane = planes["cert-manager"]
        cm = certmanager.CertManager(plane, work).start()
        try:
            objects = certmanager.issuer_objects(certmanager.overlay_objects())
            s = Setup(plane, cm, objects)
            client.CoreV1Api(s.api).create_namespace(
                client.V1Namespace(metadata=client.V1ObjectMeta(name=NS))
            )
            certmanager.apply(plane, objects, work / "applied")
            for o in objects:
                if o["kind"] == "Certificate":
                    certmanager.wait_ready(
                        s.api, NS, "certificates", o["metadata"]["name"], timeout=120
                    )
            yield s
            cm.check_alive()
            s.api.close()
        finally:
            cm.stop()


def test_the_overlay_holds_a_self_signed_issuer_two_ca_certificates_and_a_ca_issuer() -> None:
    objects = certmanager.issuer_objects(certmanager.overlay_objects())
    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in objects)
    assert kinds == [
        ("Certificate", "tether-listener-ca"),
        ("Certificate", "tether-listener-serving"),
        ("Certificate", "tether-watcher-ca"),
        ("Issuer", "tether-listener-ca"),
        ("Issuer", "tether-selfsigned"),
    ]
    by_name = {(o["kind"], o["metadata"]["name"]): o["spec"] for o in objects}
    assert (
        by_name[("Certificate", "tether-watcher-ca")]["secretName"] == "tether-enroller-ca"
    )  # the enroller's default
    assert (
        by_name[("Certificate", "tether-listener-serving")]["secretName"] == "tether-listener-tls"
    )
    for ca in ("tether-watcher-ca", "tether-listener-ca"):
        assert by_name[("Certificate", ca)]["privateKey"]["rotationPolicy"] == "Never"


def test_the_overlay_feeds_the_enroller_the_listener_ca_from_the_serving_secret() -> None:
    every = certmanager.overlay_objects()
    enroller = next(
        o for o in every if o["kind"] == "Deployment" and o["metadata"]["name"] == "tether-enroller"
    )
    volumes = {v["name"]: v for v in enroller["spec"]["template"]["spec"]["volumes"]}
    assert volumes["listener-ca"] == {
        "name": "listener-ca",
        "secret": {
            "secretName": "tether-listener-tls",
            "items": [{"key": "ca.crt", "path": "ca.crt"}],
        },
    }
    assert volumes["watcher-ca"]["secret"]["items"] == [
        {"key": "tls.crt", "path": "tls.crt"}
    ]  # never the key
    # the base is unchanged: no cert-manager object, the listener CA from its ConfigMap
    base = certmanager.overlay_objects(controlplane.REPO_ROOT / "manifests" / "kcp")
    assert certmanager.issuer_objects(base) == []
    base_enroller = next(
        o for o in base if o["kind"] == "Deployment" and o["metadata"]["name"] == "tether-enroller"
    )
    assert {"name": "listener-ca", "configMap": {"name": "tether-listener-ca"}} in base_enroller[
        "spec"
    ]["template"]["spec"]["volumes"]


def test_the_listener_serving_secret_is_issued_for_the_listeners_names(
    setup: Setup, tmp_path: pathlib.Path
) -> None:
    kind, data = setup.secret("tether-listener-tls")
    assert kind == "kubernetes.io/tls"
    cert = x509.load_pem_x509_certificate(data["tls.crt"])
    listener_ca = x509.load_pem_x509_certificate(data["ca.crt"])
    _, ca_pair = setup.secret("tether-listener-ca-keypair")
    assert listener_ca == x509.load_pem_x509_certificate(ca_pair["tls.crt"])
    names = setup.certificate("tether-listener-serving")["spec"]["dnsNames"]
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sorted(sans.get_values_for_type(x509.DNSName)) == sorted(names)
    now = datetime.datetime.now(datetime.UTC)
    assert cert.not_valid_before_utc <= now < cert.not_valid_after_utc
    assert cert.not_valid_after_utc - cert.not_valid_before_utc == datetime.timedelta(days=90)
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]
    cert.verify_directly_issued_by(listener_ca)
    # a TLS client trusting only the listener CA accepts it under each name
    for name in names:
        assert _handshake(tmp_path, data, name) == "tether-listener"


def _handshake(folder: pathlib.Path, data: dict[str, bytes], name: str) -> str:
    """Serve ``data``'s certificate on loopback and connect as ``name``, trusting ca.crt only;
    the CN the client saw."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tls.crt").write_bytes(data["tls.crt"])
    (folder / "tls.key").write_bytes(data["tls.key"])
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(folder / "tls.crt", folder / "tls.key")
    client_ctx = ssl.create_default_context(cadata=data["ca.crt"].decode())
    with socket.create_server(("127.0.0.1", 0)) as listening:
        port = listening.getsockname()[1]

        def serve() -> None:
            conn, _ = listening.accept()
            try:
                with server_ctx.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(1)
            except (ssl.SSLError, OSError):
                pass

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            client_ctx.wrap_socket(raw, server_hostname=name) as tls,
        ):
            seen = tls.getpeercert(binary_form=True)
            tls.sendall(b"x")
        t.join(10)
    assert seen is not None
    return str(certs.common_name(x509.load_der_x509_certificate(seen)))


def test_the_watcher_ca_secret_is_an_ec_p256_ca_of_cert_managers(setup: Setup) -> None:
    kind, data = setup.secret("tether-enroller-ca")
    assert kind == "kubernetes.io/tls"
    assert {"tls.crt", "tls.key", "ca.crt"} <= set(data)
    ca = pki.load_ca(data["tls.crt"], data["tls.key"])  # what the enroller loads
    assert certs.common_name(ca.cert) == "tether-watcher-ca"
    assert ca.cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert isinstance(ca.key, ec.EllipticCurvePrivateKey) and ca.key.curve.name == "secp256r1"
    ca.cert.verify_directly_issued_by(ca.cert)  # self-signed, by the selfSigned Issuer
    assert x509.load_pem_x509_certificate(data["ca.crt"]) == ca.cert
    core: Any = client.CoreV1Api(setup.api)
    notes = core.read_namespaced_secret("tether-enroller-ca", NS).metadata.annotations
    assert notes[castore.CERT_MANAGER_CERTIFICATE] == "tether-watcher-ca"


def test_cainjector_fills_the_webhook_caBundle_with_the_watcher_ca(setup: Setup) -> None:
    """No KCP object of Tether has a caBundle; the runtime's webhook configuration is the one
    that has (the enroller fills it there from the watcher CA). Annotated for cainjector on
    this plane, it gets the same CA the enroller would put there."""
    body = yaml.safe_load(VWC.read_text())
    body["metadata"]["name"] = "tether-configmaps-cainjector"
    body["metadata"]["annotations"] = {"cert-manager.io/inject-ca-from": f"{NS}/tether-watcher-ca"}
    body["webhooks"][0]["namespaceSelector"] = {
        "matchLabels": {"tether-test": "none"}
    }  # intercepts nothing
    adm: Any = client.AdmissionregistrationV1Api(setup.api)
    adm.create_validating_webhook_configuration(body)
    try:

        def injected() -> bytes:
            got = adm.read_validating_webhook_configuration(body["metadata"]["name"])
            raw = got.webhooks[0].client_config.ca_bundle
            return base64.b64decode(raw) if raw else b""

        bundle = _eventually(injected, 60, setup)
        _, data = setup.secret("tether-enroller-ca")
        assert x509.load_pem_x509_certificates(bundle) == [
            x509.load_pem_x509_certificate(data["tls.crt"])
        ]
        # what the enroller writes into each runtime's webhook configuration
        assert bundle == pki.trust_bundle(x509.load_pem_x509_certificate(data["tls.crt"]), None)
    finally:
        adm.delete_validating_webhook_configuration(body["metadata"]["name"])


def test_the_enrollers_ca_store_takes_cert_managers_ca_and_its_runtime_certificates_verify(
    setup: Setup,
) -> None:
    gw = gateway.from_kubeconfig(str(setup.plane.kubeconfig))
    audit = logging.getLogger("test.certmanager.audit")
    core: Any = client.CoreV1Api(setup.api)
    before = core.read_namespaced_secret("tether-enroller-ca", NS)
    _, data = setup.secret("tether-enroller-ca")
    ca_cert = x509.load_pem_x509_certificate(data["tls.crt"])
    try:

        def store(now: datetime.datetime) -> castore.CAStore:
            return castore.CAStore(
                gw,
                NS,
                "tether-enroller-ca",
                "tether-runtime-ca",
                datetime.timedelta(days=365),
                audit,
                lambda: now,
            )

        now = datetime.datetime.now(datetime.UTC)
        ca = store(now).ensure()
        assert ca.current.cert == ca_cert and ca.previous is None
        # the listener's trust bundle is cert-manager's CA
        published = core.read_namespaced_config_map("tether-runtime-ca", NS).data["ca.crt"].encode()
        assert x509.load_pem_x509_certificates(published) == [ca_cert]
        # past two thirds of the CA's life the enroller would roll its own CA over; cert-manager's
        # it leaves to cert-manager (which renews it at half its life, keeping the key)
        late = (
            ca_cert.not_valid_before_utc
            + (ca_cert.not_valid_after_utc - ca_cert.not_valid_before_utc) * 0.9
        )
        assert pki.ca_needs_rollover(ca_cert, late)
        assert store(late).ensure().current.cert == ca_cert
        after = core.read_namespaced_secret("tether-enroller-ca", NS)
        assert after.metadata.resource_version == before.metadata.resource_version
        assert after.type == "kubernetes.io/tls"
        # a runtime certificate as the enroller issues it, verified as the listener verifies it
        pair = pki.client_certificate(
            ca.current, "rt-cm-1", "c-cm1.kyma.example.com", datetime.timedelta(days=7), now
        )
        peer.verify_chain(pair.cert, [], x509.load_pem_x509_certificates(published), now)
        assert (
            pki.needs_renewal(
                pair.cert_pem,
                ca.current,
                now,
                runtime_id="rt-cm-1",
                domain="c-cm1.kyma.example.com",
            )
            is None
        )
        assert pki.issued_by(pair.cert, [ca_cert])
    finally:
        gw.close()


def _eventually(probe: Any, timeout: float, setup: Setup) -> Any:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        setup.cm.check_alive()
        time.sleep(0.3)
    raise AssertionError(
        f"timed out after {timeout:.0f}s; cainjector log: {setup.cm.log('cainjector')[-3000:]}"
    )


def test_a_runtime_certificate_from_cert_managers_ca_passes_the_listeners_tls_check(
    setup: Setup, tmp_path: pathlib.Path
) -> None:
    """Mutual TLS as the listener (OpenSSL, through Python's ssl) and a runtime do it: the
    listener serving cert-manager's certificate and trusting the bundle the enroller
    publishes; the runtime holding a certificate the enroller issued from cert-manager's CA
    and trusting the listener CA it is given."""
    gw = gateway.from_kubeconfig(str(setup.plane.kubeconfig))
    try:
        now = datetime.datetime.now(datetime.UTC)
        ca = castore.CAStore(
            gw,
            NS,
            "tether-enroller-ca",
            "tether-runtime-ca",
            datetime.timedelta(days=365),
            logging.getLogger("test.certmanager.audit"),
            lambda: now,
        ).ensure()
    finally:
        gw.close()
    _, serving = setup.secret("tether-listener-tls")
    runtime = pki.client_certificate(
        ca.current, "rt-cm-2", "c-cm2.kyma.example.com", datetime.timedelta(days=7), now
    )
    for name, data in (
        ("serving.crt", serving["tls.crt"]),
        ("serving.key", serving["tls.key"]),
        ("runtime.crt", runtime.cert_pem),
        ("runtime.key", runtime.key_pem),
    ):
        (tmp_path / name).write_bytes(data)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(tmp_path / "serving.crt", tmp_path / "serving.key")
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    server_ctx.load_verify_locations(cadata=ca.bundle.decode())
    client_ctx = ssl.create_default_context(cadata=serving["ca.crt"].decode())
    client_ctx.load_cert_chain(tmp_path / "runtime.crt", tmp_path / "runtime.key")
    seen: list[str] = []
    with socket.create_server(("127.0.0.1", 0)) as listening:
        port = listening.getsockname()[1]

        def serve() -> None:
            conn, _ = listening.accept()
            try:
                with server_ctx.wrap_socket(conn, server_side=True) as tls:
                    der = tls.getpeercert(binary_form=True)
                    seen.append(
                        str(certs.common_name(x509.load_der_x509_certificate(der))) if der else ""
                    )
                    tls.sendall(b"ok")
            except (ssl.SSLError, OSError) as e:
                seen.append(f"refused: {e}")

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            client_ctx.wrap_socket(raw, server_hostname="tether-listener.tether-system.svc") as tls,
        ):
            with contextlib.suppress(ssl.SSLError, OSError):
                tls.recv(2)
        t.join(10)
    assert seen == ["rt-cm-2"]
