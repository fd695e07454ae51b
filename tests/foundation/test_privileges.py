"""Least privilege on the management plane, read from the rendered manifests (``kubectl
kustomize manifests/kcp``) and asked of a real API server (docs/security.md, "Least
privilege").

The rendered RBAC (ServiceAccounts, Roles, ClusterRoles and their bindings) is applied to
the KCP plane in namespaces of this module's own (kcp-system, tether-system and
tether-heartbeats renamed, cluster-scoped names suffixed: the plane is shared), and a
SubjectAccessReview asks, for each ServiceAccount as the API server authenticates it
(its user and groups, so the cluster's default bindings count too), what it may do.
The egress NetworkPolicies are checked on the rendered objects: every ServiceAccount's pods
are selected by one, and what each allows is exactly what docs/security.md says.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client

from testing import controlplane

pytestmark = pytest.mark.processes  # starts processes of its own (testing/tiers.py)

KCP = controlplane.REPO_ROOT / "manifests" / "kcp"
NAMESPACES = ("kcp-system", "tether-system", "tether-heartbeats")
RBAC_KINDS = {"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}
TETHER = "tether.kyma-project.io"
COORDINATION = "coordination.k8s.io"
RECORD_KINDS = ("runtimeconfigmaps", "runtimedeliveries", "runtimestatesummaries")
# the runtimes are external clusters: their API servers are reached on public addresses only
INTERNAL = {
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",
    "169.254.0.0/16",
    "127.0.0.0/8",
}


def render(path: str = "") -> list[dict[str, Any]]:
    done = subprocess.run(
        [str(controlplane.binaries() / "kubectl"), "kustomize", str(KCP / path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    return render()


# -- pure: what the rendered objects say -----------------------------------------------------


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A label selector (matchLabels, matchExpressions) against a pod's labels."""
    if not (selector.get("matchLabels") or {}).items() <= labels.items():
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": labels.get(key) not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def pods(docs: list[dict[str, Any]]) -> dict[str, tuple[str, dict[str, str]]]:
    """Deployment name -> (ServiceAccount, pod labels)."""
    return {
        d["metadata"]["name"]: (
            d["spec"]["template"]["spec"]["serviceAccountName"],
            d["spec"]["template"]["metadata"]["labels"],
        )
        for d in docs
        if d["kind"] == "Deployment"
    }


def egress_rules(docs: list[dict[str, Any]], labels: dict[str, str]) -> list[dict[str, Any]]:
    """Every egress rule of every policy that makes pods with ``labels`` egress-isolated
    (what such a pod may reach is their union)."""
    return [
        rule
        for d in docs
        if d["kind"] == "NetworkPolicy"
        and "Egress" in d["spec"].get("policyTypes", [])
        and selects(d["spec"]["podSelector"], labels)
        for rule in d["spec"].get("egress") or []
    ]


def reach(rule: dict[str, Any]) -> tuple[str, frozenset[tuple[Any, str]]]:
    """One egress rule as (to whom, ports): 'dns', 'apiserver', 'public' or 'ANY'."""
    ports = frozenset((p["port"], p.get("protocol", "TCP")) for p in rule.get("ports") or [])
    peers = rule.get("to") or []
    if not peers:
        return "ANY", ports
    [peer] = peers
    if "ipBlock" in peer:
        block = peer["ipBlock"]
        if block["cidr"] == "0.0.0.0/0":
            return ("public" if INTERNAL <= set(block.get("except") or []) else "ANY"), ports
        return ("apiserver" if block["cidr"] == "192.0.2.1/32" else block["cidr"]), ports
    if peer.get("podSelector", {}).get("matchLabels") == {"k8s-app": "kube-dns"} and peer.get(
        "namespaceSelector", {}
    ).get("matchLabels") == {"kubernetes.io/metadata.name": "kube-system"}:
        return "dns", ports
    return json.dumps(peer), ports


DNS = ("dns", frozenset({(53, "UDP"), (53, "TCP")}))
APISERVER = ("apiserver", frozenset({(443, "TCP"), (6443, "TCP")}))
RUNTIMES = ("public", frozenset({(443, "TCP"), (6443, "TCP")}))


