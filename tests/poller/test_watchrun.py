"""Watch mode of a run (poller.watchrun) with plain-data stand-ins: the runtime's objects of
several resources (``Served``), a listener that keeps records per Watch, checks each with
the KCP's own rule (``tether.wire.watches.violation``) and applies the real ordering rule."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from poller import metrics, run, scan, watchrun
from tether.kube import apitypes
from tether.runtime import sender
from tether.wire import changes, filters, listenerapi, statehash, watches, watchkinds

RID = "rt-watch"
WIDGET = watches.Target("example.com", "v1", "widgets", "Widget")
CONF = watches.Watch("conf", watches.CONFIGMAP, selector_text="conf=true")
META = watches.Watch("meta", watches.CONFIGMAP, namespaces=("a",), mode="metadata")
WIDGETS = watches.Watch("widgets", WIDGET)


def obj(
    ns: str, name: str, rv: int, labels: dict[str, str] | None = None, kind: str = "ConfigMap"
) -> dict[str, Any]:
    meta = {
        "namespace": ns,
        "name": name,
        "uid": f"u-{name}",
        "resourceVersion": str(rv),
        "labels": labels or {},
    }
    if kind == "ConfigMap":
        return {"metadata": meta, "data": {"secretish": f"value-{rv}"}}
    return {
        "apiVersion": "example.com/v1",
        "kind": kind,
        "metadata": meta,
        "spec": {"size": rv},
        "status": {"ready": True},
    }


# a built-in list names its items' kind once; a custom resource's items name their own
LIST_KINDS = {
    "configmaps": ("v1", "ConfigMapList"),
    "secrets": ("v1", "SecretList"),
    "widgets": ("example.com/v1", "WidgetList"),
}


class Served:
    """The runtime's objects by resource plural; a plural absent is not served (404)."""

    def __init__(self, objects: dict[str, list[dict[str, Any]]], list_rv: int = 100) -> None:
        self.objects, self.list_rv = objects, list_rv
        self.calls: list[tuple[str, str | None, str, str]] = []

    def watch_pages(
        self,
        res: apitypes.Resource,
        namespace: str | None,
        *,
        field_selector: str,
        label_selector: str,
    ) -> Iterator[scan.Page]:
        self.calls.append((res.plural, namespace, field_selector, label_selector))
        if res.plural not in self.objects:
            raise scan.Unserved(f"list {res.plural}: not served (404)", "unserved")
        sel = filters.parse_selector(label_selector)
        excluded = {t.split("!=")[1] for t in field_selector.split(",") if t}
        items = [
            o
            for o in self.objects[res.plural]
            if (namespace is None or o["metadata"]["namespace"] == namespace)
            and o["metadata"]["namespace"] not in excluded
            and filters.selector_matches(sel, o["metadata"]["labels"])
        ]
        api_version, list_kind = LIST_KINDS.get(res.plural, (res.api_version, "ThingList"))
        for i in range(0, max(len(items), 1), 2):  # pages of two, as the API serves them
            more = i + 2 < len(items)
            doc = {
                "apiVersion": api_version,
                "kind": list_kind,
                "items": [dict(o) for o in items[i : i + 2]],
            }
            yield scan.Page(watchkinds.stamp_items(doc), "more" if more else "", str(self.list_rv))


class Source:
    def __init__(self, value: tuple[watches.Watch, ...] | None, settled: bool = True) -> None:
        self.value, self.read = value, settled

    def current(self) -> tuple[watches.Watch, ...] | None:
        return self.value

    def settled(self) -> bool:
        return self.read


