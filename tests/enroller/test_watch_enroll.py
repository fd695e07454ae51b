"""The enroller renders the Watches into the runtimes, against real planes: a KCP of its own
(the Watch CRD is installed by these tests, and a KCP without it must render as before) and
two runtime planes. The enroller runs in-process, one run at a time (``reconcile.Enroller``)."""

from __future__ import annotations

import json
import pathlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from enroller import render
from testing import controlplane, watchenv
from testing.enrollenv import CRD as ENROLLMENT_CRD
from testing.enrollenv import Env, writes
from tether.kube import apitypes, gateway
from tether.wire import watchwire

pytestmark = pytest.mark.processes
WIDGETS = {"group": "example.com", "version": "v1", "resource": "widgets", "kind": "Widget"}
CONFIGMAPS = {"group": "", "version": "v1", "resource": "configmaps", "kind": "ConfigMap"}
SECRETS = {"group": "", "version": "v1", "resource": "secrets", "kind": "Secret"}
OPT_IN = "tether-test/watched"


@pytest.fixture(scope="module")
def planes() -> Iterator[dict[str, controlplane.ControlPlane]]:
    with controlplane.planes("wkcp", "w-a", "w-b") as p:
        api = p["wkcp"].api_client()
        try:
            controlplane.install_crds(api, controlplane.KYMA_CRD, ENROLLMENT_CRD)
        finally:
            api.close()
        yield p


@pytest.fixture
def env(planes: dict[str, controlplane.ControlPlane], tmp_path: pathlib.Path) -> Iterator[Env]:
    kcp = planes["wkcp"]
    ns = f"w-{uuid.uuid4().hex[:8]}"
    api = kcp.api_client()
    client.CoreV1Api(api).create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=ns))
    )
    api.close()
    e = Env(kcp, ns, tmp_path)
    yield e
    custom = client.CustomObjectsApi(e.api)
    for k in custom.list_namespaced_custom_object(
        "operator.kyma-project.io", "v1beta2", ns, "kymas"
    )["items"]:
        custom.patch_namespaced_custom_object(
            "operator.kyma-project.io",
            "v1beta2",
            ns,
            "kymas",
            k["metadata"]["name"],
            {"metadata": {"finalizers": None}},
        )
    e.gw.close()
    e.api.close()


def vwc_hooks(plane: controlplane.ControlPlane) -> list[dict[str, Any]]:
    api = plane.api_client()
    try:
        obj = client.AdmissionregistrationV1Api(api).read_validating_webhook_configuration(
            render.WEBHOOK_CONFIG
        )
        return [api.sanitize_for_serialization(h) for h in obj.webhooks or []]
    finally:
        api.close()


def wire(plane: controlplane.ControlPlane) -> dict[str, Any] | None:
    """The runtime's Watch list (None: no tether-watches ConfigMap)."""
    api = plane.api_client()
    try:
        cm = client.CoreV1Api(api).read_namespaced_config_map(
            watchwire.WIRE_CONFIGMAP, render.NAMESPACE
        )
        doc: dict[str, Any] = json.loads(cm.data[watchwire.WIRE_KEY])
        return doc
    except client.ApiException as e:
        if e.status == 404:
            return None
        raise
    finally:
        api.close()


def names(plane: controlplane.ControlPlane) -> tuple[list[str], list[str] | None]:
    """The runtime's webhooks (by Watch) and the Watches on its list (None: no list)."""
    hooks = [h["name"].removesuffix(".watches.tether.kyma-project.io") for h in vwc_hooks(plane)]
    doc = wire(plane)
    return hooks, None if doc is None else [w["name"] for w in doc["watches"]]


