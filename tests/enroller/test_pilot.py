"""A pilot before the fleet (issue 42 item 3), on real planes: a fleet of Kyma CRs in the
KCP, three of them with runtime planes of their own and one whose kubeconfig is missing;
``TETHER_ENROLLER_KYMA_SELECTOR`` picks the pilot. Only the selected are touched (the
others keep their resourceVersion: no finalizer, no RuntimeEnrollment, nothing in their
runtime); the dry run writes nothing anywhere (every resourceVersion unchanged) and says per
runtime what it would do; ``tether enroller --uninstall`` (``enroller.removal.uninstall``) leaves no
finalizer, no RuntimeEnrollment and no Tether object in any runtime."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from enroller import dryrun, reconcile, removal, render
from testing import controlplane
from testing.enrollenv import Env, runtime_objects
from tether.wire import filters

pytestmark = pytest.mark.processes

PILOT = {"tether.kyma-project.io/pilot": "wave-0"}
SELECTOR = filters.parse_selector("tether.kyma-project.io/pilot=wave-0")


@pytest.fixture(scope="module")
def fleet() -> Iterator[list[controlplane.ControlPlane]]:
    with controlplane.planes("pil-a", "pil-b", "pil-c") as p:
        yield [p["pil-a"], p["pil-b"], p["pil-c"]]


def kymas(env: Env) -> dict[str, dict[str, Any]]:
    items = client.CustomObjectsApi(env.api).list_namespaced_custom_object(
        "operator.kyma-project.io", "v1beta2", env.ns, "kymas"
    )["items"]
    return {k["metadata"]["name"]: k for k in items}


def enrollments(env: Env) -> list[str]:
    items = client.CustomObjectsApi(env.api).list_namespaced_custom_object(
        "tether.kyma-project.io", "v1alpha1", env.ns, "runtimeenrollments"
    )["items"]
    return sorted(e["metadata"]["name"] for e in items)


def versions(api: client.ApiClient, namespace: str | None = None) -> dict[tuple[str, ...], str]:
    """Every object's resourceVersion (of the kinds the enroller writes, and more): in one
    namespace of the KCP, or everywhere in a runtime plane (no lease: the API server renews
    its own)."""
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    rbac, adm = client.RbacAuthorizationV1Api(api), client.AdmissionregistrationV1Api(api)
    objs = client.CustomObjectsApi(api)
    lists: dict[str, Any] = {}
    if namespace is None:
        lists = {
            "ns": core.list_namespace().items,
            "secret": core.list_secret_for_all_namespaces().items,
            "cm": core.list_config_map_for_all_namespaces().items,
            "sa": core.list_service_account_for_all_namespaces().items,
            "deploy": apps.list_deployment_for_all_namespaces().items,
            "cr": rbac.list_cluster_role().items,
            "crb": rbac.list_cluster_role_binding().items,
            "vwc": adm.list_validating_webhook_configuration().items,
        }
    else:
        lists = {
            "secret": core.list_namespaced_secret(namespace).items,
            "cm": core.list_namespaced_config_map(namespace).items,
            "event": core.list_namespaced_event(namespace).items,
        }
    out = {
        (kind, o.metadata.namespace or "", o.metadata.name): str(o.metadata.resource_version)
        for kind, items in lists.items()
        for o in items
    }
    if namespace is not None:
        for plural, group, version in (
            ("kymas", "operator.kyma-project.io", "v1beta2"),
            ("runtimeenrollments", "tether.kyma-project.io", "v1alpha1"),
        ):
            for o in objs.list_namespaced_custom_object(group, version, namespace, plural)["items"]:
                out[(plural, namespace, o["metadata"]["name"])] = o["metadata"]["resourceVersion"]
    return out


def installed(plane: controlplane.ControlPlane) -> bool:
    got = runtime_objects(plane)
    return bool(
        got["deployments"] or got["clusterroles"] or "vwc" in got or render.CLIENT_SECRET in got
    )


def test_only_the_pilot_is_enrolled_and_uninstall_leaves_nothing_behind(
    env: Env, fleet: list[controlplane.ControlPlane]
) -> None:
    a, b, c = fleet
    env.kyma("pa", a, labels=PILOT)
    env.kyma("pb", b, labels=PILOT)
    env.kyma("pc", c)  # not in the pilot, its runtime reachable
    env.kyma("lost", None, labels=PILOT)  # in the pilot, its kubeconfig missing
    for i in range(6):  # the rest of a fleet of 5,000: Kyma CRs outside the selector
        env.kyma(f"rest-{i}", None)
    outside = {
        n: k["metadata"]["resourceVersion"]
        for n, k in kymas(env).items()
        if n not in ("pa", "pb", "lost")
    }

    e = env.enroller(kyma_selector=SELECTOR)
    # the dry run: what it would do, per runtime and where; nothing written anywhere
    apis = [p.api_client() for p in fleet]
    try:
        before = [versions(env.api, env.ns), *(versions(api) for api in apis)]
        plan = dryrun.dry_run(e)
        assert [versions(env.api, env.ns), *(versions(api) for api in apis)] == before
    finally:
        for api in apis:
            api.close()
    assert plan[0] == f"3 of 10 Kyma CRs in {env.ns} selected"
    assert plan[1].startswith(f"KCP {env.ns}: would create the watcher CA")
    lines = {line.split(" ")[1]: line for line in plan[2:]}
    assert set(lines) == {"pa", "pb", "lost"}
    for name, plane in (("pa", a), ("pb", b)):
        assert f"at {plane.api_client().configuration.host}" in lines[name]
        assert "would apply" in lines[name] and "(installed)" in lines[name]
        assert lines[name].endswith("would add the finalizer first")
    assert "would fail: KubeconfigMissing" in lines["lost"]
    assert enrollments(env) == [] and not installed(a) and not installed(b)

    assert e.run() == {"Ready": 2, "Failed": 1}
    # a reaction to changed Kyma CRs runs the pilot's only
    reacted = e.react()
    assert set(reacted) <= {"Ready", "Failed"} and sum(reacted.values()) <= 3, reacted
    now = kymas(env)
    assert {n: now[n]["metadata"]["resourceVersion"] for n in outside} == outside
    assert enrollments(env) == ["lost", "pa", "pb"]
    assert installed(a) and installed(b) and not installed(c)
    fin = {
        n for n, k in now.items() if reconcile.FINALIZER in (k["metadata"].get("finalizers") or [])
    }
    assert fin == {"pa", "pb"}  # not "lost": nothing was ever written into its runtime
    assert env.condition("lost", "Ready")["reason"] == "KubeconfigMissing"

    # the selector narrowed to nothing: what was installed stays the enroller's (finalizer)
    narrowed = env.enroller(kyma_selector=filters.parse_selector("nothing=matches"))
    assert narrowed.run() == {"Ready": 2}

    # uninstall: every runtime of the pilot cleaned, every finalizer and enrollment gone
    assert removal.uninstall(e) == {"Uninstalled": 3}
    assert not installed(a) and not installed(b) and not installed(c)
    after = kymas(env)
    assert not any(
        reconcile.FINALIZER in (k["metadata"].get("finalizers") or []) for k in after.values()
    )
    assert enrollments(env) == []
    assert {n: after[n]["metadata"]["resourceVersion"] for n in outside} == outside
    assert "runtime_removed" in env.audit_text.getvalue()