def test_every_service_account_has_an_egress_policy_selecting_its_pods(
    rendered: list[dict[str, Any]],
) -> None:
    accounts = {
        (d["metadata"]["namespace"], d["metadata"]["name"])
        for d in rendered
        if d["kind"] == "ServiceAccount"
    }
    deployments = pods(rendered)
    used = {("tether-system", sa) for sa, _ in deployments.values()}
    assert used == accounts, "a ServiceAccount without a Deployment, or one not in the manifests"
    assert len(accounts) == len(deployments)  # each part its own ServiceAccount
    for name, (sa, labels) in deployments.items():
        assert egress_rules(rendered, labels), f"{name} ({sa}): no egress policy selects its pods"


def test_each_part_may_reach_exactly_what_docs_security_says(
    rendered: list[dict[str, Any]],
) -> None:
    expected = {
        "tether-listener": {DNS, APISERVER},  # no runtime, nothing else
        "tether-janitor": {DNS, APISERVER},
        "tether-admin": {DNS, APISERVER},
        "tether-enroller": {DNS, APISERVER, RUNTIMES},
        "tether-compass": {DNS, APISERVER, RUNTIMES},  # the Director and its OAuth too (443)
    }
    deployments = pods(rendered)
    assert set(deployments) == set(expected)
    for name, (_, labels) in deployments.items():
        got = {reach(r) for r in egress_rules(rendered, labels)}
        assert got == expected[name], name
    # the placeholder is documented where operators patch it
    text = (KCP / "networkpolicies" / "kustomization.yaml").read_text()
    assert "192.0.2.1/32" in text and "endpointslices" in text


def test_nothing_cluster_wide_but_the_admin_reviews_and_tethers_own_records(
    rendered: list[dict[str, Any]],
) -> None:
    # records live in each Watch's storage namespace (docs/watches.md): the listener and the
    # janitor reach Tether's own record type everywhere, nothing else
    cluster_roles = {d["metadata"]["name"]: d for d in rendered if d["kind"] == "ClusterRole"}
    bound = {
        b["roleRef"]["name"]: [(s["name"], s["namespace"]) for s in b["subjects"]]
        for b in rendered
        if b["kind"] == "ClusterRoleBinding"
    }
    assert bound == {
        "tether-admin": [("tether-admin", "tether-system")],
        "tether-listener-records": [("tether-listener", "tether-system")],
        "tether-janitor-records": [("tether-janitor", "tether-system")],
    }

    def rules(name: str) -> set[tuple[str, str, tuple[str, ...]]]:
        return {
            (r["apiGroups"][0], r["resources"][0], tuple(r["verbs"]))
            for r in cluster_roles[name]["rules"]
            if len(r["apiGroups"]) == 1 and len(r["resources"]) == 1
        }

    assert rules("tether-admin") == {
        ("authentication.k8s.io", "tokenreviews", ("create",)),
        ("authorization.k8s.io", "subjectaccessreviews", ("create",)),
    }
    assert rules("tether-listener-records") == {  # delete: only unbacked tombstones (policy.yaml)
        # watch: the pod's view of the records (metadata only), for the per-Watch summaries
        (
            TETHER,
            "runtimeconfigmaps",
            ("get", "list", "watch", "create", "update", "patch", "delete"),
        )
    }
    assert rules("tether-janitor-records") == {
        (TETHER, "runtimeconfigmaps", ("list", "patch", "delete", "deletecollection"))
    }
    assert all(len(cluster_roles[n]["rules"]) == len(rules(n)) for n in bound)


