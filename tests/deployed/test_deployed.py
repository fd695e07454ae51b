"""The operational test: Tether as a cluster would run it. ``kubectl apply -k`` of the local
overlays of ``manifests/kcp`` (on a KCP plane) and ``manifests/skr`` (on an SKR plane),
every Deployment run by the pod runner under its manifest's ServiceAccount (tokens from the
TokenRequest API), security context, probes and mounted Secrets; then a customer's
ConfigMap change made with kubectl arrives in the KCP through the installed webhook, and
compass registers the runtime with the Director stand-in.

Own planes (module scope): the installed webhook configuration intercepts every ConfigMap
write of its plane, which the other suites' shared SKR plane must not see. The checks that
``test_cert_manager_deployed.py`` makes too are ``testing.deployedscenarios``'.
"""

from __future__ import annotations

import base64
import json
import pathlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography import x509

from enroller import pki
from testing import controlplane, deployed, overlays, watchenv
from testing import deployedscenarios as scenarios
from testing.deployedscenarios import CERT_SECONDS, CUSTOMER_NS, flow, stored
from tether.kube import apitypes
from tether.wire import digests, watches, watchwire

pytestmark = pytest.mark.processes

CA_SECONDS = 600  # backdated 5 min, rolled over at two thirds: 300 s after the enroller starts


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[deployed.Fleet]:
    with controlplane.planes("deployed-skr", "deployed-kcp") as planes:
        # short certificate lifetimes, so that a renewal happens while the module runs
        f = deployed.install(
            planes["deployed-skr"],
            planes["deployed-kcp"],
            tmp_path_factory.mktemp("deployed"),
            timeout=180,
            backoff_seconds=1.0,
            enroller_env={
                "TETHER_ENROLLER_CERT_LIFETIME_SECONDS": str(CERT_SECONDS),
                "TETHER_ENROLLER_CA_LIFETIME_SECONDS": str(CA_SECONDS),
                "TETHER_ENROLLER_ROLLOVER_PROPAGATION_SECONDS": "20",
                # the issuance limit (default) comes on top of the
                # scheduled renewals of these short lifetimes
                "TETHER_ENROLLER_INTERVAL_SECONDS": "5",
            },
        )
        try:
            deployed.kubectl(f.skr, "create", "namespace", CUSTOMER_NS)
            yield f
        finally:
            f.stop()


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


def test_changes_keep_arriving_through_a_ca_rollover(fleet: deployed.Fleet) -> None:
    """The watcher CA rolls over (a short CA lifetime): the listener trusts old and new, the
    runtime is reissued from the new CA after the propagation time, the old CA is dropped;
    changes made every two seconds meanwhile all arrive, none later than one retry."""

    def ca_secret() -> dict[str, Any]:
        return dict(
            json.loads(
                deployed.kubectl(
                    fleet.kcp,
                    "get",
                    "secret",
                    "tether-enroller-ca",
                    "-n",
                    overlays.NAMESPACE,
                    "-o",
                    "json",
                ).stdout
            )
        )

    first = ca_secret()["data"]["tls.crt"]
    seen: list[bool] = []

    def finished() -> bool:
        doc = ca_secret()
        seen.append("previous.crt" in doc["data"])
        return doc["data"]["tls.crt"] != first and "previous.crt" not in doc["data"]

    lags = flow(fleet, "roll", finished, CA_SECONDS)
    saw_both = any(seen)
    doc = ca_secret()
    assert doc["data"]["tls.crt"] != first and "previous.crt" not in doc["data"], (
        "the rollover did not finish"
    )
    assert saw_both, "the old and the new CA were never trusted together"
    new_ca = x509.load_pem_x509_certificate(base64.b64decode(doc["data"]["tls.crt"]))
    client_secret = deployed.runtime_secret(fleet)
    cert = x509.load_pem_x509_certificate(base64.b64decode(client_secret["data"]["tls.crt"]))
    assert pki.issued_by(cert, [new_ca])
    assert max(lags) < 15, lags


