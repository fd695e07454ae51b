"""A Watch says what it means (tether.wire.watchkinds, plain data): its kind against its resource
(the table of the groups Kubernetes serves, the runtime's discovery for the others), an
object's own kind against its Watch's, Secrets known by resource or kind, and the
annotations a value-hiding mode keeps; the listener's check (``watches.violation``) refuses
a Secret's values under any Watch."""

from __future__ import annotations

import base64
import datetime
import json
from typing import Any

import pytest
import yaml

from enroller import watching, watchstatus
from testing import watchenv
from tether.wire import changes, digests, watches, watchkinds, watchwire

SECRETS_AS_CM = {"group": "", "version": "v1", "resource": "secrets", "kind": "ConfigMap"}
SECRET = {"group": "", "version": "v1", "resource": "secrets", "kind": "Secret"}
CM = {"group": "", "version": "v1", "resource": "configmaps", "kind": "ConfigMap"}
WIDGET = {"group": "example.com", "version": "v1", "resource": "widgets", "kind": "Widget"}
PASSWORD = b"correct horse battery staple"


def cr(resource: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "w"}, "spec": {"resource": resource, **spec}}


@pytest.mark.parametrize(
    ("resource", "send", "field"),
    [
        (SECRETS_AS_CM, {"mode": "full"}, "spec.resource.kind"),  # the Watch
        (SECRETS_AS_CM, {"mode": "metadata"}, "spec.resource.kind"),
        ({**CM, "kind": "Secret"}, {"mode": "metadata"}, "spec.resource.kind"),
        ({**CM, "resource": "namespaces", "kind": "Namespace"}, None, "spec.resource.resource"),
        (
            {"group": "apps", "version": "v1", "resource": "deployments", "kind": "ConfigMap"},
            None,
            "spec.resource.kind",
        ),
        (SECRET, {"mode": "full"}, "spec.send.mode"),
        (SECRET, {"mode": "keys", "keys": ["pw"]}, "spec.send.mode"),
    ],
)
def test_a_watch_whose_kind_is_not_its_resources_is_refused(
    resource: dict[str, str], send: dict[str, Any] | None, field: str
) -> None:
    with pytest.raises(watches.WatchError, match=field):
        watches.parse(cr(resource, **({"send": send} if send else {})))


def test_matching_kinds_parse_and_a_secret_defaults_to_metadata() -> None:
    assert watches.parse(cr(SECRET)).mode == "metadata"
    assert watches.parse(cr(SECRET, send={"mode": "digest"})).mode == "digest"
    for group, table in watchkinds.BUILTIN.items():
        for plural, kind in table.items():
            w = watches.parse(
                cr({"group": group, "version": "v1", "resource": plural, "kind": kind})
            )
            assert (w.target.resource, w.target.kind) == (plural, kind)
    # a custom group is not in the table: the runtime's discovery decides
    assert watches.parse(cr(WIDGET)).target.kind == "Widget"
    assert watches.parse(cr({**WIDGET, "kind": "Gadget"})).target.kind == "Gadget"


def test_a_secret_is_known_by_its_resource_or_its_kind() -> None:
    for t in (
        watches.SECRET,
        watches.Target("", "v1", "secrets", "ConfigMap"),
        watches.Target("", "v1", "configmaps", "Secret"),
    ):
        assert watchkinds.is_secret(t)
    assert not watchkinds.is_secret(watches.CONFIGMAP)
    assert not watchkinds.is_secret(watches.Target("example.com", "v1", "secrets", "Secret"))


def test_a_hand_written_watch_list_in_the_runtime_cannot_carry_the_disguised_watch() -> None:
    """A pod (or the tenant) that edits the runtime's tether-watches ConfigMap: the senders
    parse it with the same rules, so the list is refused and the last good one is kept."""
    text = json.dumps(
        {
            "version": watchwire.WIRE_VERSION,
            "watches": [
                {
                    "name": "steal",
                    "generation": 1,
                    "resource": SECRETS_AS_CM,
                    "namespaces": [],
                    "ignoredNamespaces": [],
                    "selector": "",
                    "mode": "full",
                    "keys": [],
                }
            ],
        }
    )
    with pytest.raises(watches.WatchError, match="spec.resource.kind"):
        watchwire.from_wire(text)


def test_discovery_decides_for_a_custom_resource() -> None:
    target = watches.parse(cr(WIDGET)).target
    served = {
        "kind": "APIResourceList",
        "groupVersion": "example.com/v1",
        "resources": [
            {"name": "widgets", "namespaced": True, "kind": "Widget"},
            {"name": "widgets/status", "namespaced": True, "kind": "Widget"},
            {"name": "clusterwidgets", "namespaced": False, "kind": "ClusterWidget"},
        ],
    }
    assert watchkinds.discovered_problem(target, served) is None
    assert watchkinds.discovered_problem(target, {"resources": []}) is None  # not served here
    gadget = watches.parse(cr({**WIDGET, "kind": "Gadget"})).target
    why = watchkinds.discovered_problem(gadget, served)
    assert why is not None and "Widget" in why and "Gadget" in why
    cluster = watches.parse(
        cr({**WIDGET, "resource": "clusterwidgets", "kind": "ClusterWidget"})
    ).target
    assert "cluster-scoped" in (watchkinds.discovered_problem(cluster, served) or "")


