"""listener.edge.watchcheck: which Watch admits a record (plain data)."""

from __future__ import annotations

from typing import Any

from listener.edge import watchcheck
from listener.janitor import legacy
from listener.storage import records
from tether.base import times
from tether.kube import apitypes
from tether.wire import changes, conversion, watches

CM = {"group": "", "version": "v1", "resource": "configmaps", "kind": "ConfigMap"}


def w(
    name: str, mode: str = "full", resource: dict[str, str] = CM, **runtimes: Any
) -> watches.Watch:
    return watches.parse(
        {
            "metadata": {"name": name},
            "spec": {"resource": resource, "send": {"mode": mode}, "runtimes": runtimes},
        }
    )


def v1(name: str = "a", data: dict[str, str] | None = None) -> changes.ChangeRecord:
    return conversion.from_configmap(
        {
            "metadata": {"namespace": "ns", "name": name, "uid": "u", "resourceVersion": "1"},
            "data": data or {},
        },
        runtime_id="rt",
        source="webhook",
    )


def test_in_force_by_labels_and_modules() -> None:
    gold, mod, every = (
        w("gold", selector={"matchLabels": {"tier": "gold"}}),
        w("mod", module="m"),
        w("e"),
    )
    assert watchcheck.in_force([gold, mod, every], {"tier": "gold"}, ["m"]) == (every, gold, mod)
    assert watchcheck.in_force([gold, mod, every], {}, []) == (every,)


def test_the_compat_watch_is_the_first_full_configmap_watch_by_name() -> None:
    meta, full_b, full_c = w("a", "metadata"), w("b"), w("c")
    assert watchcheck.compat([full_c, meta, full_b]) == full_b
    assert watchcheck.compat([meta]) is None


def test_v1_records_go_through_the_compat_watch_and_get_it() -> None:
    recs = [v1("a", {"k": "v"})]
    assert watchcheck.check(recs, (w("b"),)) == []
    watchcheck.assign(recs, (w("b"),))
    assert recs[0]["watch"] == "b" and recs[0]["resource"] == watches.CONFIGMAP.gvk()
    assert records.key_of(recs[0]) == records.Key("rt", "b", "ns", "a")
    refused = watchcheck.check([v1()], (w("m", "metadata"),))
    assert [r.reason for r in refused] == [watchcheck.NO_COMPAT]


def test_v2_records_name_their_watch() -> None:
    meta = w("m", "metadata")
    rec = changes.from_object(
        {
            "metadata": {"namespace": "ns", "name": "a", "resourceVersion": "1"},
            "data": {"k": "secret"},
        },
        watch=w("m"),
        runtime_id="rt",
        source="webhook",
    )
    rec["watch"] = "m"
    refused = watchcheck.check([rec], (meta,))
    assert refused == [
        watchcheck.Refused(
            0, watchcheck.VIOLATION, "the watch m sends metadata only, the record carries values"
        )
    ]
    assert "secret" not in str(watchcheck.details(refused, batch=False))
    assert watchcheck.check([rec], ()) == [
        watchcheck.Refused(
            0, watchcheck.NOT_IN_FORCE, "the watch m is not in force for this runtime"
        )
    ]
    assert (
        watchcheck.details(watchcheck.check([rec, rec], ()), batch=True)[1]["path"] == "$.items[1]"
    )


def test_a_v2_record_naming_the_built_in_watch_is_refused() -> None:
    """A hostile runtime names the runtime-only built-in Watch in a v2 record: no Watch of
    the KCP can have its name, so it is never in force and nothing is stored under it."""
    rec = changes.from_object(
        {"metadata": {"namespace": "ns", "name": "a", "resourceVersion": "1"}, "data": {}},
        watch=conversion.BUILTIN,
        runtime_id="rt",
        source="poller",
    )
    assert [v.path for v in changes.validate_record(rec)] == ["$.watch"]  # 400 first
    (refused,) = watchcheck.check([rec], (w("b"),))
    assert refused.reason == watchcheck.NOT_IN_FORCE
    watchcheck.assign([rec], (w("b"),))
    assert rec["watch"] == conversion.BUILTIN_NAME  # not given the compat Watch either


def test_legacy_records_are_due_only_where_records_under_watches_exist() -> None:
    def meta(rid: str, name: str, watch: str | None) -> dict[str, Any]:
        labels = {apitypes.RUNTIME_ID_LABEL: rid, **({watches.WATCH_LABEL: watch} if watch else {})}
        return {"name": name, "resourceVersion": "1", "uid": "u", "labels": labels}

    old = legacy.Legacy(limit=10)
    for m in (
        meta("up", "l1", None),
        meta("up", "n1", "w"),
        meta("wait", "l2", None),
        meta("up", "l3", None),
        {"name": "x"},
    ):
        old.add(m)
    assert [t.name for t, _ in old.due()] == ["l1", "l3"]
    capped = legacy.Legacy(limit=1)
    for m in (meta("up", "l1", None), meta("up", "l3", None), meta("up", "n1", "w")):
        capped.add(m)
    assert [t.name for t, _ in capped.due()] == ["l1"]


def test_the_kyma_view_carries_the_enabled_modules() -> None:
    from tether.kube import kyma

    v = kyma.view(
        {
            "metadata": {"name": "k", "labels": {"tier": "gold"}},
            "spec": {"modules": [{"name": "widgets"}, {"channel": "x"}, "bad"]},
        }
    )
    assert v.modules == frozenset({"widgets"})
    assert watchcheck.in_force([w("m", module="widgets")], v.labels, v.modules) != ()
    assert kyma.view({"metadata": {}}).modules == frozenset()


def test_records_of_a_deleted_watch_are_due_after_the_retention() -> None:
    import datetime

    now = datetime.datetime(2026, 12, 4, 12, tzinfo=datetime.UTC)

    def meta(watch: str | None, minutes_ago: float) -> dict[str, Any]:
        at = times.format_time(now - datetime.timedelta(minutes=minutes_ago))
        return {
            "name": "rcm-x",
            "resourceVersion": "7",
            "uid": "u",
            "labels": {watches.WATCH_LABEL: watch} if watch else {},
            "annotations": {records.ANN_OBSERVED: at},
        }

    names = frozenset({"kept"})
    assert legacy.of_gone_watch(meta("gone", 10), names, now, 300) is not None
    assert legacy.of_gone_watch(meta("gone", 4), names, now, 300) is None  # within retention
    assert legacy.of_gone_watch(meta("kept", 10), names, now, 300) is None
    assert legacy.of_gone_watch(meta(None, 10), names, now, 300) is None  # legacy: its own rule
    assert legacy.of_gone_watch(meta("gone", 10), None, now, 300) is None  # Watches unknown
