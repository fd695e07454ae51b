"""The operational test on the cert-manager overlay: the same install as
``test_deployed.py`` (``kubectl apply -k``, the pod runner, the enroller installing the
runtime), but on ``manifests/overlays/cert-manager`` with the real cert-manager controller
and cainjector running against the KCP plane (``testing.certmanager``): the listener serves
cert-manager's certificate and the enroller issues the runtime's certificates from
cert-manager's watcher CA. Every test of ``test_deployed.py`` runs again here on this
module's fleet (both call ``testing.deployedscenarios``), but the Tether CA rollover
(cert-manager renews its CA instead, keeping the key:
``test_changes_keep_arriving_through_a_cert_manager_ca_renewal``).
"""

from __future__ import annotations

import base64
import datetime
import json
import pathlib
import socket
import ssl
from collections.abc import Iterator

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from listener.edge import peer
from testing import certmanager, controlplane, deployed, overlays
from testing import deployedscenarios as scenarios

pytestmark = pytest.mark.processes
NS = overlays.NAMESPACE


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[deployed.Fleet]:
    with controlplane.planes("cm-deployed-skr", "cm-deployed-kcp") as planes:
        f, cm = certmanager.install(
            planes["cm-deployed-skr"],
            planes["cm-deployed-kcp"],
            tmp_path_factory.mktemp("cm-deployed"),
            timeout=240,
            backoff_seconds=1.0,
            enroller_env={
                "TETHER_ENROLLER_CERT_LIFETIME_SECONDS": str(scenarios.CERT_SECONDS),
                "TETHER_ENROLLER_INTERVAL_SECONDS": "5",
            },
        )
        try:
            deployed.kubectl(f.skr, "create", "namespace", scenarios.CUSTOMER_NS)
            # what an operator of the base makes by hand, here only for the tests that read
            # the listener's CA from it (the enroller reads tether-listener-tls's ca.crt)
            deployed.kubectl(
                f.kcp,
                "create",
                "configmap",
                "tether-listener-ca",
                "-n",
                NS,
                f"--from-literal=ca.crt={_secret(f, 'tether-listener-tls')['ca.crt'].decode()}",
            )
            yield f
            cm.check_alive()
        finally:
            f.stop()
            cm.stop()


def _secret(fleet: deployed.Fleet, name: str) -> dict[str, bytes]:
    doc = json.loads(
        deployed.kubectl(fleet.kcp, "get", "secret", name, "-n", NS, "-o", "json").stdout
    )
    return {k: base64.b64decode(v) for k, v in doc["data"].items()}


def _runtime_client_cert(fleet: deployed.Fleet) -> x509.Certificate:
    doc = deployed.runtime_secret(fleet)
    return x509.load_pem_x509_certificate(base64.b64decode(doc["data"]["tls.crt"]))


# testing.deployedscenarios, in test_deployed.py's order, on this module's fleet


def test_every_deployment_runs_ready_under_its_own_service_account(fleet: deployed.Fleet) -> None:
    scenarios.every_deployment_runs_ready_under_its_own_service_account(fleet)


def test_a_configmap_change_made_with_kubectl_arrives_in_the_kcp(
    fleet: deployed.Fleet, tmp_path: pathlib.Path
) -> None:
    scenarios.a_configmap_change_made_with_kubectl_arrives_in_the_kcp(fleet, tmp_path)


def test_the_admin_pages_show_the_runtime_to_an_operator_and_refuse_others(
    fleet: deployed.Fleet,
) -> None:
    scenarios.the_admin_pages_show_the_runtime_to_an_operator_and_refuse_others(fleet)


def test_compass_registers_the_runtime_with_the_director(fleet: deployed.Fleet) -> None:
    scenarios.compass_registers_the_runtime_with_the_director(fleet)


def test_a_real_prometheus_alerts_for_a_broken_webhook_path_and_a_stopped_listener(
    fleet: deployed.Fleet,
) -> None:
    scenarios.a_real_prometheus_alerts_for_a_broken_webhook_path_and_a_stopped_listener(fleet)


def test_a_verb_removed_from_the_listeners_role_fails_the_delivery_until_restored(
    fleet: deployed.Fleet,
) -> None:
    scenarios.a_verb_removed_from_the_listeners_role_fails_the_delivery_until_restored(fleet)


def test_a_crashed_container_is_restarted_and_ready_again(fleet: deployed.Fleet) -> None:
    scenarios.a_crashed_container_is_restarted_and_ready_again(fleet)


