"""One run's orchestration with plain-data stand-ins for its two peers: pages of served
ConfigMaps (``PageSource``) and a listener that applies the real ordering rule."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from poller import metrics, run, scan, service
from poller import settings as settings_mod
from tether.runtime import sender
from tether.wire import changes, conversion, filters, listenerapi

RID = "rt-unit"


def cm(ns: str, name: str, rv: int, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": ns,
            "name": name,
            "uid": f"u-{name}",
            "resourceVersion": str(rv),
            "labels": labels or {},
        },
        "data": {"v": str(rv)},
    }


class Pages:
    """Served pages; ``gone_at`` raises 410 Gone before that page index (once)."""

    def __init__(
        self,
        objects: list[dict[str, Any]],
        list_rv: int,
        size: int = 2,
        gone_at: int | None = None,
        error: bool = False,
    ) -> None:
        self.objects, self.list_rv, self.size = objects, list_rv, size
        self.gone_at, self.error = gone_at, error
        self.requests = 0

    def pages(self) -> Iterator[scan.Page]:
        chunks = [
            self.objects[i : i + self.size] for i in range(0, len(self.objects), self.size)
        ] or [[]]
        for i, chunk in enumerate(chunks):
            self.requests += 1
            if self.error:
                raise scan.ListError("list configmaps: HTTP 500")
            if self.gone_at == i:
                self.gone_at = None
                raise scan.Gone("410")
            yield scan.Page(chunk, "more" if i < len(chunks) - 1 else "", str(self.list_rv))


class Listener:
    def __init__(self) -> None:
        self.stored: dict[tuple[str, str], changes.ChangeRecord] = {}
        self.posts: list[list[changes.ChangeRecord]] = []
        self.state_calls = 0
        self.fail: sender.Outcome | None = None
        self.refuse_names: set[str] = set()

    def state_page(
        self,
        limit: int = 500,
        token: str = "",
        report: listenerapi.EpochReport | None = None,
        watch: str = "",
    ) -> sender.StatePage:
        assert not watch, "no Watch list: the environment's run asks for every record"
        self.state_calls += 1
        if self.fail is not None:
            raise sender.ListenerError(self.fail)
        keys = sorted(self.stored)
        start = int(token or 0)
        chunk = keys[start : start + limit]
        items: list[changes.DigestItem] = [
            {
                "namespace": k[0],
                "name": k[1],
                "uid": self.stored[k]["uid"],
                "resourceVersion": self.stored[k]["resourceVersion"],
                "observedAt": self.stored[k]["observedAt"],
                "deleted": self.stored[k]["deleted"],
            }
            for k in chunk
        ]
        nxt = str(start + limit) if start + limit < len(keys) else ""
        return sender.StatePage(items, nxt)

    def send(
        self, records: Sequence[changes.ChangeRecord], timeout: tuple[float, float] | None = None
    ) -> sender.Outcome:
        self.posts.append(list(records))
        if self.fail is not None:
            return self.fail
        if any(r["name"] in self.refuse_names for r in records):
            return sender.Outcome("permanent", 400, "http-400", None, "invalid")
        results = []
        for r in records:
            assert not changes.validate_record(r), changes.validate_record(r)
            key = (r["namespace"], r["name"])
            old = self.stored.get(key)
            verdict = changes.compare(
                None if old is None else changes.version_of(old), changes.version_of(r)
            )
            if verdict == "newer":
                self.stored[key] = r
            results.append({"outcome": {"newer": "persisted"}.get(verdict, verdict)})
        return sender.Outcome("ok", 200, "ok", results=tuple(results))

    def put(self, ns: str, name: str, rv: int, deleted: bool = False) -> None:
        obj = cm(ns, name, rv)
        rec = (
            conversion.tombstone(
                runtime_id=RID,
                namespace=ns,
                name=name,
                uid=f"u-{name}",
                resource_version=str(rv),
                source="webhook",
            )
            if deleted
            else conversion.from_configmap(obj, runtime_id=RID, source="webhook")
        )
        self.stored[(ns, name)] = rec


def runner(
    pages: Pages, listener: Listener, **kw: Any
) -> tuple[run.Runner, metrics.Metrics, list[float]]:
    m = metrics.Metrics()
    slept: list[float] = []
    clock = [0.0]

    def sleep(seconds: float) -> None:  # a fake clock: sleeping advances it
        slept.append(seconds)
        clock[0] += seconds

    settings = run.RunSettings(**{"batch_items": 2, "rate": 1000.0, "burst": 1000, **kw})
    r = run.Runner(
        RID,
        settings,
        filters.ConfigMapFilter.build(("kube-system",), ""),
        pages,
        listener,
        m,
        clock=lambda: clock[0],
        sleep=sleep,
    )
    return r, m, slept


def sample(m: metrics.Metrics, name: str, **labels: str) -> float:
    v = m.registry.get_sample_value(name, labels)
    return 0.0 if v is None else v


def test_differences_are_sent_equal_objects_cost_nothing_and_gone_ones_get_tombstones() -> None:
    lst = Listener()
    lst.put("a", "same", 10)
    lst.put("a", "old", 11)
    lst.put("a", "gone", 12)
    lst.put("a", "dead", 13, deleted=True)
    lst.put("a", "newer-in-kcp", 99)  # not listed, but newer than the listing: left alone
    objs = [cm("a", "same", 10), cm("a", "old", 20), cm("a", "new", 21), cm("b", "x", 22)]
    r, m, _ = runner(Pages(objs, list_rv=50), lst)
    res = r.run()
    assert res.outcome == "ok"
    assert res.differences == {"missing": 2, "changed": 1, "deleted": 1}
    assert (res.scanned, res.digest_entries, res.sent) == (4, 5, 4)
    sent = [
        (x["namespace"], x["name"], x["resourceVersion"], x["deleted"], x["source"])
        for batch in lst.posts
        for x in batch
    ]
    assert sorted(sent) == [
        ("a", "gone", "50", True, "poller"),
        ("a", "new", "21", False, "poller"),
        ("a", "old", "20", False, "poller"),
        ("b", "x", "22", False, "poller"),
    ]
    assert all(len(b) <= 2 for b in lst.posts) and len(lst.posts) == 2
    assert lst.stored[("a", "gone")]["uid"] == "u-gone"
    assert lst.stored[("a", "newer-in-kcp")]["resourceVersion"] == "99"
    assert sample(m, "tether_poller_differences_total", type="changed") == 1
    assert sample(m, "tether_poller_records_sent_total", outcome="persisted") == 4
    assert sample(m, "tether_poller_objects_scanned_total") == 4
    # a second run finds nothing: one state request, the list pages, no POST
    before = len(lst.posts)
    res2 = r.run()
    assert (res2.outcome, res2.differences, res2.sent) == (
        "ok",
        {"missing": 0, "changed": 0, "deleted": 0},
        0,
    )
    assert len(lst.posts) == before


def test_a_run_with_no_differences_only_reads() -> None:
    lst = Listener()
    objs = [cm("a", f"c{i}", 10 + i) for i in range(7)]
    for i in range(7):
        lst.put("a", f"c{i}", 10 + i)
    pages = Pages(objs, list_rv=40, size=3)
    r, m, _ = runner(pages, lst, state_page_size=5)
    assert r.run().sent == 0
    assert (pages.requests, lst.state_calls, len(lst.posts)) == (3, 2, 0)
    assert sample(m, "tether_poller_listener_requests_total", call="state") == 2


def test_410_gone_restarts_from_the_digest_without_resending() -> None:
    lst = Listener()
    objs = [cm("a", f"c{i}", 10 + i) for i in range(6)]
    pages = Pages(objs, list_rv=30, gone_at=2)
    r, m, _ = runner(pages, lst)
    res = r.run()
    assert res.outcome == "ok"
    names = [x["name"] for b in lst.posts for x in b]
    assert sorted(names) == [f"c{i}" for i in range(6)]  # each sent exactly once
    assert sample(m, "tether_poller_list_restarts_total") == 1
    assert lst.state_calls == 2


def test_410_gone_forever_gives_up() -> None:
    class AlwaysGone(Pages):
        def pages(self) -> Iterator[scan.Page]:
            raise scan.Gone("410")
            yield  # pragma: no cover

    r, _, _ = runner(AlwaysGone([], 1), Listener(), max_restarts=2)
    assert r.run().outcome == "gone"


def test_listener_failure_stops_the_run_early_with_its_retry_after() -> None:
    lst = Listener()
    objs = [cm("a", f"c{i}", 10 + i) for i in range(10)]
    r, _, slept = runner(Pages(objs, 30), lst, send_attempts=3, retry_cap=10)
    lst.stored.clear()
    res = r.run()
    assert res.outcome == "ok"
    lst.stored.clear()
    lst.posts.clear()
    lst.fail = sender.Outcome("retryable", 503, "http-503", 2.0, "KCP API unavailable")
    lst.state_calls = 0
    res = r.run()
    assert res.outcome == "listener-failed" and res.retry_after == 2.0  # failed at the state GET
    lst.fail = None
    lst.stored.clear()

    class FailingSend(Listener):
        def send(
            self,
            records: Sequence[changes.ChangeRecord],
            timeout: tuple[float, float] | None = None,
        ) -> sender.Outcome:
            self.posts.append(list(records))
            return sender.Outcome("retryable", 429, "http-429", 1.0, "rate limited")

    fl = FailingSend()
    r2, m2, slept = runner(Pages(objs, 30), fl, send_attempts=3, retry_cap=10)
    res = r2.run()
    assert res.outcome == "listener-failed" and res.sent == 0
    assert len(fl.posts) == 3  # one batch, three attempts, then the run stopped
    assert slept and all(s >= 1.0 for s in slept)  # honoured Retry-After


def test_refusal_of_the_runtime_stops_and_a_bad_record_is_isolated() -> None:
    lst = Listener()
    lst.refuse_names = {"c1"}
    objs = [cm("a", f"c{i}", 10 + i) for i in range(4)]
    r, m, _ = runner(Pages(objs, 30), lst)
    res = r.run()
    assert res.outcome == "ok"
    assert sorted(lst.stored) == [("a", "c0"), ("a", "c2"), ("a", "c3")]
    assert sample(m, "tether_poller_records_sent_total", outcome="refused") == 1
    lst.fail = sender.Outcome("permanent", 403, "http-403", None, "forbidden")
    assert r.run().outcome == "listener-refused"


def test_apiserver_failure_and_lost_leadership() -> None:
    lst = Listener()
    r, _, _ = runner(Pages([cm("a", "x", 1)], 5, error=True), lst)
    assert r.run().outcome == "apiserver-failed"
    r, _, _ = runner(Pages([cm("a", "x", 1)], 5), lst)
    assert r.run(keep_going=lambda: False).outcome == "aborted"
    assert lst.posts == []


def test_full_resync_resends_equal_objects_but_not_older_ones() -> None:
    lst = Listener()
    lst.put("a", "same", 10)
    lst.put("a", "ahead", 40)
    r, _, _ = runner(Pages([cm("a", "same", 10), cm("a", "ahead", 30)], 50), lst)
    res = r.run(full=True)
    assert res.outcome == "ok" and res.differences == {"missing": 0, "changed": 0, "deleted": 0}
    assert [x["name"] for b in lst.posts for x in b] == ["same"]


def test_pacing_sleeps_between_batches() -> None:
    lst = Listener()
    objs = [cm("a", f"c{i}", 10 + i) for i in range(6)]
    r, _, slept = runner(Pages(objs, 30), lst, rate=2.0, burst=2)
    assert r.run().sent == 6
    assert slept == [1.0, 1.0]


def test_service_backs_off_after_listener_failure_and_skips_when_not_leading() -> None:
    lst = Listener()
    now = [1000.0]
    r, m, _ = runner(Pages([cm("a", "x", 1)], 5), lst)
    sched = settings_mod.ScheduleSettings(
        interval=1, jitter=0, resync_cron="", backoff_base=10, backoff_cap=10
    )
    svc = service.Service(sched, r, m, clock=lambda: now[0])
    assert svc.tick().outcome == "aborted"  # not leading
    svc.leading.set()
    lst.fail = sender.Outcome("retryable", 503, "http-503", 10.0, "down")
    assert svc.tick().outcome == "listener-failed"
    assert svc.tick().outcome == "skipped-backoff"
    now[0] += 10.0
    lst.fail = None
    assert svc.tick().outcome == "ok"
    assert sample(m, "tether_poller_runs_total", kind="interval", outcome="skipped-backoff") == 1
    assert sample(m, "tether_poller_last_success_timestamp_seconds") > 0


def test_scheduler_runs_only_while_leading_with_both_jobs() -> None:
    import time

    lst = Listener()
    r, m, _ = runner(Pages([cm("a", "x", 1)], 5), lst)
    sched = settings_mod.ScheduleSettings(interval=3600, jitter=0, resync_cron="*/5 * * * *")
    svc = service.Service(sched, r, m)
    scheduler = svc.start()
    try:
        assert {j.id for j in scheduler.get_jobs()} == {
            service.INTERVAL_JOB,
            service.RESYNC_JOB,
        }
        time.sleep(0.3)
        assert lst.state_calls == 0  # started paused: a follower runs nothing
        svc.on_started()
        deadline = time.monotonic() + 10
        while sample(m, "tether_poller_runs_total", kind="interval", outcome="ok") < 1:
            assert time.monotonic() < deadline, "no run after becoming leader"
            time.sleep(0.05)
        assert sample(m, "tether_poller_leader") == 1
        resync = scheduler.get_job(service.RESYNC_JOB)
        assert resync.next_run_time is not None and resync.next_run_time.minute % 5 == 0
        svc.on_stopped()
        assert sample(m, "tether_poller_leader") == 0 and not svc.leading.is_set()
    finally:
        svc.shutdown()
    assert not svc.running()
