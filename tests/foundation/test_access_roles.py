"""The ClusterRoles ``tether-view`` and ``tether-edit`` (manifests/kcp/access, docs/access.md).

The unit tests read the manifest beside the CRDs: the six kinds exactly (the plurals read
from the CRD files, so the roles cannot drift from them), the aggregation labels, no wildcard
and no subresource. The others run the real aggregator, kube-controller-manager's
clusterrole-aggregation controller, against a plane of their own (the session's planes have
none, and the filled ``view``/``edit``/``admin`` would change what every other test's users
may do): the built-in roles take in Tether's rules, a user bound to ``view`` in a namespace
lists each of the six kinds there with kubectl and cannot create a Watch, and an ``edit`` user
creates a Watch but neither creates nor patches a RuntimeConfigMap, nor a Watch's status;
deleting the two roles takes their rules out of the built-in ones again.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client

from testing import controlplane

MANIFESTS = controlplane.REPO_ROOT / "manifests" / "kcp"
ROLES = MANIFESTS / "access" / "roles.yaml"
CRDS = sorted((MANIFESTS / "crds").glob("tether.kyma-project.io_*.yaml"))
AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"
READ = ("get", "list", "watch")
WRITE = ("create", "update", "patch", "delete", "deletecollection")
AGGREGATION_TIMEOUT = 60.0

processes = pytest.mark.processes  # only the tests that start a plane (testing/tiers.py)


def _crds() -> list[dict[str, Any]]:
    return [yaml.safe_load(p.read_text()) for p in CRDS]


GROUP = {crd["spec"]["group"] for crd in _crds()}.pop()
PLURALS = {crd["spec"]["names"]["plural"] for crd in _crds()}


def _roles() -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in yaml.safe_load_all(ROLES.read_text()) if d}


def grants(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    """(group, resource, verb) for every combination the rules name."""
    return {
        (g, r, v)
        for rule in rules
        for g in rule.get("apiGroups") or ()
        for r in rule.get("resources") or ()
        for v in rule.get("verbs") or ()
    }


def tethers(rules: list[dict[str, Any]] | None) -> set[tuple[str, str, str]]:
    return {g for g in grants(rules or []) if g[0] == GROUP}


# -- the manifest, as plain data ---------------------------------------------------------------


def test_the_crds_are_the_six_kinds_of_one_group() -> None:
    assert len(CRDS) == 6 and len(PLURALS) == 6
    assert GROUP == "tether.kyma-project.io"


def test_the_access_folder_is_part_of_the_kcp_base_and_holds_only_the_two_roles() -> None:
    base = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    assert "access" in base["resources"]
    own = yaml.safe_load((MANIFESTS / "access" / "kustomization.yaml").read_text())
    assert own["resources"] == ["roles.yaml"]
    docs = [d for d in yaml.safe_load_all(ROLES.read_text()) if d]
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("ClusterRole", "tether-view"),
        ("ClusterRole", "tether-edit"),
    ]


def test_no_wildcard_no_subresource_no_names_and_no_urls() -> None:
    for name, role in _roles().items():
        assert "aggregationRule" not in role, name  # aggregated into, not aggregating
        for rule in role["rules"]:
            assert set(rule) == {"apiGroups", "resources", "verbs"}, (name, rule)
            assert rule["apiGroups"] == [GROUP], (name, rule)
            for field in ("apiGroups", "resources", "verbs"):
                assert not any("*" in x for x in rule[field]), (name, field)
            assert not any("/" in r for r in rule["resources"]), (name, rule)


def test_view_reads_exactly_the_six_kinds_and_aggregates_into_view_edit_and_admin() -> None:
    role = _roles()["tether-view"]
    assert grants(role["rules"]) == {(GROUP, r, v) for r in PLURALS for v in READ}
    labels = role["metadata"]["labels"]
    assert labels["app.kubernetes.io/part-of"] == "tether"
    assert {k for k, v in labels.items() if k.startswith(AGGREGATE) and v == "true"} == {
        AGGREGATE + "view",
        AGGREGATE + "edit",
        AGGREGATE + "admin",
    }


def test_edit_writes_watches_only_and_aggregates_into_edit_and_admin_not_view() -> None:
    role = _roles()["tether-edit"]
    assert grants(role["rules"]) == {(GROUP, "watches", v) for v in READ + WRITE}
    labels = role["metadata"]["labels"]
    assert labels["app.kubernetes.io/part-of"] == "tether"
    assert {k for k, v in labels.items() if k.startswith(AGGREGATE) and v == "true"} == {
        AGGREGATE + "edit",
        AGGREGATE + "admin",
    }
    # what Tether's parts write stays theirs: no write on any other kind
    assert {r for _, r, v in grants(role["rules"]) if v in WRITE} == {"watches"}


# -- the real aggregator -----------------------------------------------------------------------


class Plane:
    """A plane of this module's own with kube-controller-manager's aggregator running, the
    CRDs and the two roles applied."""

    def __init__(self, plane: controlplane.ControlPlane) -> None:
        self.plane = plane
        self.api = plane.api_client()
        self.rbac = client.RbacAuthorizationV1Api(self.api)

    def kubectl(
        self, kubeconfig: pathlib.Path, *args: str, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """The plane's kubectl as the user of ``kubeconfig`` (a client certificate)."""
        return subprocess.run(
            [str(controlplane.binaries() / "kubectl"), f"--kubeconfig={kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def tether_rules(self, role: str) -> set[tuple[str, str, str]]:
        """What the ClusterRole ``role`` grants on Tether's group, as the plane serves it."""
        body: Any = self.rbac.read_cluster_role(role)
        return tethers([self.api.sanitize_for_serialization(r) for r in body.rules or []])

    def wait_for_rules(self, role: str, want: set[tuple[str, str, str]]) -> set[Any]:
        """Until the ClusterRole ``role`` grants everything in ``want`` (the aggregator has
        copied the rules into it); what it grants on Tether's group then."""
        deadline = time.monotonic() + AGGREGATION_TIMEOUT
        while True:
            got = self.tether_rules(role)
            if want <= got:
                return got
            if time.monotonic() > deadline:
                missing = sorted(want - got)
                raise AssertionError(f"{role} lacks {missing} after {AGGREGATION_TIMEOUT:.0f}s")
            time.sleep(0.2)

    def user_bound_to(self, cluster_role: str, namespace: str) -> pathlib.Path:
        """A new user (client certificate of the plane's CA) bound to ``cluster_role`` in
        ``namespace`` by a RoleBinding; its kubeconfig."""
        user = f"{cluster_role}-user-{uuid.uuid4().hex[:6]}"
        self.rbac.create_namespaced_role_binding(
            namespace,
            client.V1RoleBinding(
                metadata=client.V1ObjectMeta(name=user),
                role_ref=client.V1RoleRef(
                    api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=cluster_role
                ),
                subjects=[
                    client.RbacV1Subject(
                        kind="User", name=user, api_group="rbac.authorization.k8s.io"
                    )
                ],
            ),
        )
        return self.plane.issue_client_cert(user)

    def namespace(self) -> str:
        name = f"access-{uuid.uuid4().hex[:6]}"
        client.CoreV1Api(self.api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=name))
        )
        return name