def test_the_pod_runner_refuses_what_it_cannot_honour(fleet: deployed.Fleet) -> None:
    scenarios.the_pod_runner_refuses_what_it_cannot_honour(fleet)


def test_changes_keep_arriving_while_the_certificates_are_renewed(fleet: deployed.Fleet) -> None:
    scenarios.changes_keep_arriving_while_the_certificates_are_renewed(fleet)


def test_the_listener_serves_cert_managers_certificate_and_the_runtime_holds_one_of_its_ca(
    fleet: deployed.Fleet,
) -> None:
    serving = _secret(fleet, "tether-listener-tls")
    ip, port = fleet.kcp_pods.service_address("tether-listener", "https")
    ctx = ssl.create_default_context(cadata=serving["ca.crt"].decode())
    with (
        socket.create_connection((ip, port), timeout=10) as raw,
        ctx.wrap_socket(raw, server_hostname=overlays.LISTENER_HOST) as tls,
    ):
        served = tls.getpeercert(binary_form=True)
    assert served is not None
    assert x509.load_der_x509_certificate(served) == x509.load_pem_x509_certificate(
        serving["tls.crt"]
    )
    watcher = _secret(fleet, "tether-enroller-ca")
    ca = x509.load_pem_x509_certificate(watcher["tls.crt"])
    cert = _runtime_client_cert(fleet)
    peer.verify_chain(cert, [], [ca], datetime.datetime.now(datetime.UTC))
    trusted = json.loads(
        deployed.kubectl(
            fleet.kcp, "get", "configmap", "tether-runtime-ca", "-n", NS, "-o", "json"
        ).stdout
    )["data"]["ca.crt"]
    assert x509.load_pem_x509_certificates(trusted.encode()) == [ca]
    # the runtime is given the listener CA from cert-manager's Secret
    client_secret = deployed.runtime_secret(fleet)
    given = base64.b64decode(client_secret["data"]["ca.crt"])
    assert x509.load_pem_x509_certificate(serving["ca.crt"]) in x509.load_pem_x509_certificates(
        given
    )


def test_changes_keep_arriving_through_a_cert_manager_ca_renewal(fleet: deployed.Fleet) -> None:
    """cert-manager renews the watcher CA (triggered as ``cmctl renew`` does): a new
    certificate for the same key and subject, which the enroller publishes to the listener's
    trust bundle; the runtime's certificate, issued before, still verifies; changes made every
    two seconds meanwhile all arrive, none later than one retry."""
    first = x509.load_pem_x509_certificate(_secret(fleet, "tether-enroller-ca")["tls.crt"])
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    deployed.kubectl(
        fleet.kcp,
        "patch",
        "certificate",
        "tether-watcher-ca",
        "-n",
        NS,
        "--subresource=status",
        "--type=json",
        "-p",
        json.dumps(
            [
                {
                    "op": "add",
                    "path": "/status/conditions/-",
                    "value": {
                        "type": "Issuing",
                        "status": "True",
                        "reason": "ManuallyTriggered",
                        "message": "renewal triggered by the test",
                        "lastTransitionTime": now,
                    },
                }
            ]
        ),
    )

    def renewed_and_published() -> bool:
        current = x509.load_pem_x509_certificate(_secret(fleet, "tether-enroller-ca")["tls.crt"])
        trusted = json.loads(
            deployed.kubectl(
                fleet.kcp, "get", "configmap", "tether-runtime-ca", "-n", NS, "-o", "json"
            ).stdout
        )["data"]["ca.crt"]
        return current != first and x509.load_pem_x509_certificates(trusted.encode()) == [current]

    lags = scenarios.flow(fleet, "renew", renewed_and_published, 120)
    renewed = x509.load_pem_x509_certificate(_secret(fleet, "tether-enroller-ca")["tls.crt"])
    assert renewed != first, "cert-manager did not renew the CA"
    spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert renewed.public_key().public_bytes(*spki) == first.public_key().public_bytes(*spki)
    assert renewed.subject == first.subject
    peer.verify_chain(
        _runtime_client_cert(fleet), [], [renewed], datetime.datetime.now(datetime.UTC)
    )
    assert max(lags) < 15, lags


# last, as in test_deployed.py: the runtime is unenrolled
def test_a_deleted_kyma_cr_leaves_a_clean_runtime_whose_certificate_the_listener_refuses(
    fleet: deployed.Fleet, tmp_path: pathlib.Path
) -> None:
    scenarios.a_deleted_kyma_cr_leaves_a_clean_runtime_whose_certificate_the_listener_refuses(
        fleet, tmp_path
    )