def watch_obj(env: Env, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = client.CustomObjectsApi(env.api).get_namespaced_custom_object(
        apitypes.WATCHES.group, apitypes.WATCHES.version, env.ns, apitypes.WATCHES.plural, name
    )
    return obj


def cond(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in obj["status"]["conditions"] if c["type"] == kind)


def relabel(env: Env, name: str, labels: dict[str, str | None]) -> None:
    client.CustomObjectsApi(env.api).patch_namespaced_custom_object(
        "operator.kyma-project.io",
        "v1beta2",
        env.ns,
        "kymas",
        name,
        {"metadata": {"labels": labels}},
    )


def test_without_the_watch_crd_the_runtime_is_rendered_as_before(
    env: Env, planes: dict[str, controlplane.ControlPlane]
) -> None:
    """Runs first in this module: the KCP has no Watch CRD yet (a list answers 404)."""
    env.kyma("legacy", planes["w-a"])
    e = env.enroller()
    assert e.run() == {"Ready": 1}
    assert [h["name"] for h in vwc_hooks(planes["w-a"])] == ["configmaps.tether.kyma-project.io"]
    assert wire(planes["w-a"]) is None
    before = writes(e)
    assert e.run() == {"Ready": 1}
    assert writes(e) == before  # the steady state writes nothing, as before Watches
    # a list that fails later renders as the previous run did: before Watches
    nobody = gateway.from_kubeconfig(
        str(planes["wkcp"].issue_client_cert(f"nobody-{uuid.uuid4().hex[:6]}"))
    )
    try:
        e.watching.kcp = nobody
        assert e.run() == {"Ready": 1}
        assert writes(e) == before
    finally:
        nobody.close()


def test_watches_are_rendered_where_they_apply_follow_changes_and_report_status(
    env: Env, planes: dict[str, controlplane.ControlPlane]
) -> None:
    watchenv.install_crd(env.api)
    a, b = planes["w-a"], planes["w-b"]
    env.kyma("alpha", a)
    env.kyma("beta", b)
    env.kyma("gamma", None)  # no kubeconfig: selected, never in force
    relabel(env, "alpha", {OPT_IN: "yes"})
    watchenv.apply(
        env.api,
        watchenv.watch(
            "cms", CONFIGMAPS, env.ns, runtimes={"selector": {"matchLabels": {OPT_IN: "yes"}}}
        ),
    )
    watchenv.apply(env.api, watchenv.watch("widgets", WIDGETS, env.ns, send={"mode": "metadata"}))
    # a Secret Watch with a value mode, or a kind that is not its resource's: the CRD refuses it
    for resource, mode in ((SECRETS, "full"), ({**SECRETS, "kind": "ConfigMap"}, "full")):
        with pytest.raises(client.ApiException) as refused:
            watchenv.apply(env.api, watchenv.watch("bad", resource, env.ns, send={"mode": mode}))
        assert refused.value.status == 422
    # one the CRD lets through and the enroller cannot use
    watchenv.apply(env.api, watchenv.watch("bad", CONFIGMAPS, env.ns, send={"mode": "keys"}))
    e = env.enroller()
    assert e.run() == {"Ready": 2, "Failed": 1}
    assert names(a) == (["cms", "widgets"], ["cms", "widgets"])
    assert names(b) == (["widgets"], ["widgets"])
    hook = next(h for h in vwc_hooks(a) if h["name"].startswith("widgets."))
    assert hook["rules"][0]["apiGroups"] == ["example.com"] and hook["rules"][0]["resources"] == [
        "widgets",
        "widgets/status",
    ]
    assert (
        hook["clientConfig"]["service"]["name"] == "tether-webhook"
        and hook["clientConfig"]["caBundle"]
    )

    widgets = watch_obj(env, "widgets")
    assert (
        widgets["status"]["runtimes"]["selected"] == 3
        and widgets["status"]["runtimes"]["inForce"] == 2
    )
    [missing] = widgets["status"]["runtimes"]["notInForce"]
    assert missing["runtimeId"] == "rt-gamma" and missing["reason"].startswith("KubeconfigMissing")
    assert (cond(widgets, "Ready")["status"], cond(widgets, "Valid")["status"]) == ("False", "True")
    cms = watch_obj(env, "cms")
    assert cms["status"]["runtimes"] == {"selected": 1, "inForce": 1, "notInForce": []}
    assert cond(cms, "Ready")["reason"] == "InForce"
    bad = watch_obj(env, "bad")
    assert (cond(bad, "Valid")["status"], cond(bad, "Valid")["reason"]) == ("False", "Invalid")
    assert "spec.send.keys" in cond(bad, "Valid")["message"]
    assert {
        state: e.stats.watches.labels(state)._value.get()
        for state in ("Ready", "Pending", "Invalid")
    } == {"Ready": 1, "Pending": 1, "Invalid": 1}

    # nothing changed: nothing written in the runtimes, no Watch status written
    before, rv = writes(e), cms["metadata"]["resourceVersion"]
    assert e.run() == {"Ready": 2, "Failed": 1}
    assert writes(e) == before and watch_obj(env, "cms")["metadata"]["resourceVersion"] == rv

    # a Kyma CR relabelled and a Watch edited: the next reaction renders both, applying
    # only what the Watches make (the Watch list and the webhook configuration)
    before = writes(e)
    relabel(env, "beta", {OPT_IN: "yes"})
    watchenv.apply(
        env.api,
        watchenv.watch("widgets", WIDGETS, env.ns, send={"mode": "metadata"}, namespaces=["shop"]),
    )
    e.react()
    assert names(b) == (["cms", "widgets"], ["cms", "widgets"])
    e.run()
    hook = next(h for h in vwc_hooks(a) if h["name"].startswith("widgets."))
    assert {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["shop"]} in hook[
        "namespaceSelector"
    ]["matchExpressions"]
    assert next(w for w in wire(a)["watches"] if w["name"] == "widgets")["generation"] == 2  # type: ignore[index]
    assert watch_obj(env, "widgets")["status"]["observedGeneration"] == 2
    assert watch_obj(env, "cms")["status"]["runtimes"]["inForce"] == 2
    assert writes(e) - before == 4  # two objects in each of the two runtimes
    assert e.stats.applies.labels("watches")._value.get() == 2

    # a Watch deleted: its webhook goes (the list is replaced, not merged)
    watchenv.delete(env.api, env.ns, "cms")
    relabel(env, "beta", {OPT_IN: None})
    e.run()
    assert names(a) == (["widgets"], ["widgets"])
    assert names(b) == (["widgets"], ["widgets"])

    # no Watch in force: no webhook at all, an empty list
    watchenv.delete(env.api, env.ns, "widgets")
    e.run()
    assert names(a) == ([], [])


def test_watches_not_readable_leave_the_runtimes_as_they_are(
    env: Env, planes: dict[str, controlplane.ControlPlane]
) -> None:
    """A list of the Watches that fails (here: an identity without RBAC on them) never turns
    a runtime's Watches into the old scope: the previous run's are kept; with none known the
    run changes no runtime and says why."""
    watchenv.install_crd(env.api)
    env.kyma("eps", planes["w-a"])
    watchenv.apply(env.api, watchenv.watch("cms", CONFIGMAPS, env.ns))
    nobody = gateway.from_kubeconfig(
        str(planes["wkcp"].issue_client_cert(f"nobody-{uuid.uuid4().hex[:6]}"))
    )
    try:
        e = env.enroller()
        assert e.run() == {"Ready": 1}
        assert names(planes["w-a"]) == (["cms"], ["cms"])
        e.watching.kcp = nobody  # the KCP refuses the list from now on
        assert e.run() == {"Ready": 1}  # the previous run's Watches
        assert names(planes["w-a"]) == (["cms"], ["cms"])

        fresh = env.enroller()  # a new process: no Watches known
        fresh.watching.kcp = nobody
        before = writes(fresh)
        assert fresh.run() == {"Failed": 1}
        assert writes(fresh) == before
        enrolled = env.condition("eps", "Enrolled")
        assert (enrolled["status"], enrolled["reason"]) == ("False", "WatchesUnreadable")
        assert names(planes["w-a"]) == (["cms"], ["cms"])
    finally:
        nobody.close()


def test_when_the_watch_crd_goes_the_runtime_is_rendered_as_before_again(
    env: Env, planes: dict[str, controlplane.ControlPlane]
) -> None:
    watchenv.install_crd(env.api)
    env.kyma("delta", planes["w-b"])
    watchenv.apply(env.api, watchenv.watch("cms", CONFIGMAPS, env.ns))
    e = env.enroller()
    assert e.run() == {"Ready": 1}
    assert names(planes["w-b"]) == (["cms"], ["cms"])
    ext = client.ApiextensionsV1Api(env.api)
    ext.delete_custom_resource_definition(f"{apitypes.WATCHES.plural}.{apitypes.WATCHES.group}")
    deadline = time.monotonic() + 60
    while True:
        try:
            client.CustomObjectsApi(env.api).list_namespaced_custom_object(
                apitypes.WATCHES.group, apitypes.WATCHES.version, env.ns, apitypes.WATCHES.plural
            )
        except client.ApiException as err:
            if err.status == 404:
                break
        assert time.monotonic() < deadline, "the Watch CRD is still served"
        time.sleep(0.5)
    assert e.run() == {"Ready": 1}
    assert names(planes["w-b"]) == (["configmaps.tether.kyma-project.io"], None)


def test_a_custom_watch_whose_kind_the_runtime_contradicts_is_not_rendered_there(
    env: Env, planes: dict[str, controlplane.ControlPlane]
) -> None:
    """A Watch of a custom resource passes the CRD (its group is not one Kubernetes serves);
    the runtime's discovery says widgets are Widgets: a Watch calling them Gadgets is not
    rendered there (its status says why), the true one is, and a runtime that does not
    serve the group yet gets both (its senders check each object's own kind)."""
    watchenv.install_crd(env.api)
    group = f"kinds-{uuid.uuid4().hex[:6]}.example.com"
    api = planes["w-a"].api_client()
    try:
        controlplane.install_crds(api, watchenv.widget_crd(group))
    finally:
        api.close()
    env.kyma("kappa", planes["w-a"])
    env.kyma("lambda", planes["w-b"])
    widgets = watchenv.widgets(group)
    watchenv.apply(env.api, watchenv.watch("true-kind", widgets, env.ns))
    watchenv.apply(env.api, watchenv.watch("false-kind", {**widgets, "kind": "Gadget"}, env.ns))
    e = env.enroller()
    reads = e.stats.requests.labels("read")
    assert e.run() == {"Ready": 2}
    first = reads._value.get()
    assert names(planes["w-a"]) == (["true-kind"], ["true-kind"])
    assert names(planes["w-b"]) == (["false-kind", "true-kind"], ["false-kind", "true-kind"])
    false = watch_obj(env, "false-kind")
    [where] = false["status"]["runtimes"]["notInForce"]
    assert where["runtimeId"] == "rt-kappa" and where["reason"].startswith("KindMismatch")
    assert "Widget" in where["reason"] and "Gadget" in where["reason"]
    assert cond(false, "Ready")["reason"] == "Pending"
    assert watch_obj(env, "true-kind")["status"]["runtimes"]["inForce"] == 2
    assert e.run() == {"Ready": 2}
    # one discovery read per runtime in the first run, none in the next: the answer is kept
    assert first - (reads._value.get() - first) == 2