class Listener:
    """Records per (watch, namespace, name); v1 records under the watch ""."""

    def __init__(self, in_force: Sequence[watches.Watch]) -> None:
        self.in_force = {w.name: w for w in in_force}
        self.stored: dict[tuple[str, str, str], changes.ChangeRecord] = {}
        self.posts: list[list[changes.ChangeRecord]] = []
        self.digests: list[str] = []
        self.reports: list[listenerapi.EpochReport | None] = []
        self.unknown: set[str] = set()  # Watches the KCP holds in force no more (404)
        self.refuse: set[str] = set()  # object names the KCP's check refuses (403)

    def state_page(
        self,
        limit: int = 500,
        token: str = "",
        report: listenerapi.EpochReport | None = None,
        watch: str = "",
    ) -> sender.StatePage:
        self.digests.append(watch)
        if not token:
            self.reports.append(report)
        if watch in self.unknown:
            raise sender.ListenerError(
                sender.Outcome("permanent", 404, "http-404", None, "unknown watch")
            )
        items: list[changes.DigestItem] = [
            {
                "namespace": k[1],
                "name": k[2],
                "uid": r["uid"],
                "resourceVersion": r["resourceVersion"],
                "observedAt": r["observedAt"],
                "deleted": r["deleted"],
            }
            for k, r in sorted(self.stored.items())
            if k[0] == watch
        ]
        return sender.StatePage(items, "", 0)

    def send(
        self, records: Sequence[changes.ChangeRecord], timeout: tuple[float, float] | None = None
    ) -> sender.Outcome:
        self.posts.append(list(records))
        if any(r["name"] in self.refuse for r in records):
            return sender.Outcome("permanent", 403, "http-403", None, "refused by the watches")
        results = []
        for r in records:
            assert not changes.validate_record(r), changes.validate_record(r)
            name = r.get("watch", "")
            if name:
                assert watches.violation(self.in_force[name], r) is None, r
            key = (name, r["namespace"], r["name"])
            old = self.stored.get(key)
            verdict = changes.compare(
                None if old is None else changes.version_of(old), changes.version_of(r)
            )
            if verdict == "newer":
                self.stored[key] = r
            results.append({"outcome": {"newer": "persisted"}.get(verdict, verdict)})
        return sender.Outcome("ok", 200, "ok", results=tuple(results))

    def sent(self) -> list[changes.ChangeRecord]:
        return [r for batch in self.posts for r in batch]


class EnvPages:
    """The environment's run's ConfigMap listing (no Watch list)."""

    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.objects = objects

    def pages(self) -> Iterator[scan.Page]:
        yield scan.Page(self.objects, "", "100")


def runner(
    served: Served,
    lst: Listener,
    in_force: tuple[watches.Watch, ...] | None,
    env: list[dict[str, Any]] | None = None,
    **kw: Any,
) -> tuple[run.Runner, metrics.Metrics]:
    m = metrics.Metrics()
    settings = run.RunSettings(**{"batch_items": 3, "rate": 1000.0, "burst": 1000, **kw})
    r = run.Runner(
        RID,
        settings,
        filters.ConfigMapFilter.build(("kube-system",), ""),
        EnvPages(env or []),
        lst,
        m,
        sleep=lambda s: None,
        watches=watchrun.Watching(Source(in_force), served),
    )
    return r, m


def sample(m: metrics.Metrics, name: str, **labels: str) -> float:
    v = m.registry.get_sample_value(name, labels)
    return 0.0 if v is None else v


# -- the decisions -----------------------------------------------------------------------------


def test_a_watch_naming_namespaces_lists_each_admitted_one_else_all_but_the_ignored() -> None:
    w = watches.Watch(
        "w", watches.CONFIGMAP, namespaces=("a", "kube-system", "b"), ignored_namespaces=("b",)
    )
    assert watchrun.listings(w) == ("a",)
    everywhere = watches.Watch("e", watches.CONFIGMAP, ignored_namespaces=("zz",))
    assert watchrun.listings(everywhere) == (None,)
    sel = watchrun.field_selector(everywhere)
    assert "metadata.namespace!=zz" in sel and "metadata.namespace!=tether-system" in sel
    assert "metadata.namespace!=kube-system" in sel


def test_a_tombstone_is_judged_at_its_namespaces_listing_else_the_latest() -> None:
    assert watchrun.tomb_rv({"a": "10", "b": "30"}, "a") == "10"
    assert watchrun.tomb_rv({None: "20"}, "c") == "20"
    assert watchrun.tomb_rv({"a": "10", "b": "30"}, "gone-from-the-watch") == "30"
    assert watchrun.tomb_rv({}, "a") == ""


# -- runs --------------------------------------------------------------------------------------


def world() -> Served:
    return Served(
        {
            "configmaps": [
                obj("a", "c1", 10, {"conf": "true"}),
                obj("a", "plain", 11),
                obj("b", "c2", 12, {"conf": "true"}),
                obj("a", "kube-root-ca.crt", 13, {"conf": "true"}),
                obj("tether-system", "c3", 14, {"conf": "true"}),
            ],
            "widgets": [obj("a", "w1", 20, kind="Widget"), obj("c", "w2", 21, kind="Widget")],
        }
    )