@pytest.fixture(scope="module")
def aggregated() -> Iterator[Plane]:
    with controlplane.ControlPlane("access") as plane:
        plane.start_controller_manager()
        p = Plane(plane)
        controlplane.install_crds(p.api, *CRDS)
        done = plane.kubectl("apply", "-k", str(MANIFESTS / "access"))
        assert done.returncode == 0, done.stderr
        yield p


def watch(name: str, namespace: str) -> str:
    """A Watch (the shipped one's spec, without its storage) as kubectl reads it."""
    return json.dumps(
        {
            "apiVersion": f"{GROUP}/v1alpha1",
            "kind": "Watch",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "resource": {
                    "group": "",
                    "version": "v1",
                    "resource": "configmaps",
                    "kind": "ConfigMap",
                },
                "selector": {"matchLabels": {"tether.kyma-project.io/configuration": "true"}},
                "send": {"mode": "full"},
            },
        }
    )


def record(name: str, namespace: str) -> str:
    """A RuntimeConfigMap, as the listener would write it."""
    return json.dumps(
        {
            "apiVersion": f"{GROUP}/v1",
            "kind": "RuntimeConfigMap",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "runtimeId": "rt-access",
                "namespace": "team-a",
                "name": "app-config",
                "uid": "9c2e",
                "resourceVersion": "1",
                "observedAt": "2026-12-07T10:00:00.000000Z",
                "deleted": False,
                "source": "poller",
                "data": {"k": "v"},
            },
        }
    )


def refused(done: subprocess.CompletedProcess[str]) -> bool:
    """kubectl failed because RBAC said no (403), not for another reason."""
    return done.returncode != 0 and "forbidden" in done.stderr.lower()


READ_ALL = {(GROUP, r, v) for r in PLURALS for v in READ}
WRITE_WATCHES = {(GROUP, "watches", v) for v in WRITE}


@processes
def test_the_aggregator_copies_tethers_rules_into_view_edit_and_admin(aggregated: Plane) -> None:
    # exactly: nothing of Tether's is written through view, no status, no other kind written
    assert aggregated.wait_for_rules("view", READ_ALL) == READ_ALL
    assert aggregated.wait_for_rules("edit", READ_ALL | WRITE_WATCHES) == READ_ALL | WRITE_WATCHES
    assert aggregated.wait_for_rules("admin", READ_ALL | WRITE_WATCHES) == READ_ALL | WRITE_WATCHES