WIDGETS = watchenv.widgets("example.com")
WIDGET_CRD = watchenv.widget_crd("example.com")
# what the runtime's readers need for the module's kind (the module's installation grants it)
WATCHED_READERS = [
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "tether-read-widgets"},
        "rules": [
            {"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get", "list"]}
        ],
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "tether-read-widgets"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "tether-read-widgets",
        },
        "subjects": [
            {"kind": "ServiceAccount", "name": sa, "namespace": overlays.NAMESPACE}
            for sa in ("tether-webhook", "tether-poller")
        ],
    },
    # the digest Watch's Secrets: read only where the Watch looks (whoever ships the Watch
    # grants it; the bundle's roles never read Secrets, docs/webhook.md)
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "tether-read-secrets", "namespace": "{customer}"},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}],
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "tether-read-secrets", "namespace": "{customer}"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "tether-read-secrets",
        },
        "subjects": [
            {"kind": "ServiceAccount", "name": sa, "namespace": overlays.NAMESPACE}
            for sa in ("tether-webhook", "tether-poller")
        ],
    },
]


def apply_json(
    fleet: deployed.Fleet, plane: controlplane.ControlPlane, name: str, *objs: dict[str, Any]
) -> None:
    manifest = fleet.work / f"{name}.json"
    manifest.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}))
    deployed.kubectl(plane, "apply", "-f", str(manifest))


def registered_hooks(fleet: deployed.Fleet) -> list[str]:
    vwc = json.loads(
        deployed.kubectl(
            fleet.skr, "get", "validatingwebhookconfiguration", "tether-configmaps", "-o", "json"
        ).stdout
    )
    return [h["name"] for h in vwc.get("webhooks") or []]


def touched_until_stored(fleet: deployed.Fleet, kind: str, name: str, watch: str) -> Any:
    """The object's record, annotating the object every 2 s until it is stored: the API
    server's registration and the webhooks' Watch lists take a moment to follow a new Watch
    (a change made before then is the poller's, within its 60 s interval)."""
    touches = iter(range(1_000_000))

    def probe() -> Any:
        if (rec := stored(fleet, CUSTOMER_NS, name, watch=watch)) is None and (
            n := next(touches)
        ) % 7 == 6:
            deployed.kubectl(
                fleet.skr, "annotate", kind, name, "-n", CUSTOMER_NS, f"touched={n}", "--overwrite"
            )
        return rec

    return fleet.wait_for(f"{kind} {name} in the KCP under the Watch {watch}", probe)