def test_each_watch_delivers_only_what_it_covers_as_v2_reduced_in_the_runtime() -> None:
    in_force = (CONF, META, WIDGETS)
    lst = Listener(in_force)
    r, m = runner(world(), lst, in_force)
    result = r.run()
    assert result.outcome == "ok", result
    assert lst.digests == ["conf", "meta", "widgets"]  # one digest per Watch, by name
    got = {(x["watch"], x["namespace"], x["name"]) for x in lst.sent()}
    assert got == {
        ("conf", "a", "c1"),
        ("conf", "b", "c2"),  # its selector, never kube-root-ca.crt
        ("meta", "a", "c1"),
        ("meta", "a", "plain"),  # its namespace only
        ("widgets", "a", "w1"),
        ("widgets", "c", "w2"),
    }
    assert all(x["apiVersion"] == changes.API_VERSION_V2 for x in lst.sent())
    by = {(x["watch"], x["name"]): x for x in lst.sent()}
    assert by[("meta", "plain")]["data"] == {} and by[("conf", "c1")]["data"] == {
        "secretish": "value-10"
    }
    assert by[("widgets", "w1")]["resource"] == {
        "group": "example.com",
        "version": "v1",
        "kind": "Widget",
    }
    assert by[("widgets", "w1")]["data"]["spec"] == '{"size":20}'
    assert result.scanned == 6 and result.differences["missing"] == 6
    assert sample(m, "tether_poller_watches") == 3


def test_an_in_sync_run_sends_nothing_and_gone_or_unselected_objects_get_v2_tombstones() -> None:
    in_force = (CONF, WIDGETS)
    served = world()
    lst = Listener(in_force)
    r, _ = runner(served, lst, in_force)
    assert r.run().outcome == "ok"
    lst.posts.clear()
    again = r.run()
    assert again.sent == 0 and lst.posts == []
    served.objects["configmaps"][0]["metadata"].update(labels={}, resourceVersion="40")  # c1 left
    served.objects["widgets"].pop()  # w2 deleted
    served.list_rv = 120
    third = r.run()
    assert third.outcome == "ok" and third.differences["deleted"] == 2
    tombs = {(x["watch"], x["name"]): x for x in lst.sent()}
    assert set(tombs) == {("conf", "c1"), ("widgets", "w2")}
    assert all(
        t["deleted"] and t["apiVersion"] == changes.API_VERSION_V2 and t["resourceVersion"] == "120"
        for t in tombs.values()
    )
    assert tombs[("widgets", "w2")]["resource"]["kind"] == "Widget"


def test_a_watch_of_a_kind_not_served_is_skipped_and_the_others_still_run() -> None:
    gadgets = watches.Watch("a-gadgets", watches.Target("example.com", "v1", "gadgets", "Gadget"))
    in_force = (gadgets, CONF)
    lst = Listener(in_force)
    lst.stored[("a-gadgets", "a", "g1")] = changes.watch_tombstone(  # a record it holds already
        watch=gadgets,
        runtime_id=RID,
        namespace="a",
        name="g1",
        uid="u",
        resource_version="5",
        source="webhook",
    )
    lst.stored[("a-gadgets", "a", "g1")].update(deleted=False)
    r, m = runner(world(), lst, in_force)
    result = r.run()
    assert result.outcome == "ok"
    assert {x["watch"] for x in lst.sent()} == {"conf"}  # nothing tombstoned for the skipped one
    assert sample(m, "tether_poller_watches_skipped_total", reason="unserved") == 1
    assert sample(m, "tether_poller_watches_skipped_total", reason="forbidden") == 0


def test_without_the_watch_list_the_run_is_the_environments_v1_run() -> None:
    lst = Listener(())
    r, m = runner(world(), lst, None, env=[obj("a", "c1", 10), obj("b", "c2", 12)])
    result = r.run()
    assert result.outcome == "ok" and result.sent == 2
    assert lst.digests == [""]
    assert {x["apiVersion"] for x in lst.sent()} == {changes.API_VERSION}
    assert all("watch" not in x for x in lst.sent())


def test_no_watch_in_force_sends_nothing() -> None:
    lst = Listener(())
    r, _ = runner(world(), lst, ())
    result = r.run()
    assert result.outcome == "ok" and result.sent == 0 and lst.digests == []


