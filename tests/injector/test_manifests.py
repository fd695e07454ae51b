"""The injector's manifests (manifests/kcp/injector, optional) and examples
(manifests/examples/injector): what they render to, and on a real KCP what its
ServiceAccount may do (SubjectAccessReview, with the rendered RBAC applied in namespaces of
this module's own): exactly what injector/ calls, no record and no Secret by itself; the
example Watch's records (its storage namespace, reader Role and the injector's binding:
manifests/examples/injector/records.yaml) and no other Watch's, and no write on a target
kind until the platform team's grant (the example) is applied."""

from __future__ import annotations

import functools
import subprocess
import time
import uuid
from collections.abc import Callable
from typing import Any, cast

import pytest
import yaml
from kubernetes import client

from testing import controlplane
from tether.wire import watches

pytestmark = pytest.mark.processes  # starts processes of its own (testing/tiers.py)

ROOT = controlplane.REPO_ROOT
KCP = ROOT / "manifests" / "kcp"
EXAMPLES = ROOT / "manifests" / "examples" / "injector"
SA = ("tether-system", "tether-injector")


def render(path: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [str(controlplane.binaries() / "kubectl"), "kustomize", str(KCP / path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def test_the_overlay_is_optional_and_runs_tether_injector() -> None:
    assert "injector" not in (KCP / "kustomization.yaml").read_text()
    docs = render("injector")
    [deploy] = [d for d in docs if d["kind"] == "Deployment"]
    pod = deploy["spec"]["template"]["spec"]
    [c] = pod["containers"]
    assert c["command"] == ["tether", "injector"] and pod["serviceAccountName"] == SA[1]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["TETHER_KCP_NAMESPACE"] == "kcp-system"
    assert env["TETHER_INJECTOR_LEASE_NAMESPACE"] == "tether-system"
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    labels = deploy["spec"]["template"]["metadata"]["labels"]
    for policy in render("networkpolicies"):  # DNS and the KCP API server, as every KCP part
        expr = policy["spec"]["podSelector"]["matchExpressions"][0]
        assert labels[expr["key"]] in expr["values"], policy["metadata"]["name"]


def test_the_example_watch_names_the_example_crd() -> None:
    w = watches.parse(yaml.safe_load((EXAMPLES / "watch.yaml").read_text()))
    crd = yaml.safe_load((EXAMPLES / "sample-crd.yaml").read_text())
    assert w.inject is not None and w.storage_namespace == "sample-configuration"
    ns, role, binding = list(yaml.safe_load_all((EXAMPLES / "records.yaml").read_text()))
    assert ns["metadata"]["name"] == role["metadata"]["namespace"] == w.storage_namespace
    assert binding["roleRef"]["name"] == role["metadata"]["name"] == "tether-records-reader"
    assert (w.inject.resource.group, w.inject.resource.plural) == (
        crd["spec"]["group"],
        crd["spec"]["names"]["plural"],
    )
    assert w.inject.field == ("spec", "configuration")
    version = crd["spec"]["versions"][0]
    assert "status" in version["subresources"]
    props = version["schema"]["openAPIV3Schema"]["properties"]
    assert props["spec"]["properties"]["configuration"]["additionalProperties"] == {
        "type": "string"
    }


def _renamed(docs: list[dict[str, Any]], names: dict[str, str]) -> list[dict[str, Any]]:
    text = yaml.safe_dump_all(docs)
    for old, new in names.items():
        text = text.replace(f"namespace: {old}\n", f"namespace: {new}\n")
    return [d for d in yaml.safe_load_all(text) if d]


def _apply(api: client.ApiClient, doc: dict[str, Any]) -> None:
    """Create one ServiceAccount, Role or RoleBinding (the client takes the manifest's dict)."""
    rbac, core = client.RbacAuthorizationV1Api(api), client.CoreV1Api(api)
    ns, body = doc["metadata"]["namespace"], cast(Any, doc)
    create: dict[str, Callable[[], object]] = {
        "ServiceAccount": lambda: core.create_namespaced_service_account(ns, body),
        "Role": lambda: rbac.create_namespaced_role(ns, body),
        "RoleBinding": lambda: rbac.create_namespaced_role_binding(ns, body),
    }
    if doc["kind"] in create:
        controlplane.retry_busy(create[doc["kind"]])


def _allowed(
    api: client.ApiClient,
    user: str,
    verb: str,
    ns: str,
    group: str,
    resource: str,
    name: str = "",
    subresource: str = "",
) -> bool:
    body = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=user,
            groups=[
                "system:serviceaccounts",
                f"system:serviceaccounts:{user.split(':')[2]}",
                "system:authenticated",
            ],
            resource_attributes=client.V1ResourceAttributes(
                verb=verb,
                namespace=ns,
                group=group,
                resource=resource,
                name=name or None,
                subresource=subresource or None,
            ),
        )
    )
    got = client.AuthorizationV1Api(api).create_subject_access_review(body)
    return got.status is not None and bool(got.status.allowed)


def _eventually(check: Callable[[], bool], timeout: float = 30.0) -> bool:
    """A new RoleBinding takes a moment to reach the authorizer's cache."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


@pytest.fixture(scope="module")
def names(kcp_api: client.ApiClient) -> dict[str, str]:
    suffix = uuid.uuid4().hex[:6]
    out = {
        ns: f"{ns}-{suffix}"[:63]
        for ns in (
            "kcp-system",
            "tether-system",
            "tether-configuration",
            "sample-configuration",
            "other",
        )
    }
    core = client.CoreV1Api(kcp_api)
    for ns in out.values():
        body = client.V1Namespace(metadata=client.V1ObjectMeta(name=ns))
        controlplane.retry_busy(lambda body=body: core.create_namespace(body))  # type: ignore[misc]
    reader = [
        d
        for d in yaml.safe_load_all((KCP / "watches" / "records.yaml").read_text())
        if d and d["kind"] == "Role"
    ]
    for doc in _renamed(render("injector") + reader, out):
        _apply(kcp_api, doc)
    return out


def test_the_service_account_may_do_what_the_injector_calls_and_no_more(
    kcp_api: client.ApiClient, names: dict[str, str]
) -> None:
    user = f"system:serviceaccount:{names['tether-system']}:tether-injector"
    kcp, system, records = (
        names["kcp-system"],
        names["tether-system"],
        names["sample-configuration"],
    )
    tether, rcm = "tether.kyma-project.io", "runtimeconfigmaps"

    def may(verb: str, ns: str, group: str, resource: str, **kw: str) -> bool:
        return _allowed(kcp_api, user, verb, ns, group, resource, **kw)

    assert may("list", kcp, tether, "watches")
    assert not may("list", records, tether, rcm)  # until the Watch's shipper binds it
    example = [
        d
        for d in yaml.safe_load_all((EXAMPLES / "records.yaml").read_text())
        if d["kind"] != "Namespace"
    ]  # the fixture made the namespace, renamed
    for doc in _renamed(example, names):
        if doc["kind"] == "RoleBinding":
            doc["subjects"] = [{**s, "namespace": system} for s in doc["subjects"]]
        _apply(kcp_api, doc)
    for verb in ("get", "list", "watch"):
        assert _eventually(functools.partial(may, verb, records, tether, rcm)), verb
    # the shipped Watch's records (tether-configuration, its own reader Role) stay out of reach
    assert not may("list", names["tether-configuration"], tether, rcm)
    assert not any(may(v, records, tether, rcm) for v in ("create", "update", "patch", "delete"))
    assert not may("list", kcp, tether, rcm) and not may("list", names["other"], tether, rcm)
    assert may("create", kcp, "", "events")
    assert may("create", system, "coordination.k8s.io", "leases")
    assert may("update", system, "coordination.k8s.io", "leases", name="tether-injector")
    assert not may("update", system, "coordination.k8s.io", "leases", name="tether-janitor")
    assert not any(may(v, ns, "", "secrets") for v in ("get", "list") for ns in (kcp, system))
    assert not may("patch", kcp, "sample.kyma-project.io", "samples")  # the platform's grant
    writer = list(yaml.safe_load_all((EXAMPLES / "sample-writer.yaml").read_text()))
    for doc in _renamed(writer, names):
        if doc["kind"] == "RoleBinding":
            doc["subjects"] = [{**s, "namespace": system} for s in doc["subjects"]]
        _apply(kcp_api, doc)
    assert may("patch", kcp, "sample.kyma-project.io", "samples")
    assert may("list", kcp, "sample.kyma-project.io", "samples")
    assert may("patch", kcp, "sample.kyma-project.io", "samples", subresource="status")
    assert not may("delete", kcp, "sample.kyma-project.io", "samples")
    assert not may("patch", names["other"], "sample.kyma-project.io", "samples")