@processes
def test_a_view_user_lists_each_of_tethers_kinds_in_its_namespace_and_creates_no_watch(
    aggregated: Plane,
) -> None:
    p = aggregated
    p.wait_for_rules("view", READ_ALL)
    ns, elsewhere = p.namespace(), p.namespace()
    admin = p.plane.kubeconfig
    for where in (ns, elsewhere):
        done = p.kubectl(admin, "create", "-f", "-", stdin=watch("configuration", where))
        assert done.returncode == 0, done.stderr
    viewer = p.user_bound_to("view", ns)
    for plural in sorted(PLURALS):
        done = p.kubectl(viewer, "get", f"{plural}.{GROUP}", "-n", ns, "-o", "name")
        assert done.returncode == 0, (plural, done.stderr)
        if plural == "watches":
            assert done.stdout.split() == [f"watch.{GROUP}/configuration"]
        # bound in ns only: another namespace stays closed
        assert refused(p.kubectl(viewer, "get", f"{plural}.{GROUP}", "-n", elsewhere)), plural
    assert refused(p.kubectl(viewer, "create", "-f", "-", stdin=watch("mine", ns)))
    assert refused(p.kubectl(viewer, "delete", f"watches.{GROUP}", "configuration", "-n", ns))


@processes
def test_an_edit_user_creates_a_watch_but_writes_no_record_and_no_status(
    aggregated: Plane,
) -> None:
    p = aggregated
    p.wait_for_rules("edit", READ_ALL | WRITE_WATCHES)
    ns = p.namespace()
    done = p.kubectl(p.plane.kubeconfig, "create", "-f", "-", stdin=record("rt-access-1", ns))
    assert done.returncode == 0, done.stderr
    editor = p.user_bound_to("edit", ns)
    done = p.kubectl(editor, "create", "-f", "-", stdin=watch("mine", ns))
    assert done.returncode == 0, done.stderr
    done = p.kubectl(editor, "get", f"watches.{GROUP}", "mine", "-n", ns, "-o", "name")
    assert done.stdout.split() == [f"watch.{GROUP}/mine"], done.stderr
    done = p.kubectl(editor, "get", f"runtimeconfigmaps.{GROUP}", "-n", ns, "-o", "name")
    assert done.stdout.split() == [f"runtimeconfigmap.{GROUP}/rt-access-1"], done.stderr
    # the records are Tether's parts' to write
    assert refused(p.kubectl(editor, "create", "-f", "-", stdin=record("rt-access-2", ns)))
    patch = ("--type=merge", "-p", json.dumps({"spec": {"data": {"k": "forged"}}}))
    assert refused(
        p.kubectl(editor, "patch", f"runtimeconfigmaps.{GROUP}", "rt-access-1", "-n", ns, *patch)
    )
    # a Watch's status is the enroller's
    status = ("--subresource=status", "--type=merge", "-p", '{"status": {"conditions": []}}')
    assert refused(p.kubectl(editor, "patch", f"watches.{GROUP}", "mine", "-n", ns, *status))
    done = p.kubectl(editor, "delete", f"watches.{GROUP}", "mine", "-n", ns)
    assert done.returncode == 0, done.stderr


@processes
def test_deleting_the_roles_takes_their_rules_out_of_view_edit_and_admin(
    aggregated: Plane,
) -> None:
    """What an uninstall does: the aggregator recomputes the built-in roles without them."""
    p = aggregated
    p.wait_for_rules("admin", READ_ALL | WRITE_WATCHES)
    done = p.plane.kubectl("delete", "-k", str(MANIFESTS / "access"))
    assert done.returncode == 0, done.stderr
    try:
        deadline = time.monotonic() + AGGREGATION_TIMEOUT
        while any(p.tether_rules(role) for role in ("view", "edit", "admin")):
            assert time.monotonic() < deadline, "Tether's rules stayed in view, edit or admin"
            time.sleep(0.2)
    finally:
        done = p.plane.kubectl("apply", "-k", str(MANIFESTS / "access"))
        assert done.returncode == 0, done.stderr
    p.wait_for_rules("edit", READ_ALL | WRITE_WATCHES)


@processes
def test_the_controller_manager_refuses_a_second_start_and_fails_loudly(
    aggregated: Plane,
) -> None:
    plane = aggregated.plane
    with pytest.raises(controlplane.ControlPlaneError, match="already running"):
        plane.start_controller_manager()
    plane.stop_controller_manager()
    try:
        with pytest.raises(controlplane.ControlPlaneError, match="kube-controller-manager exited"):
            plane.start_controller_manager(["no-such-controller"])
    finally:
        plane.start_controller_manager()