def test_the_watches_share_the_runs_pacer() -> None:
    in_force = (CONF, META, WIDGETS)
    lst = Listener(in_force)
    slept: list[float] = []
    m = metrics.Metrics()
    clock = [0.0]

    def sleep(s: float) -> None:
        slept.append(s)
        clock[0] += s

    r = run.Runner(
        RID,
        run.RunSettings(batch_items=2, rate=2.0, burst=2),
        filters.ConfigMapFilter.build((), ""),
        EnvPages([]),
        lst,
        m,
        clock=lambda: clock[0],
        sleep=sleep,
        watches=watchrun.Watching(Source(in_force), world()),
    )
    assert r.run().sent == 6
    # 6 records at 2 per second with a burst of 2: the later batches waited 2 s in all
    assert abs(sum(slept) - 2.0) < 1e-6


def test_a_watch_the_kcp_no_longer_holds_is_skipped_and_a_refused_record_does_not_stop_the_run() -> (  # noqa: E501
    None
):
    in_force = (CONF, META, WIDGETS)
    lst = Listener(in_force)
    lst.unknown.add("meta")
    lst.refuse.add("c1")
    r, m = runner(world(), lst, in_force)
    result = r.run()
    assert result.outcome == "ok", result
    stored = {(k[0], k[2]) for k in lst.stored}
    assert stored == {("conf", "c2"), ("widgets", "w1"), ("widgets", "w2")}
    assert sample(m, "tether_poller_watches_skipped_total", reason="unknown") == 1
    assert sample(m, "tether_poller_records_sent_total", outcome="refused") == 1


def test_any_other_refusal_stops_the_run() -> None:
    lst = Listener((CONF,))
    r, _ = runner(world(), lst, (CONF,))
    lst.send = lambda records, timeout=None: sender.Outcome(  # type: ignore[method-assign]
        "permanent", 403, "http-403", None, "runtime refused"
    )
    result = r.run()
    assert result.outcome == "listener-refused"


def test_while_the_watch_list_cannot_be_read_nothing_runs_not_even_the_environments_run() -> None:
    lst = Listener(())
    m = metrics.Metrics()
    r = run.Runner(
        RID,
        run.RunSettings(),
        filters.ConfigMapFilter.build((), ""),
        EnvPages([obj("a", "c1", 10)]),
        lst,
        m,
        watches=watchrun.Watching(Source(None, settled=False), world()),
    )
    result = r.run()
    assert result.outcome == "apiserver-failed" and "Watch list" in result.detail
    assert lst.posts == [] and lst.digests == []


def test_a_listing_below_a_watchs_records_claims_a_new_epoch_once_with_the_runs_first_page() -> (
    None
):
    in_force = (CONF, WIDGETS)
    lst = Listener(in_force)
    r, m = runner(world(), lst, in_force)  # the runtime lists at resourceVersion 100
    rec = changes.from_object(
        obj("a", "w-old", 500, kind="Widget"), watch=WIDGETS, runtime_id=RID, source="webhook"
    )
    lst.stored[("widgets", "a", "w-old")] = rec  # written before the runtime's history went back
    result = r.run()
    assert result.outcome == "ok", result
    assert sample(m, "tether_poller_history_went_back_total") == 1
    claims = [x for x in lst.reports if x is not None and x.epoch is not None]
    assert claims == [listenerapi.EpochReport("", 0, "100")]
    # the claim went with the restarted run's first page: the first Watch's, not the one that saw it
    assert lst.digests[lst.reports.index(claims[0])] == "conf"


def test_an_item_of_another_kind_than_its_watch_is_never_reduced_nor_sent() -> None:
    """A Watch whose resource serves another kind (a Watch of ``secrets`` declared a
    ConfigMap, built here past ``watches.parse``, which refuses it): the listing's items are
    Secrets by their own kind, so the pass is skipped before anything is reduced, nothing of
    the Secret is sent, no record is tombstoned, and the other Watches run."""
    disguised = watches.Watch("a-disguised", watches.Target("", "v1", "secrets", "ConfigMap"))
    secret = {
        "metadata": {
            "namespace": "a",
            "name": "db",
            "uid": "u-db",
            "resourceVersion": "30",
            "labels": {},
        },
        "type": "Opaque",
        "data": {"password": "aHVudGVyMg=="},
    }  # hunter2
    served = world()
    served.objects["secrets"] = [secret]
    in_force = (disguised, CONF)
    lst = Listener(in_force)
    r, m = runner(served, lst, in_force)
    result = r.run()
    assert result.outcome == "ok", result
    sent = json.dumps(lst.sent())
    assert "aHVudGVyMg==" not in sent and "hunter2" not in sent and '"db"' not in sent
    assert [rec["watch"] for rec in lst.sent()] == ["conf", "conf"]  # the next Watch ran
    assert sample(m, "tether_poller_watches_skipped_total", reason="foreign-kind") == 1