def test_watches_decide_what_leaves_the_runtime_of_any_kind(fleet: deployed.Fleet) -> None:
    """Issue 24 as a cluster runs it: a Watch of a custom resource and a digest Watch of
    Secrets, created in the KCP, are rendered into the runtime they select (and a Watch for
    another runtime is not) within the enroller's interval; a widget arrives with its spec
    and status, a Secret as a digest that changes with its value, which is nowhere in the
    KCP or in the listener's and webhook's logs; deleting a Watch unregisters it."""
    apply_json(fleet, fleet.skr, "widgets-crd", WIDGET_CRD)
    deployed.kubectl(
        fleet.skr, "wait", "--for=condition=Established", "crd/widgets.example.com", "--timeout=60s"
    )
    apply_json(
        fleet,
        fleet.skr,
        "watched-readers",
        *json.loads(json.dumps(WATCHED_READERS).replace("{customer}", CUSTOMER_NS)),
    )
    here = {"selector": {"matchLabels": {apitypes.RUNTIME_ID_LABEL: deployed.RUNTIME_ID}}}
    with fleet.kcp.api_client() as api:
        watchenv.install_crd(api)
        watchenv.apply(
            api,
            watchenv.watch(
                "widgets",
                WIDGETS,
                deployed.KCP_NS,
                runtimes=here,
                send={"mode": "keys", "keys": ["spec", "status"]},
            ),
        )
        watchenv.apply(
            api,
            watchenv.watch(
                "secrets",
                dict(watches.SECRET.wire()),
                deployed.KCP_NS,
                namespaces=[CUSTOMER_NS],
                send={"mode": "digest"},
            ),
        )
        watchenv.apply(
            api,
            watchenv.watch(
                "elsewhere",
                WIDGETS,
                deployed.KCP_NS,
                runtimes={"selector": {"matchLabels": {apitypes.RUNTIME_ID_LABEL: "rt-other"}}},
            ),
        )
    t0 = time.monotonic()
    fleet.wait_for(
        "the Watches rendered into the runtime's registration",
        lambda: (
            {"widgets.watches.tether.kyma-project.io", "secrets.watches.tether.kyma-project.io"}
            <= set(registered_hooks(fleet))
        ),
        timeout=90,
    )
    print(
        f"Watches in force in the runtime after {time.monotonic() - t0:.1f} s "
        "(enroller interval 5 s)"
    )
    assert "elsewhere.watches.tether.kyma-project.io" not in registered_hooks(fleet)

    widget = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "blue", "namespace": CUSTOMER_NS},
        "spec": {"size": 3},
    }
    apply_json(fleet, fleet.skr, "widget-blue", widget)
    rec = touched_until_stored(fleet, "widgets.example.com", "blue", "widgets")
    assert rec["spec"]["resource"] == {"group": "example.com", "version": "v1", "kind": "Widget"}
    assert json.loads(rec["spec"]["data"]["spec"]) == {"size": 3}

    value = "pa55-w0rd-never-in-the-kcp"
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "db", "namespace": CUSTOMER_NS},
        "stringData": {"password": value},
    }
    apply_json(fleet, fleet.skr, "secret-db", secret)
    rec = fleet.wait_for(
        "the Secret's digest in the KCP", lambda: stored(fleet, CUSTOMER_NS, "db", watch="secrets")
    )
    first = rec["spec"]["data"]["password"]
    # keyed by the runtime's digest key, which the enroller wrote into its client Secret
    client_secret = deployed.runtime_secret(fleet)
    key = base64.b64decode(client_secret["data"][digests.KEY])
    assert first == digests.of(value.encode(), key) != digests.of(value.encode())
    apply_json(
        fleet, fleet.skr, "secret-db-2", {**secret, "stringData": {"password": value + "-2"}}
    )
    fleet.wait_for(
        "the changed digest",
        lambda: (
            (r := stored(fleet, CUSTOMER_NS, "db", watch="secrets"))
            and r["spec"]["data"]["password"] not in (first, None)
        ),
    )
    kcp_dump = deployed.kubectl(
        fleet.kcp, "get", apitypes.RUNTIME_CONFIGMAPS.plural, "-A", "-o", "json"
    ).stdout
    logs = (
        fleet.kcp_pods.logs("tether-listener")
        + fleet.skr_pods.logs("tether-webhook")
        + fleet.skr_pods.logs("tether-poller")
    )
    assert '"db"' in kcp_dump or "db" in kcp_dump  # the dump is of the records (not empty)
    assert value not in kcp_dump and value not in logs

    with fleet.kcp.api_client() as api:
        watchenv.delete(api, deployed.KCP_NS, "widgets")
    fleet.wait_for(
        "the deleted Watch unregistered",
        lambda: "widgets.watches.tether.kyma-project.io" not in registered_hooks(fleet),
        timeout=90,
    )
    cm = json.loads(
        deployed.kubectl(
            fleet.skr,
            "get",
            "configmap",
            watchwire.WIRE_CONFIGMAP,
            "-n",
            overlays.NAMESPACE,
            "-o",
            "json",
        ).stdout
    )
    assert [w.name for w in watchwire.from_wire(cm["data"][watchwire.WIRE_KEY])] == [
        "configuration",
        "secrets",
    ]


def test_a_deleted_kyma_cr_leaves_a_clean_runtime_whose_certificate_the_listener_refuses(
    fleet: deployed.Fleet, tmp_path: pathlib.Path
) -> None:
    scenarios.a_deleted_kyma_cr_leaves_a_clean_runtime_whose_certificate_the_listener_refuses(
        fleet, tmp_path
    )
