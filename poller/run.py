"""One anti-entropy run: digest in, ConfigMaps listed page by page, differences sent.

    GET state pages (the heartbeat)  -> dict key -> (rv, observedAt, deleted, uid)
    LIST configmaps page by page     -> judge each object, pop its key, buffer records
    what is left live in the digest  -> tombstones at the listing's resourceVersion
    buffer full / end                -> POST a batch through the per-run Pacer

Memory holds the digest entries (no data), one page of objects and one batch of records.
Requests: digest pages + list pages + batches of differences; equal objects cost nothing.

The run stops early (``Stop``) when the listener fails (after ``send_attempts`` tries of a
batch), refuses the runtime, when the apiserver cannot be listed, and when ``keep_going``
turns false (the Lease was lost). A 410 Gone restarts the run from the digest (records
already sent are in it by then, so they are not sent again), at most ``max_restarts``.

Epochs (``listener.fleet.epochs``): the first state page reports the runtime's identity and
answers the current epoch, which every record of the run carries. When the listing's first
page comes below the highest resourceVersion of the digest's records of that epoch
(``tether.wire.changes.went_back``: the runtime's history went back), the run restarts once before
sending anything, and its first state page claims it; the listener starts the next epoch,
and the restarted run, comparing by epoch first, resends every listed object and
tombstones every other live key: the KCP holds the runtime's state after this one run.

One loop (``poller.watchrun``): the run is one pass per Watch in force,
``tether.wire.conversion.in_force``: the runtime's Watch list (``tether.wire.watchset``, read
at the start of each run; v2 records of each Watch's resource, its summary, else its digest
``?watch=NAME``), or, where the runtime holds none, the built-in Watch of the environment's
scope, whose pass (``Runner.environment``) is the one above: ConfigMaps of the environment's
filter, v1 records, the runtime's summary by buckets (``poller.buckets``), else its digest.
The passes share this run's pacer, batches, restarts and epoch (``poller.batching``).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from poller import batching, buckets, diff, metrics, pacing, scan, watchrun
from tether.base import logs
from tether.runtime import sender
from tether.wire import changes, conversion, filters, listenerapi

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class RunSettings:
    page_size: int = 500
    state_page_size: int = 5000
    batch_items: int = 100
    batch_bytes: int = sender.DEFAULT_MAX_BATCH_BYTES
    rate: float = 100.0  # records per second within a run
    burst: int = 100
    send_attempts: int = 3
    retry_base: float = 0.5
    retry_cap: float = 5.0
    max_restarts: int = 3
    buckets: bool = False  # compare the listener's state summary first (poller.buckets)
    max_buckets: int = 64  # more differing buckets than this: the full digest


class Result(NamedTuple):
    outcome: str  # one of metrics.OUTCOMES
    scanned: int = 0
    digest_entries: int = 0
    differences: dict[str, int] = {}
    sent: int = 0
    retry_after: float | None = None
    detail: str = ""
    digest_seconds: float = 0.0  # of the run's duration: loading the listener's digest
    epoch: int | None = None  # the runtime's epoch the run's records carried

    @property
    def ok(self) -> bool:
        """For the last-run annotations of the Lease (``tether.runtime.elected.record_runs``)."""
        return self.outcome == "ok"

    @property
    def skipped(self) -> bool:
        """Not a run: not leading, in backoff, or another run in progress."""
        return self.outcome in ("aborted", "skipped-backoff", "skipped-busy")


class PageSource(Protocol):
    """``scan.Lister`` (the runtime's apiserver)."""

    def pages(self) -> Iterator[scan.Page]: ...


class Listener(Protocol):
    """``tether.runtime.sender.ListenerClient``."""

    def state_page(
        self,
        limit: int = 500,
        token: str = "",
        report: listenerapi.EpochReport | None = None,
        watch: str = "",
    ) -> sender.StatePage: ...

    def send(
        self, records: Sequence[changes.ChangeRecord], timeout: tuple[float, float] | None = None
    ) -> sender.Outcome: ...


Stop = batching.Stop


class Runner:
    def __init__(
        self,
        runtime_id: str,
        settings: RunSettings,
        flt: filters.ConfigMapFilter,
        lister: PageSource,
        client: Listener,
        m: metrics.Metrics,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        identity: Callable[[], str] = lambda: "",
        watches: watchrun.Watching | None = None,
    ) -> None:
        self.runtime_id = runtime_id
        self.watches = watches  # None: the built-in Watch's scope only (tether.wire.conversion)
        self._identity = identity
        self.settings = settings
        self.filter = flt
        self.lister = lister
        self.client = client
        self.metrics = m
        self._clock = clock
        self._sleep = sleep

    # -- the run ---------------------------------------------------------------------------

    def run(self, *, full: bool = False, keep_going: Callable[[], bool] = lambda: True) -> Result:
        """One run; ``full`` sends every listed object the listener does not hold as newer
        (a resync that does not trust the digest's resourceVersions)."""
        state = batching.RunState(
            pacing.Pacer(self.settings.rate, self.settings.burst, self._clock())
        )
        report = listenerapi.EpochReport(self._identity())
        watching = self.watches
        listed = None if watching is None else watching.source.current()
        if watching is not None and not watching.source.settled():
            return _result(state, "apiserver-failed", "the runtime's Watch list cannot be read")
        # the runtime's Watch list, or the built-in Watch of the environment's scope
        in_force = conversion.in_force(listed, self.filter)
        lister = None if watching is None else watching.lister
        gone = 0
        while gone <= self.settings.max_restarts:
            try:
                watchrun.WatchRun(self, lister, state, full, keep_going).run(in_force, report)
                return _result(state, "ok")
            except batching.Restart:
                gone += 1
                self.metrics.list_restarts.inc()
                log.info("listing expired (410 Gone), restarting the run (%d)", gone)
            except batching.WentBack as e:  # once: the claim is sent, and then never raised again
                self.metrics.went_back.inc()
                log.warning("the runtime's history went back (%s): claiming a new epoch", e)
                report = report._replace(epoch=e.epoch, collection_rv=e.collection_rv)
            except Stop as e:
                return _result(state, e.outcome, e.detail, e.retry_after)
        return _result(state, "gone", f"410 Gone {self.settings.max_restarts + 1} times")

    def environment(
        self, state: batching.RunState, keep_going: Callable[[], bool]
    ) -> watchrun.Scope:
        """The built-in Watch's pass (``poller.watchrun.Scope``): the ConfigMaps of the
        environment's filter (``TETHER_IGNORED_NAMESPACES``, ``TETHER_LABEL_SELECTOR``) in one
        listing, v1 records (``tether.wire.conversion``), the runtime's summary by buckets."""
        rid, flt = self.runtime_id, self.filter

        def pages() -> Iterator[tuple[str | None, scan.Page]]:
            for page in self.lister.pages():
                yield None, page

        def admits(obj: Mapping[str, Any], key: tuple[str, str]) -> bool:
            labels = (obj.get("metadata") or {}).get("labels")
            return filters.rejection(flt, key[0], labels) is None  # the apiserver filtered too

        def record(
            obj: Mapping[str, Any], observed: str, epoch: int | None
        ) -> changes.ChangeRecord:
            return conversion.from_configmap(
                obj, runtime_id=rid, source="poller", observed_at=observed, epoch=epoch
            )

        def tombstone(
            ns: str, name: str, uid: str, rv: str, observed: str, epoch: int | None
        ) -> changes.ChangeRecord:
            return conversion.tombstone(
                runtime_id=rid,
                namespace=ns,
                name=name,
                uid=uid,
                resource_version=rv,
                source="poller",
                observed_at=observed,
                epoch=epoch,
            )

        def by_buckets() -> int | None:
            if not self.settings.buckets or not self._by_buckets(
                state, keep_going, self._identity()
            ):
                return None
            return state.digest_entries

        return watchrun.Scope("", pages, admits, record, tombstone, None, by_buckets, False)

    def digest(
        self, state: batching.RunState, report: listenerapi.EpochReport, watch: str = ""
    ) -> tuple[diff.Digest, int | None]:
        """The listener's digest of the runtime's records, and the epoch it answered."""
        t0 = self._clock()
        problems: collections.Counter[str] = collections.Counter()
        bad_keys: list[str] = []
        state.epoch = None
        digest = diff.load(self._state_items(state, report, watch), problems, bad_keys)
        state.digest_seconds += self._clock() - t0
        if state.epoch is not None:
            self.metrics.epoch.set(state.epoch)
        if problems:
            for field, n in problems.items():
                self.metrics.digest_uninterpretable.labels(field).inc(n)
            log.warning(
                "listener digest: %s uninterpretable entries (%s), e.g. %s; resent or dropped",
                sum(problems.values()),
                ", ".join(f"{f}: {n}" for f, n in sorted(problems.items())),
                ", ".join(bad_keys),
            )
        state.digest_entries = len(digest)
        self.metrics.digest_entries.set(len(digest))
        return digest, state.epoch

    def _by_buckets(
        self, state: batching.RunState, keep_going: Callable[[], bool], identity: str = ""
    ) -> bool:
        """The run by buckets (``poller.buckets``); False when the full digest must run."""
        if not buckets.supported(self.client, self.lister):
            return False
        t0 = self._clock()
        buffer = self.buffer(state, keep_going)

        def differ(kind: str) -> None:
            state.count(kind)
            self.metrics.differences.labels(kind).inc()

        br = buckets.BucketRun(
            self.runtime_id,
            self.filter,
            self.lister,  # type: ignore[arg-type]
            self.client,  # type: ignore[arg-type]
            add=buffer.add,
            differ=differ,
            keep_going=keep_going,
            request=lambda call: self.metrics.listener_requests.labels(call).inc(),
            stop=lambda: Stop("aborted", "leadership lost"),
            max_buckets=self.settings.max_buckets,
            identity=identity,
        )
        try:
            with batching.listing(buffer):
                out = br.run()
        except sender.ListenerError as e:
            raise batching.stop_for(e.outcome, "state") from None
        buffer.flush()
        state.digest_seconds += self._clock() - t0
        if out == buckets.FALLBACK:
            return False
        state.scanned, state.digest_entries = out.scanned, out.digest_entries
        state.epoch = out.epoch
        self.metrics.epoch.set(out.epoch)
        self.metrics.scanned.inc(out.scanned)
        self.metrics.last_scanned.set(out.scanned)
        self.metrics.buckets_listed.inc(out.buckets_listed)
        return True

    def watch_summary(self, watch: str, identity: str) -> dict[str, Any] | None:
        """A Watch's summary (``poller.watchrun``); None when the listener client or the
        listener has none (404). Raises ``Stop`` when the listener fails."""
        ask = getattr(self.client, "watch_summary", None)
        if not callable(ask):
            return None
        self.metrics.listener_requests.labels("summary").inc()
        try:
            doc: dict[str, Any] | None = ask(watch, identity)
        except sender.ListenerError as e:
            raise batching.stop_for(e.outcome, "state") from None
        return doc

    def _state_items(
        self, state: batching.RunState, report: listenerapi.EpochReport, watch: str = ""
    ) -> Iterator[changes.DigestItem]:
        token = ""
        while True:
            self.metrics.listener_requests.labels("state").inc()
            try:
                page = self.client.state_page(
                    self.settings.state_page_size, token, None if token else report, watch
                )
            except sender.ListenerError as e:
                raise batching.stop_for(e.outcome, "state") from None
            if not token:
                state.epoch = page.epoch  # the first page's: the report was settled there
            yield from page.items
            if not page.continue_token:
                return
            token = page.continue_token

    # -- sending ---------------------------------------------------------------------------

    def buffer(self, state: batching.RunState, keep_going: Callable[[], bool]) -> batching.Buffer:
        return batching.Buffer(
            self.send, self.settings.batch_items, self.settings.batch_bytes, state, keep_going
        )

    def send(self, records: list[changes.ChangeRecord], state: batching.RunState) -> None:
        """Send one batch (paced, retried); raises ``Stop`` when the listener fails."""
        wait = state.pacer.wait_for(len(records), self._clock())
        if wait > 0:
            self._sleep(wait)
        attempt = 0
        while True:
            self.metrics.listener_requests.labels("changes").inc()
            outcome = self.client.send(records)
            if outcome.verdict == "ok":
                for r in outcome.results:
                    got = str(r.get("outcome", "unknown"))
                    self.metrics.sent.labels(
                        got if got in metrics.SENT_OUTCOMES else "unknown"
                    ).inc()
                state.sent += len(records)
                return
            if outcome.verdict == "permanent":
                refused = outcome.status in (400, 413) or batching.by_watches(outcome)
                if len(records) > 1 and refused:
                    for rec in records:  # isolate the record the listener refuses
                        self.send([rec], state)
                    return
                if refused:
                    rec = records[0]
                    self.metrics.sent.labels("refused").inc()
                    log.error(
                        "listener refused %s/%s rv=%s: %s %s %s",
                        rec["namespace"],
                        rec["name"],
                        rec["resourceVersion"],
                        outcome.status,
                        outcome.error,
                        logs.bounded(outcome.details, 300),
                    )
                    return
                raise batching.stop_for(outcome, "changes")
            attempt += 1
            delay = sender.retry_delay(
                outcome, attempt - 1, base=self.settings.retry_base, cap=self.settings.retry_cap
            )
            if attempt >= self.settings.send_attempts or delay > self.settings.retry_cap:
                raise batching.stop_for(outcome, "changes")
            self._sleep(delay)


def _result(
    state: batching.RunState, outcome: str, detail: str = "", retry_after: float | None = None
) -> Result:
    return Result(
        outcome,
        state.scanned,
        state.digest_entries,
        dict(state.differences),
        state.sent,
        retry_after,
        detail,
        state.digest_seconds,
        state.epoch,
    )