# -- per-Watch summaries -----------------------------------------------------------------------


class SummaryListener(Listener):
    """A listener with per-Watch summaries, folded from what it stores (``None``: older, 404)."""

    def __init__(self, in_force: Sequence[watches.Watch], summaries: bool = True) -> None:
        super().__init__(in_force)
        self.summaries, self.asked = summaries, []
        self.identities: list[str] = []

    def watch_summary(self, watch: str, identity: str = "") -> dict[str, Any] | None:
        self.asked.append(watch)
        self.identities.append(identity)
        if not self.summaries or watch in self.unknown:
            return None
        held = [
            {"namespace": k[1], "name": k[2], "resourceVersion": r["resourceVersion"]}
            for k, r in self.stored.items()
            if k[0] == watch and not r["deleted"]
        ]
        return {**statehash.fold(held).wire(), "epoch": 0, "watch": watch}


def test_an_in_sync_watch_pass_reads_its_summary_and_no_digest() -> None:
    in_force = (CONF, META, WIDGETS)
    served = world()
    lst = SummaryListener(in_force)
    r, m = runner(served, lst, in_force)
    first = r.run()  # nothing stored yet: every summary differs, every digest is read
    assert first.outcome == "ok" and lst.digests == ["conf", "meta", "widgets"]
    lst.digests.clear()
    lst.asked.clear()
    lst.posts.clear()
    again = r.run()
    assert again.outcome == "ok" and again.sent == 0 and lst.posts == []
    assert lst.asked == ["conf", "meta", "widgets"] and lst.digests == []
    assert again.scanned == first.scanned and again.digest_entries == 6
    assert sample(m, "tether_poller_watch_passes_total", way="summary") == 3
    assert sample(m, "tether_poller_listener_requests_total", call="summary") == 6
    # one Watch differs (a widget changed): only its digest is read, its record sent
    served.objects["widgets"][0]["metadata"]["resourceVersion"] = "30"
    lst.asked.clear()
    third = r.run()
    assert third.outcome == "ok" and lst.digests == ["widgets"]
    assert [(x["watch"], x["name"], x["resourceVersion"]) for x in lst.sent()] == [
        ("widgets", "w1", "30")
    ]


def test_a_listener_without_watch_summaries_is_compared_by_digests() -> None:
    in_force = (CONF, WIDGETS)
    lst = SummaryListener(in_force, summaries=False)
    r, m = runner(world(), lst, in_force)
    assert r.run().outcome == "ok"
    lst.digests.clear()
    assert r.run().outcome == "ok"
    assert lst.asked == ["conf", "widgets"] * 2 and lst.digests == ["conf", "widgets"]
    assert sample(m, "tether_poller_watch_passes_total", way="summary") == 0


def test_a_full_resync_and_a_claim_never_go_by_summaries() -> None:
    in_force = (CONF,)
    lst = SummaryListener(in_force)
    r, _ = runner(world(), lst, in_force)
    assert r.run().outcome == "ok"
    lst.asked.clear()
    lst.digests.clear()
    assert r.run(full=True).outcome == "ok"
    assert lst.asked == [] and lst.digests == ["conf"]


def test_a_summary_pass_sees_a_foreign_kind_and_leaves_the_skip_to_the_digest_pass() -> None:
    in_force = (WIDGETS,)
    served = world()
    served.objects["widgets"].append(obj("a", "g1", 22, kind="Gadget"))
    lst = SummaryListener(in_force)
    r, m = runner(served, lst, in_force)
    assert r.run().outcome == "ok"
    assert lst.asked == ["widgets"] and lst.digests == ["widgets"]  # skipped there, once
    assert all(rec["name"] != "g1" for rec in lst.sent())
    assert sample(m, "tether_poller_watches_skipped_total", reason="foreign-kind") == 1
