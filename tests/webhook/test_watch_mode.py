"""The webhook's Watch mode, plain data: which Watches an admission is forwarded for
(webhook.scope), the queue's per-Watch keys and the record the forwarder builds from what it
read back (webhook.records)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tether.base import times
from tether.wire import changes, conversion, digests, listenerapi, watches
from webhook import admission, keyqueue, records, scope

CM = {"group": "", "version": "v1", "resource": "configmaps", "kind": "ConfigMap"}
SECRET = {"group": "", "version": "v1", "resource": "secrets", "kind": "Secret"}
WIDGET = {"group": "example.com", "version": "v1", "resource": "widgets", "kind": "Widget"}
CONF = {"matchLabels": {"conf": "yes"}}


def watch(name: str, resource: dict[str, str] = CM, **spec: Any) -> watches.Watch:
    return watches.parse({"metadata": {"name": name}, "spec": {"resource": resource, **spec}})


def obj(
    labels: dict[str, str] | None = None,
    rv: str = "5",
    resource: dict[str, str] = CM,
    **values: Any,
) -> dict[str, Any]:
    api = f"{resource['group']}/{resource['version']}" if resource["group"] else resource["version"]
    return {
        "apiVersion": api,
        "kind": resource["kind"],
        "metadata": {
            "namespace": "app",
            "name": "o",
            "uid": "u1",
            "resourceVersion": rv,
            "labels": labels or {},
        },
        **values,
    }


def review(
    op: str = "UPDATE",
    new: dict[str, Any] | None = None,
    old: dict[str, Any] | None = None,
    resource: dict[str, str] = CM,
    ns: str = "app",
    dry_run: bool = False,
) -> admission.Request:
    return admission.parse(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "r1",
                "operation": op,
                "namespace": ns,
                "name": "o",
                "dryRun": dry_run,
                "kind": {k: resource[k] for k in ("group", "version", "kind")},
                "resource": {k: resource[k] for k in ("group", "version", "resource")},
                "object": None if op == "DELETE" else new,
                "oldObject": None if op == "CREATE" else old,
            },
        }
    )


CONF_W = watch("conf", selector=CONF)
META_W = watch("meta", send={"mode": "metadata"})
WIDGET_W = watch("widgets", WIDGET)
SECRET_W = watch("secrets", SECRET, send={"mode": "digest"})
ALL = (CONF_W, META_W, WIDGET_W, SECRET_W)


def test_the_request_names_its_resource() -> None:
    req = review("CREATE", obj(resource=WIDGET), resource=WIDGET)
    assert scope.target_of(req) == watches.Target("example.com", "v1", "widgets", "Widget")


def test_one_entry_per_admitting_watch() -> None:
    skip, chosen = scope.decide(review("CREATE", obj({"conf": "yes"}, data={"a": "1"})), ALL)
    assert skip is None and [w.name for w in chosen] == ["conf", "meta"]
    skip, chosen = scope.decide(review("CREATE", obj(data={"a": "1"})), ALL)
    assert skip is None and [w.name for w in chosen] == ["meta"]  # conf's selector: no


def test_an_object_leaving_the_selector_is_forwarded_once_more() -> None:
    old, new = obj({"conf": "yes"}, "5", data={"a": "1"}), obj({}, "6", data={"a": "1"})
    skip, chosen = scope.decide(review("UPDATE", new, old), (CONF_W,))
    assert skip is None and chosen == (CONF_W,)
    skip, chosen = scope.decide(review("DELETE", old=old), (CONF_W,))
    assert skip is None and chosen == (CONF_W,)
    assert scope.decide(review("DELETE", old=new), (CONF_W,)) == ("not-watched", ())


@pytest.mark.parametrize(
    ("req", "reason"),
    [
        (
            review("CREATE", obj(resource=WIDGET), resource={**WIDGET, "version": "v2"}),
            "other-kind",
        ),
        (
            review(
                "CREATE",
                obj(resource={**WIDGET, "kind": "Gadget"}),
                resource={**WIDGET, "resource": "gadgets", "kind": "Gadget"},
            ),
            "other-kind",
        ),
        (review("CREATE", obj({"conf": "yes"}), ns="kube-system"), "not-watched"),
        (review("CREATE", obj({"conf": "yes"}), dry_run=True), "dry-run"),
        (review("CONNECT", obj()), "other-operation"),
        (
            review(
                "UPDATE",
                obj({"conf": "yes"}, "6", data={"a": "1"}),
                obj({"conf": "yes"}, "5", data={"a": "1"}),
            ),
            "no-change",
        ),
    ],
)
def test_skips(req: admission.Request, reason: str) -> None:
    assert scope.decide(req, (CONF_W, WIDGET_W)) == (reason, ())


def test_no_watch_in_force_sends_nothing() -> None:
    assert scope.decide(review("CREATE", obj({"conf": "yes"})), ()) == ("other-kind", ())


def test_any_value_change_counts() -> None:
    a = obj(resource=WIDGET, spec={"x": 1}, status={"ok": True})
    assert not scope.object_changed(a, {**a, "metadata": {**a["metadata"], "resourceVersion": "9"}})
    assert scope.object_changed(a, {**a, "status": {"ok": False}})
    assert scope.object_changed(
        a, obj({"l": "1"}, resource=WIDGET, spec={"x": 1}, status={"ok": True})
    )


BUILTIN = conversion.BUILTIN


def item(w: watches.Watch, op: keyqueue.Operation = "UPDATE") -> keyqueue.Item:
    return keyqueue.Item("app", "o", "u1", op, "4", 0.0, watch=w)


def test_keys_per_watch_the_built_in_one_too() -> None:
    assert item(BUILTIN).key == ("app", "o", conversion.BUILTIN_NAME)
    assert item(CONF_W).key == ("app", "o", "conf") != item(META_W).key
    q = keyqueue.KeyQueue(10)
    assert [q.put(item(w)) for w in (CONF_W, META_W, CONF_W)] == [
        "enqueued",
        "enqueued",
        "coalesced",
    ]
    got = q.take(10, 0)
    assert sorted(i.key for i in got) == [("app", "o", "conf"), ("app", "o", "meta")]
    assert all(i.watch is not None and i.key[2] == i.watch.name for i in got)


def rec(w: watches.Watch, o: dict[str, Any]) -> changes.ChangeRecord:
    r = records.live(item(w), o, runtime_id="rt-1", observed_at=times.now(), epoch=None)
    assert r is not None
    return r


def test_an_object_read_back_of_another_kind_than_its_watch_is_not_sent() -> None:
    """A forged admission names a Watch's kind, the object read back is a Secret (a Watch
    of secrets declared a ConfigMap, built past ``watches.parse``, which refuses it; or a
    resource that serves another kind): nothing is sent, not even a tombstone."""
    disguised = watches.Watch("disguised", watches.Target("", "v1", "secrets", "ConfigMap"))
    secret = obj(resource=SECRET, data={"pw": base64.b64encode(b"hunter2").decode()})
    assert (
        records.live(
            item(disguised), secret, runtime_id="rt-1", observed_at=times.now(), epoch=None
        )
        is None
    )
    assert (
        records.live(
            item(CONF_W),
            {**obj({"conf": "yes"}, data={"a": "1"}), "kind": "Secret"},
            runtime_id="rt-1",
            observed_at=times.now(),
            epoch=None,
        )
        is None
    )
    kindless = {k: v for k, v in obj({"conf": "yes"}, data={"a": "1"}).items() if k != "kind"}
    assert (
        records.live(item(CONF_W), kindless, runtime_id="rt-1", observed_at=times.now(), epoch=None)
        is None
    )  # a kind unknown is not the Watch's


def test_live_records_are_reduced_per_watch() -> None:
    o = obj({"conf": "yes"}, data={"a": "1"})
    full, meta = rec(CONF_W, o), rec(META_W, o)
    assert full["apiVersion"] == changes.API_VERSION_V2 and full["watch"] == "conf"
    assert full["data"] == {"a": "1"} and full["resource"] == {
        "group": "",
        "version": "v1",
        "kind": "ConfigMap",
    }
    assert meta["data"] == {} and meta["labels"] == {"conf": "yes"}
    for r in (full, meta):
        assert not changes.validate_record(r)
        assert watches.violation(CONF_W if r["watch"] == "conf" else META_W, r) is None


def test_a_digest_watch_sends_no_value() -> None:
    secret = obj(resource=SECRET, data={"pw": base64.b64encode(b"hunter2").decode()})
    r = rec(SECRET_W, secret)
    assert r["data"] == {"pw": digests.of(b"hunter2")} and "hunter2" not in str(r)
    assert watches.violation(SECRET_W, r) is None and not changes.validate_record(r)


def test_a_custom_resource_carries_its_fields() -> None:
    r = rec(WIDGET_W, obj(resource=WIDGET, spec={"size": 3}, status={"ready": True}))
    assert r["data"] == {"spec": '{"size":3}', "status": '{"ready":true}'}
    assert r["resource"]["group"] == "example.com" and not changes.validate_record(r)


def test_labels_left_the_selector_make_a_tombstone_at_the_objects_version() -> None:
    r = rec(CONF_W, obj({}, rv="8", data={"a": "1"}))
    assert r["deleted"] is True and r["resourceVersion"] == "8" and r["watch"] == "conf"
    assert "data" not in r and not changes.validate_record(r)
    assert watches.violation(CONF_W, r) is None


def test_gone_and_the_built_in_watch_leaving_as_v1() -> None:
    g = records.gone(
        item(CONF_W, "DELETE"), "11", runtime_id="rt-1", observed_at=times.now(), epoch=2
    )
    assert (g["deleted"], g["watch"], g["resourceVersion"], g["epoch"]) == (True, "conf", "11", 2)
    b = rec(BUILTIN, obj({"conf": "yes"}, data={"a": "1"}))
    (v1,) = conversion.on_wire([b])
    assert v1["apiVersion"] == changes.API_VERSION and "watch" not in v1
    assert records.key_of(b) == ("app", "o", conversion.BUILTIN_NAME)
    assert records.key_of(g) == ("app", "o", "conf")


def test_a_batch_is_of_one_version() -> None:
    v1, v2a = rec(BUILTIN, obj(data={})), rec(META_W, obj(data={}))
    v2b = rec(CONF_W, obj({"conf": "yes"}, data={}))
    groups = records.by_version([v2a, v1, v1, v2b])
    assert [[r.get("watch") for r in g] for g in groups] == [
        ["meta", "conf"],
        [conversion.BUILTIN_NAME] * 2,
    ]
    assert changes.batch(groups[0])["kind"] == changes.LIST_KIND_V2
    assert b'"kind":"ConfigMapChangeList"' in listenerapi.changes_body(groups[1])


def test_an_entry_is_sent_with_the_current_version_of_its_watch() -> None:
    meta_now = watch("conf", send={"mode": "metadata"}, selector=CONF)
    got = records.current(item(CONF_W), (meta_now, WIDGET_W))
    assert got is not None and got.watch == meta_now and got.key == item(CONF_W).key
    assert rec(got.watch, obj({"conf": "yes"}, data={"a": "1"}))["data"] == {}
    same = item(CONF_W)
    assert records.current(same, (CONF_W,)) is same


@pytest.mark.parametrize(
    ("entry", "in_force"),
    [
        (item(CONF_W), (META_W,)),  # its Watch was deleted
        (item(CONF_W), (watch("conf", WIDGET),)),  # its Watch now covers another kind
        (item(CONF_W), (BUILTIN,)),  # the runtime's Watch list is gone
        (item(BUILTIN), (CONF_W,)),  # an entry of before the runtime got its Watch list
    ],
)
def test_an_entry_no_longer_to_be_sent_is_dropped(
    entry: keyqueue.Item, in_force: tuple[watches.Watch, ...]
) -> None:
    assert records.current(entry, in_force) is None


def test_without_a_watch_list_an_entry_of_the_built_in_watch_is_sent() -> None:
    entry = item(BUILTIN)
    assert records.current(entry, (BUILTIN,)) is entry


def test_a_status_subresource_update_is_the_objects() -> None:
    old = obj(resource=WIDGET, spec={"x": 1}, status={"ok": False})
    new = obj(resource=WIDGET, rv="6", spec={"x": 1}, status={"ok": True})
    doc = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "r1",
            "operation": "UPDATE",
            "namespace": "app",
            "name": "o",
            "subResource": "status",
            "kind": {k: WIDGET[k] for k in ("group", "version", "kind")},
            "resource": {k: WIDGET[k] for k in ("group", "version", "resource")},
            "object": new,
            "oldObject": old,
        },
    }
    assert scope.decide(admission.parse(doc), ALL) == (None, (WIDGET_W,))