def test_the_listener_and_janitor_roles_are_exactly_what_they_call(
    rendered: list[dict[str, Any]],
) -> None:
    def rules_of(sa: str) -> dict[tuple[str, str, str, tuple[str, ...]], set[str]]:
        roles = {
            (d["metadata"]["namespace"], d["metadata"]["name"]): d
            for d in rendered
            if d["kind"] == "Role"
        }
        out: dict[tuple[str, str, str, tuple[str, ...]], set[str]] = {}
        for b in rendered:
            if b["kind"] == "RoleBinding" and any(s["name"] == sa for s in b["subjects"]):
                ns = b["metadata"]["namespace"]
                for r in roles[(ns, b["roleRef"]["name"])]["rules"]:
                    for group in r["apiGroups"]:
                        for res in r["resources"]:
                            key = (ns, group, res, tuple(r.get("resourceNames", ())))
                            out.setdefault(key, set()).update(r["verbs"])
        return out

    assert rules_of("tether-listener") == {
        ("kcp-system", "operator.kyma-project.io", "kymas", ()): {"list", "watch"},
        ("kcp-system", TETHER, "runtimedeliveries", ()): {"get", "create"},
        ("kcp-system", TETHER, "runtimedeliveries/status", ()): {"update"},
        # list+watch: the pod's view (listener/view)
        ("kcp-system", TETHER, "runtimestatesummaries", ()): {"get", "list", "watch", "create"},
        ("kcp-system", TETHER, "runtimestatesummaries/status", ()): {"update"},
        ("kcp-system", TETHER, "watches", ()): {"get", "list"},  # what records are admitted
        ("tether-heartbeats", COORDINATION, "leases", ()): {"list", "watch", "create", "patch"},
    }
    assert rules_of("tether-janitor") == {
        ("kcp-system", "operator.kyma-project.io", "kymas", ()): {"list"},
        ("kcp-system", TETHER, "runtimedeliveries", ()): {"list", "delete"},
        ("kcp-system", TETHER, "runtimestatesummaries", ()): {"get", "create", "delete"},
        ("kcp-system", TETHER, "runtimestatesummaries/status", ()): {"update"},
        ("kcp-system", TETHER, "watches", ()): {"list"},  # a deleted Watch's records go
        ("tether-heartbeats", COORDINATION, "leases", ()): {"list", "create", "patch", "delete"},
        ("tether-system", COORDINATION, "leases", ()): {"create"},
        ("tether-system", COORDINATION, "leases", ("tether-janitor",)): {"get", "update"},
    }
    # the Deployments point the parts at the namespaces their Roles are in
    env = {
        name: {
            e["name"]: e.get("value")
            for c in d["spec"]["template"]["spec"]["containers"]
            for e in c.get("env") or []
        }
        for d in rendered
        if d["kind"] == "Deployment"
        for name in [d["metadata"]["name"]]
    }
    assert env["tether-listener"]["TETHER_LISTENER_HEARTBEAT_NAMESPACE"] == "tether-heartbeats"
    assert env["tether-janitor"]["TETHER_LISTENER_HEARTBEAT_NAMESPACE"] == "tether-heartbeats"
    assert env["tether-janitor"]["TETHER_LISTENER_JANITOR_LEASE_NAMESPACE"] == "tether-system"
    assert env["tether-enroller"]["TETHER_HEARTBEAT_NAMESPACE"] == "tether-heartbeats"
    assert env["tether-admin"]["TETHER_HEARTBEAT_NAMESPACE"] == "tether-heartbeats"
    retention = "TETHER_LISTENER_TOMBSTONE_RETENTION_SECONDS"
    assert env["tether-listener"][retention] == env["tether-janitor"][retention]
    assert ("Namespace", "tether-heartbeats") in {
        (d["kind"], d["metadata"]["name"]) for d in rendered
    }


# -- a real API server: SubjectAccessReviews of the applied RBAC ------------------------------