def test_an_objects_own_kind_is_checked_and_a_list_names_its_items_kind() -> None:
    w = watches.parse(cr(CM))
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}
    assert watches.foreign(w, cm) is None
    for other in (
        {**cm, "kind": "Secret"},
        {**cm, "apiVersion": "example.com/v1"},
        {"metadata": {"name": "a"}},
    ):
        assert watches.foreign(w, other) is not None
    doc = {
        "apiVersion": "v1",
        "kind": "SecretList",
        "items": [
            {"metadata": {"name": "s"}},
            {"apiVersion": "x/v1", "kind": "Own", "metadata": {}},
        ],
    }
    items = watchkinds.stamp_items(doc)
    assert [(i["apiVersion"], i["kind"]) for i in items] == [("v1", "Secret"), ("x/v1", "Own")]
    assert watches.foreign(w, items[0]) is not None
    assert all("kind" not in i for i in watchkinds.stamp_items({"items": [{"metadata": {}}]}))


def test_the_crd_holds_the_table_and_the_secret_rule() -> None:
    crd = yaml.safe_load(watchenv.CRD_FILE.read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    [kind_rule] = spec["properties"]["resource"]["x-kubernetes-validations"]
    assert kind_rule["rule"] == watchkinds.cel_rule()
    assert any(
        "'secrets'" in r["rule"] and "'digest'" in r["rule"]
        for r in spec["x-kubernetes-validations"]
    )


def record(w: watches.Watch, kind: str, **content: Any) -> dict[str, Any]:
    obj = {
        "metadata": {
            "namespace": "a",
            "name": "db",
            "uid": "u",
            "resourceVersion": "3",
            "labels": {},
        }
    }
    rec = dict(changes.from_object(obj, watch=w, runtime_id="rt-1", source="poller"))
    rec["resource"] = {**rec["resource"], "kind": kind}
    rec.update(content)
    return rec


def test_the_listener_refuses_a_secrets_values_under_any_watch() -> None:
    """Whatever the Watch declares (built here past ``parse``, as a KCP Watch stored before
    the rule would be) and whatever kind the record claims: a Watch of secrets, or a record
    of a Secret, carries digests or nothing, never a value in clear or base64."""
    pw64 = base64.b64encode(PASSWORD).decode()
    disguised = watches.Watch("disguised", watches.Target("", "v1", "secrets", "ConfigMap"))
    full_secret = watches.Watch("full-secret", watches.SECRET, mode="full")
    full_cm = watches.Watch("cms", watches.CONFIGMAP, mode="full")
    for w, kind in ((disguised, "ConfigMap"), (full_secret, "Secret")):
        for values in (
            {"data": {"pw": pw64}},
            {"data": {"pw": PASSWORD.decode()}},
            {"binaryData": {"pw": pw64}},
        ):
            why = watches.violation(w, record(w, kind, **values))
            assert why is not None and "Secret" in why and PASSWORD.decode() not in why
        assert watches.violation(w, record(w, kind, data={"pw": digests.of(PASSWORD)})) is None
        assert watches.violation(w, record(w, kind)) is None  # metadata
    # a record claiming a Secret under a ConfigMap Watch is refused by its kind first
    assert watches.violation(full_cm, record(full_cm, "Secret", data={"pw": pw64})) is not None
    assert watches.violation(full_cm, record(full_cm, "ConfigMap", data={"pw": pw64})) is None


def test_value_hiding_modes_keep_only_the_allow_listed_annotations() -> None:
    notes = {
        "meta.helm.sh/release-name": "db",
        "example.com/password-copy": "hunter2",
        watchkinds.LAST_APPLIED: '{"data":{"pw":"hunter2"}}',
    }
    obj = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"namespace": "a", "name": "db", "annotations": notes},
    }
    for mode in ("metadata", "digest"):
        w = watches.parse(cr(SECRET, send={"mode": mode}))
        assert watches.reduce(w, obj).annotations == {"meta.helm.sh/release-name": "db"}
        assert (
            watches.violation(
                w, record(w, "Secret", annotations={"meta.helm.sh/release-name": "db"})
            )
            is None
        )
        for extra in ("example.com/password-copy", watchkinds.LAST_APPLIED):
            why = watches.violation(w, record(w, "Secret", annotations={extra: "hunter2"}))
            assert why is not None and extra in why and "hunter2" not in why
    cms = watches.parse(cr(CM, send={"mode": "keys", "keys": ["a"]}))
    assert watches.reduce(cms, {**obj, "kind": "ConfigMap"}).annotations == {
        "meta.helm.sh/release-name": "db"
    }
    full = watches.parse(cr(CM))
    assert watches.reduce(full, obj).annotations == notes
    assert watches.violation(full, record(full, "ConfigMap", annotations=notes)) is None


def test_the_enroller_refuses_the_disguised_watch_and_says_why_in_its_status() -> None:
    """A Watch stored before the CRD's rule (the API server ratchets unchanged fields): the
    enroller's parse refuses it, renders it nowhere, and its status names the field."""
    stored = {
        **watchenv.watch("steal", SECRETS_AS_CM, "kcp-system", send={"mode": "full"}),
        "status": None,
    }
    stored["metadata"]["generation"] = 1
    listed = watching.parse_all([stored, watchenv.watch("ok", SECRET, "kcp-system")])
    assert [w.name for w in listed.valid] == ["ok"]
    assert "spec.resource.kind" in listed.errors["steal"] and "Secret" in listed.errors["steal"]
    status = watchstatus.status(
        watchstatus.WatchFacts(
            now=datetime.datetime(2026, 12, 7, tzinfo=datetime.UTC),
            generation=1,
            previous=None,
            error=listed.errors["steal"],
            runtimes=[],
        )
    )
    assert watchstatus.state(status) == "Invalid"
    assert "spec.resource.kind" in status["conditions"][0]["message"]
