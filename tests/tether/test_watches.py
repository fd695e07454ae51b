"""tether.wire.watches: the Watch CR, which runtimes and objects it covers, what each send mode
keeps, the KCP's own check of a record, the list carried to a runtime and the webhook
entries (plain data)."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import pytest

from tether.wire import changes, conversion, watches, watchkinds, watchwire

CM = {"group": "", "version": "v1", "resource": "configmaps", "kind": "ConfigMap"}
SECRET = {"group": "", "version": "v1", "resource": "secrets", "kind": "Secret"}
WIDGET = {"group": "example.com", "version": "v1", "resource": "widgets", "kind": "Widget"}


def cr(name: str = "w", resource: dict[str, str] = CM, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "generation": 3}, "spec": {"resource": resource, **spec}}


def cm(
    data: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    ns: str = "app",
    name: str = "c",
    **extra: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "namespace": ns,
            "name": name,
            "uid": "u1",
            "resourceVersion": "7",
            "labels": labels or {},
            **extra,
        },
        "data": data or {},
    }


def record(w: watches.Watch, obj: dict[str, Any]) -> changes.ChangeRecord:
    return changes.from_object(obj, watch=w, runtime_id="rt-1", source="webhook")


def test_parse_reads_every_field() -> None:
    w = watches.parse(
        cr(
            namespaces=["a", "b"],
            ignoredNamespaces=["c"],
            selector={
                "matchLabels": {"x": "1"},
                "matchExpressions": [
                    {"key": "y", "operator": "NotIn", "values": ["2"]},
                    {"key": "z", "operator": "DoesNotExist"},
                ],
            },
            runtimes={"selector": {"matchLabels": {"region": "eu"}}, "module": "app-conn"},
            send={"mode": "keys", "keys": ["k1", "k2"]},
        )
    )
    assert (w.name, w.generation, w.namespaces, w.ignored_namespaces) == (
        "w",
        3,
        ("a", "b"),
        ("c",),
    )
    assert w.selector_text == "x=1,y notin (2),!z"
    assert (w.runtime_selector_text, w.module, w.mode, w.keys) == (
        "region=eu",
        "app-conn",
        "keys",
        ("k1", "k2"),
    )


@pytest.mark.parametrize(
    "spec, field",
    [
        ({"resource": {"version": "v1", "resource": "configmaps"}}, "spec.resource.kind"),
        ({"resource": {**CM, "version": "one"}}, "spec.resource.version"),
        ({"resource": SECRET, "send": {"mode": "full"}}, "spec.send.mode"),
        ({"resource": SECRET, "send": {"mode": "exclude", "keys": ["a"]}}, "spec.send.mode"),
        ({"resource": CM, "send": {"mode": "keys"}}, "spec.send.keys"),
        ({"resource": CM, "send": {"mode": "full", "keys": ["a"]}}, "spec.send.keys"),
        ({"resource": CM, "send": {"mode": "everything"}}, "spec.send.mode"),
        (
            {"resource": CM, "selector": {"matchExpressions": [{"key": "a", "operator": "In"}]}},
            "spec.selector",
        ),
        ({"resource": CM, "selector": {"matchLabels": {"bad key!": "x"}}}, "spec.selector"),
        ({"resource": CM, "namespaces": ["Not_A_Name"]}, "spec.namespaces"),
    ],
)
def test_parse_refuses_with_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(watches.WatchError) as e:
        watches.parse({"metadata": {"name": "w"}, "spec": spec})
    assert str(e.value).startswith(field)


def test_a_secret_watch_defaults_to_metadata() -> None:
    assert watches.parse(cr(resource=SECRET)).mode == "metadata"


def test_applies_by_runtime_labels_and_module() -> None:
    w = watches.parse(
        cr(runtimes={"selector": {"matchLabels": {"region": "eu"}}, "module": "app-conn"})
    )
    kyma = {"metadata": {"labels": {"region": "eu"}}, "spec": {"modules": [{"name": "app-conn"}]}}
    assert watches.in_force([w], kyma) == (w,)
    assert watches.in_force([w], {**kyma, "spec": {"modules": [{"name": "other"}]}}) == ()
    assert watches.in_force([w], {**kyma, "metadata": {"labels": {"region": "us"}}}) == ()
    everywhere = watches.parse(cr("all"))
    assert watches.in_force([w, everywhere], {"metadata": {}}) == (everywhere,)


def test_admits_never_the_system_namespaces_or_kube_root_ca() -> None:
    w = watches.parse(cr(selector={"matchLabels": {"x": "1"}}, ignoredNamespaces=["skip"]))
    assert watches.admits(w, "app", "c", {"x": "1"})
    assert watches.admits(w, "app", "c", {"x": "0"}, {"x": "1"})  # the old object of an UPDATE
    assert not watches.admits(w, "app", "c", {"x": "0"})
    for ns in ("kube-system", "tether-system", "kube-public", "kube-node-lease", "skip"):
        assert not watches.admits(w, ns, "c", {"x": "1"})
    assert not watches.admits(w, "app", "kube-root-ca.crt", {"x": "1"})
    only = watches.parse(cr(namespaces=["a"]))
    assert watches.admits(only, "a", "c") and not watches.admits(only, "b", "c")


def test_each_mode_keeps_only_what_it_says() -> None:
    obj = cm(
        {"a": "1", "b": "secret-b"},
        {"l": "v"},
        annotations={
            watchkinds.LAST_APPLIED: '{"data":{"b":"secret-b"}}',
            "n": "m",
            "meta.helm.sh/release-name": "r",
        },
    )
    obj["binaryData"] = {"bin": base64.b64encode(b"\x00\x01").decode()}

    def sent(**send: Any) -> watches.Content:
        return watches.reduce(watches.parse(cr(send=send)), obj)

    full = sent(mode="full")
    assert full.data == {"a": "1", "b": "secret-b"} and full.binary_data == obj["binaryData"]
    assert watchkinds.LAST_APPLIED in full.annotations
    meta = sent(mode="metadata")
    assert (meta.data, meta.binary_data, meta.labels, meta.annotations) == (
        {},
        {},
        {"l": "v"},
        {"meta.helm.sh/release-name": "r"},
    )  # only the kept annotations
    assert sent(mode="keys", keys=["a", "bin"]).data == {"a": "1"}
    assert sent(mode="keys", keys=["a", "bin"]).binary_data == obj["binaryData"]
    assert sent(mode="exclude", keys=["b"]).data == {"a": "1"}
    digest = sent(mode="digest")
    assert digest.data == {
        "a": "sha256:" + hashlib.sha256(b"1").hexdigest(),
        "b": "sha256:" + hashlib.sha256(b"secret-b").hexdigest(),
        "bin": "sha256:" + hashlib.sha256(b"\x00\x01").hexdigest(),
    }
    assert digest.binary_data == {} and "secret-b" not in json.dumps(digest.__dict__)


def test_a_secret_digest_is_of_the_decoded_value_and_changes_with_it() -> None:
    w = watches.parse(cr(resource=SECRET, send={"mode": "digest"}))
    one = {
        "metadata": {"namespace": "a", "name": "s"},
        "data": {"pw": base64.b64encode(b"hunter2").decode()},
    }
    two = {
        "metadata": {"namespace": "a", "name": "s"},
        "data": {"pw": base64.b64encode(b"hunter3").decode()},
    }
    d1, d2 = watches.reduce(w, one).data["pw"], watches.reduce(w, two).data["pw"]
    assert d1 == "sha256:" + hashlib.sha256(b"hunter2").hexdigest() and d1 != d2


def test_a_custom_resource_sends_its_top_level_fields_as_json() -> None:
    w = watches.parse(cr(resource=WIDGET))
    obj = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"namespace": "a", "name": "x"},
        "spec": {"size": 2, "b": [1]},
        "status": {"ready": True},
    }
    assert watches.reduce(w, obj).data == {"spec": '{"b":[1],"size":2}', "status": '{"ready":true}'}
    status_only = watches.parse(cr(resource=WIDGET, send={"mode": "keys", "keys": ["status"]}))
    assert watches.reduce(status_only, obj).data == {"status": '{"ready":true}'}


def test_violation_admits_what_reduce_sends_and_refuses_more() -> None:
    for send in (
        {"mode": "full"},
        {"mode": "metadata"},
        {"mode": "keys", "keys": ["a"]},
        {"mode": "exclude", "keys": ["b"]},
        {"mode": "digest"},
    ):
        w = watches.parse(cr(send=send))
        rec = record(w, cm({"a": "1", "b": "2"}))
        assert watches.violation(w, rec) is None, send
    full = record(watches.parse(cr()), cm({"a": "1", "b": "value-of-b"}))
    for send in (
        {"mode": "metadata"},
        {"mode": "keys", "keys": ["a"]},
        {"mode": "exclude", "keys": ["b"]},
        {"mode": "digest"},
    ):
        reason = watches.violation(watches.parse(cr(send=send)), full)
        assert reason is not None and "value-of-b" not in reason, send


def test_violation_checks_kind_namespace_labels_and_last_applied() -> None:
    w = watches.parse(cr(selector={"matchLabels": {"x": "1"}}, send={"mode": "metadata"}))
    good = record(w, cm(labels={"x": "1"}))
    assert watches.violation(w, good) is None
    assert "labels" in str(watches.violation(w, {**good, "labels": {"x": "2"}}))
    assert "namespace" in str(watches.violation(w, {**good, "namespace": "kube-system"}))
    assert "never" in str(watches.violation(w, {**good, "name": "kube-root-ca.crt"}))
    assert "Secret" in str(
        watches.violation(w, {**good, "resource": {"group": "", "version": "v1", "kind": "Secret"}})
    )
    assert watchkinds.LAST_APPLIED in str(
        watches.violation(w, {**good, "annotations": {watchkinds.LAST_APPLIED: "{}"}})
    )
    tomb = changes.watch_tombstone(
        watch=w,
        runtime_id="rt-1",
        namespace="app",
        name="c",
        uid="",
        resource_version="9",
        source="poller",
    )
    assert watches.violation(w, tomb) is None  # a tombstone carries no labels


def test_a_v1_record_is_of_a_configmap() -> None:
    v1 = conversion.from_configmap(cm({"a": "1"}), runtime_id="rt-1", source="poller")
    assert watches.gvk_of(v1) == ("", "v1", "ConfigMap")
    assert watches.violation(watches.parse(cr()), v1) is None
    assert watches.violation(watches.parse(cr(resource=WIDGET)), v1) is not None


def test_the_wire_form_round_trips_and_is_deterministic() -> None:
    ws = [
        watches.parse(
            cr("b", WIDGET, namespaces=["x"], send={"mode": "exclude", "keys": ["status"]})
        ),
        watches.parse(
            cr(
                "a",
                selector={
                    "matchExpressions": [{"key": "k", "operator": "In", "values": ["1", "2"]}]
                },
            )
        ),
    ]
    text = watchwire.to_wire(ws)
    assert text == watchwire.to_wire(list(reversed(ws)))
    assert watchwire.from_wire(text) == tuple(sorted(ws, key=lambda w: w.name))


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{",
        "[]",
        '{"version": 2, "watches": []}',
        '{"version": 1, "watches": [{"name": "x"}]}',
        json.dumps({"version": 1, "watches": [{}] * (watches.MAX_WATCHES + 1)}),
    ],
)
def test_an_unusable_wire_form_is_refused(text: str) -> None:
    with pytest.raises(watches.WatchError):
        watchwire.from_wire(text)


def test_webhook_entries_carry_rules_and_selectors() -> None:
    template = {
        "name": "configmaps.tether.kyma-project.io",
        "clientConfig": {"caBundle": "Q0E="},
        "failurePolicy": "Ignore",
        "rules": [{"apiGroups": [""]}],
    }
    ws = [
        watches.parse(
            cr("widgets", WIDGET, namespaces=["a"], selector={"matchLabels": {"x": "1"}})
        ),
        watches.parse(cr("cms")),
    ]
    cms, widgets = watchwire.webhook_entries(ws, template)
    assert cms["name"] == "cms.watches.tether.kyma-project.io" and cms["failurePolicy"] == "Ignore"
    assert cms["matchConditions"][0]["expression"] == "request.name != 'kube-root-ca.crt'"
    assert cms["objectSelector"] == {} and cms["rules"][0]["resources"] == ["configmaps"]
    assert widgets["rules"] == [
        {
            "apiGroups": ["example.com"],
            "apiVersions": ["v1"],
            "resources": ["widgets", "widgets/status"],
            "operations": ["CREATE", "UPDATE", "DELETE"],
            "scope": "Namespaced",
        }
    ]
    assert widgets["objectSelector"] == {
        "matchExpressions": [{"key": "x", "operator": "In", "values": ["1"]}]
    }
    assert {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["a"]} in widgets[
        "namespaceSelector"
    ]["matchExpressions"]
    assert "matchConditions" not in widgets and widgets["clientConfig"] == {"caBundle": "Q0E="}
    assert template["rules"] == [{"apiGroups": [""]}]  # the template is not changed
    assert watchwire.webhook_entries([], template) == []


def test_webhook_entries_keep_the_bundles_conditions_where_they_hold() -> None:
    dry = {"name": "not-dry-run", "expression": "!has(request.dryRun) || request.dryRun != true"}
    changed = {
        "name": "content-changed",
        "expression": "object.?data.orValue({}) != oldObject.?data.orValue({})",
    }
    template = {"name": "t", "matchConditions": [dry, changed]}
    ws = [
        watches.parse(cr("widgets", WIDGET)),
        watches.parse(cr("cms")),
        watches.parse(cr("secrets", watches.SECRET.wire(), send={"mode": "digest"})),
    ]
    cms, secrets, widgets = watchwire.webhook_entries(ws, template)
    assert cms["matchConditions"] == [
        dry,
        changed,
        {"name": "not-kube-root-ca-crt", "expression": "request.name != 'kube-root-ca.crt'"},
    ]
    assert secrets["matchConditions"] == [dry, changed]
    # a custom resource keeps its values elsewhere: comparing data would hide every spec change
    assert widgets["matchConditions"] == [dry]