class Plane:
    """The rendered RBAC applied to the plane under this module's names."""

    def __init__(self, api: client.ApiClient, docs: list[dict[str, Any]], suffix: str) -> None:
        self.api, self.suffix = api, suffix
        self.ns = {n: f"{n.split('-')[0]}-{n.split('-')[1][:4]}-{suffix}" for n in NAMESPACES}
        self.objects = [self._renamed(d) for d in docs if d["kind"] in RBAC_KINDS]

    def _renamed(self, doc: dict[str, Any]) -> dict[str, Any]:
        d: dict[str, Any] = json.loads(json.dumps(doc))
        meta = d["metadata"]
        if "namespace" in meta:
            meta["namespace"] = self.ns[meta["namespace"]]
        else:
            meta["name"] = f"{meta['name']}-{self.suffix}"
        if d.get("roleRef", {}).get("kind") == "ClusterRole":
            d["roleRef"]["name"] = f"{d['roleRef']['name']}-{self.suffix}"
        for s in d.get("subjects") or []:
            if "namespace" in s:
                s["namespace"] = self.ns[s["namespace"]]
        return d

    def apply(self, kcp: controlplane.ControlPlane, work: Any) -> None:
        core = client.CoreV1Api(self.api)

        def create(ns: str) -> None:
            controlplane.retry_busy(
                lambda: core.create_namespace(
                    client.V1Namespace(metadata=client.V1ObjectMeta(name=ns))
                )
            )

        for ns in self.ns.values():
            create(ns)
        path = work / "rbac.yaml"
        path.write_text(yaml.safe_dump_all(self.objects))
        done = kcp.kubectl("apply", "-f", str(path))
        assert done.returncode == 0, done.stderr

    def remove(self) -> None:
        core, rbac = client.CoreV1Api(self.api), client.RbacAuthorizationV1Api(self.api)
        for d in self.objects:
            if d["kind"] == "ClusterRole":
                rbac.delete_cluster_role(d["metadata"]["name"])
            elif d["kind"] == "ClusterRoleBinding":
                rbac.delete_cluster_role_binding(d["metadata"]["name"])
        for ns in self.ns.values():
            core.delete_namespace(ns)

    def can(
        self,
        sa: str,
        verb: str,
        resource: str,
        namespace: str | None,
        *,
        group: str = "",
        name: str = "",
        subresource: str = "",
    ) -> bool:
        """May ServiceAccount ``sa`` (tether-system) do it? ``namespace``: one of the
        manifests' names, or None for all namespaces (a cluster-wide grant)."""
        ts = self.ns["tether-system"]
        review = client.V1SubjectAccessReview(
            spec=client.V1SubjectAccessReviewSpec(
                user=f"system:serviceaccount:{ts}:{sa}",
                groups=[
                    "system:serviceaccounts",
                    f"system:serviceaccounts:{ts}",
                    "system:authenticated",
                ],
                resource_attributes=client.V1ResourceAttributes(
                    namespace=self.ns[namespace] if namespace else "",
                    verb=verb,
                    group=group,
                    resource=resource,
                    name=name or None,
                    subresource=subresource or None,
                ),
            )
        )
        answer: Any = client.AuthorizationV1Api(self.api).create_subject_access_review(review)
        return bool(answer.status.allowed)


@pytest.fixture(scope="module")
def plane(
    kcp: controlplane.ControlPlane,
    kcp_api: client.ApiClient,
    rendered: list[dict[str, Any]],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Plane]:
    p = Plane(kcp_api, rendered, uuid.uuid4().hex[:6])
    p.apply(kcp, tmp_path_factory.mktemp("privileges"))
    try:
        yield p
    finally:
        p.remove()


EVERYWHERE = (*NAMESPACES, None)  # None: all namespaces at once


def test_the_listener_deletes_nothing_and_writes_only_heartbeat_leases(plane: Plane) -> None:
    sa = "tether-listener"
    for ns in EVERYWHERE:
        for verb in ("delete", "deletecollection"):
            for res in RECORD_KINDS:
                if (verb, res) == ("delete", "runtimeconfigmaps"):
                    continue  # its unbacked tombstones only: the KCP's admission (policy.yaml)
                assert not plane.can(sa, verb, res, ns, group=TETHER), (verb, res, ns)
            assert not plane.can(sa, verb, "leases", ns, group=COORDINATION), (verb, ns)
    for ns in ("kcp-system", "tether-system", None):  # other controllers' Leases, Tether's own
        for verb in ("create", "patch", "update", "get", "list"):
            assert not plane.can(sa, verb, "leases", ns, group=COORDINATION), (verb, ns)
            assert not plane.can(
                sa, verb, "leases", ns, group=COORDINATION, name="tether-janitor"
            ), (verb, ns)
    for verb in ("create", "patch", "list"):
        assert plane.can(sa, verb, "leases", "tether-heartbeats", group=COORDINATION)
    assert plane.can(
        sa, "patch", "leases", "tether-heartbeats", group=COORDINATION, name="tether-rt-0123"
    )
    # what it does need: records wherever a Watch stores them, the rest in kcp-system only
    for ns in EVERYWHERE:
        assert plane.can(sa, "create", "runtimeconfigmaps", ns, group=TETHER), ns
    assert plane.can(
        sa, "update", "runtimedeliveries", "kcp-system", group=TETHER, subresource="status"
    )
    assert not plane.can(sa, "create", "runtimedeliveries", "tether-heartbeats", group=TETHER)


def test_the_janitor_deletes_records_and_heartbeats_and_nothing_else(plane: Plane) -> None:
    sa = "tether-janitor"
    for res in RECORD_KINDS:
        assert plane.can(sa, "delete", res, "kcp-system", group=TETHER), res
    for ns in EVERYWHERE:  # records wherever a Watch stores them, never written
        assert plane.can(sa, "deletecollection", "runtimeconfigmaps", ns, group=TETHER), ns
        assert not plane.can(sa, "create", "runtimeconfigmaps", ns, group=TETHER), ns
    assert plane.can(sa, "delete", "leases", "tether-heartbeats", group=COORDINATION)
    for ns in ("kcp-system", "tether-system", None):
        assert not plane.can(sa, "delete", "leases", ns, group=COORDINATION), ns
        assert not plane.can(sa, "patch", "leases", ns, group=COORDINATION), ns
    for ns in ("tether-heartbeats", "tether-system", None):
        for res in RECORD_KINDS[1:]:
            assert not plane.can(sa, "delete", res, ns, group=TETHER), (res, ns)
    # its election Lease by name, no other
    assert plane.can(
        sa, "update", "leases", "tether-system", group=COORDINATION, name="tether-janitor"
    )
    assert not plane.can(
        sa, "update", "leases", "tether-system", group=COORDINATION, name="tether-compass"
    )


def test_kubeconfig_secrets_are_read_by_name_only(plane: Plane) -> None:
    for sa in ("tether-enroller", "tether-compass"):
        assert plane.can(sa, "get", "secrets", "kcp-system", name="kubeconfig-kyma-1"), sa
        for ns in EVERYWHERE:
            for verb in ("list", "watch"):
                assert not plane.can(sa, verb, "secrets", ns), (sa, verb, ns)
        for verb in ("create", "update", "patch", "delete"):
            assert not plane.can(sa, verb, "secrets", "kcp-system"), (sa, verb)
        assert not plane.can(sa, "get", "secrets", None), sa
    # the enroller's own CA Secret by name; compass reads no Secret in tether-system (its
    # OAuth client's is mounted by the kubelet)
    assert plane.can(
        "tether-enroller", "get", "secrets", "tether-system", name="tether-enroller-ca"
    )
    assert not plane.can(
        "tether-enroller", "get", "secrets", "tether-system", name="tether-compass-oauth"
    )
    assert not plane.can(
        "tether-compass", "get", "secrets", "tether-system", name="tether-compass-oauth"
    )


def test_nobody_has_secrets_beyond_those(plane: Plane, rendered: list[dict[str, Any]]) -> None:
    accounts = sorted(d["metadata"]["name"] for d in rendered if d["kind"] == "ServiceAccount")
    assert len(accounts) == 5
    for sa in accounts:
        for verb in ("get", "list", "watch", "create", "update", "patch", "delete"):
            assert not plane.can(sa, verb, "secrets", None), (sa, verb)  # cluster-wide
            assert not plane.can(sa, verb, "secrets", "tether-heartbeats"), (sa, verb)
        if sa not in ("tether-enroller", "tether-compass"):
            for ns in ("kcp-system", "tether-system"):
                assert not plane.can(sa, "get", "secrets", ns, name="kubeconfig-kyma-1"), (sa, ns)


def test_the_enroller_reads_the_watches_and_writes_only_their_status(plane: Plane) -> None:
    sa = "tether-enroller"
    for verb in ("get", "list", "watch"):
        assert plane.can(sa, verb, "watches", "kcp-system", group=TETHER), verb
    for verb in ("get", "update", "patch"):
        assert plane.can(sa, verb, "watches", "kcp-system", group=TETHER, subresource="status"), (
            verb
        )
    for verb in ("create", "update", "patch", "delete"):  # what is watched is the consumers' to say
        assert not plane.can(sa, verb, "watches", "kcp-system", group=TETHER), verb
    for ns in ("tether-heartbeats", "tether-system", None):
        assert not plane.can(sa, "list", "watches", ns, group=TETHER), ns
