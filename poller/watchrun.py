"""One anti-entropy run in Watch mode: a pass per Watch in force in the runtime (its
``tether-watches`` ConfigMap, ``tether.wire.watchset``), each like the environment's run
(``poller.run``) but of the Watch's resource and records::

    per Watch, by name:
      GET watches/NAME/summary         -> its bucket hashes (the listener's view: no KCP read);
      LIST its resource, hashed        -> equal to the runtime's objects it admits: the pass
                                          ends (``in_sync``); else, a full resync, or a listener
                                          without per-Watch summaries (404), as below
      GET state?watch=NAME pages       -> the digest of that Watch's records (poller.diff)
      LIST its resource page by page   -> in each namespace it names, or across all namespaces
                                          but the ignored ones (a field selector); its label
                                          selector goes to the apiserver; what the Watch does
                                          not admit (tether.wire.watches.admits) is not compared
      differences                      -> v2 records, reduced here (changes.from_object)
      live entries left over           -> v2 tombstones (changes.watch_tombstone): the object
                                          is gone or no longer covered
    an item of another kind            -> (its own apiVersion and kind, tether.wire.watches.foreign)
                                          never reduced nor sent: the Watch is skipped
    404 / 403 on its list              -> the Watch is skipped (warning, counted by reason);
                                          nothing is tombstoned for it, the others run; so is
                                          a Watch the listener does not hold in force (404 on
                                          its digest: the runtime's list is behind the KCP)
    403 "refused by the watches"       -> that record is dropped (logged, counted refused),
                                          the run goes on (poller.batching.by_watches)

The passes share the run (``poller.batching``): one pacer (rate and burst are the run's),
the batch bounds, the restarts after 410 Gone (a restart starts again from the first
Watch; what was sent is in the digests by then), and the epoch: the first Watch's first
state page reports the runtime's identity (and a claim, after a listing came below the
records of the current epoch, ``listener.fleet.epochs``). Memory holds one Watch's digest
and one page. The decisions of which namespaces are listed and which resourceVersion a
tombstone carries are pure functions here (``listings``, ``field_selector``, ``tomb_rv``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from poller import batching, diff, metrics, scan
from tether.base import numbers, times
from tether.kube import apitypes
from tether.wire import changes, conversion, listenerapi, statehash, watches

log = logging.getLogger(__name__)


class WatchSource(Protocol):
    """``tether.wire.watchset.WatchSet``: None when the runtime holds none (its Watches are
    then ``conversion.in_force``'s built-in one), or while no read of it has answered
    (``settled`` False: then no run, never the environment's)."""

    def current(self) -> tuple[watches.Watch, ...] | None: ...

    def settled(self) -> bool: ...


class WatchLister(Protocol):
    """``poller.scan.Lister``."""

    def watch_pages(
        self,
        res: apitypes.Resource,
        namespace: str | None,
        *,
        field_selector: str,
        label_selector: str,
    ) -> Iterator[scan.Page]: ...


class Watching(NamedTuple):
    """What a runner needs for Watch mode: where the Watches are, how to list their kinds."""

    source: WatchSource
    lister: WatchLister


class Scope(NamedTuple):
    """How one pass lists, admits and records: a Watch's own (``WatchRun._scope``) or the
    built-in Watch's, the environment's ConfigMap scope (``poller.run``: v1 records, the
    runtime's summary by buckets)."""

    digest_watch: str  # the state listing's ?watch= ("": the runtime's compat Watch)
    pages: Callable[[], Iterator[tuple[str | None, scan.Page]]]  # (its listing, a page)
    admits: Callable[[Mapping[str, Any], tuple[str, str]], bool]  # may raise scan.Unserved
    record: Callable[[Mapping[str, Any], str, int | None], changes.ChangeRecord]
    tombstone: Callable[[str, str, str, str, str, int | None], changes.ChangeRecord]
    summary: Callable[[str], dict[str, Any] | None] | None  # its summary, by identity
    by_buckets: Callable[[], int | None] | None  # a pass by buckets: its entries, None: not
    skips_unknown: bool  # 404 on its digest: the pass is skipped (else the run stops)


class Host(Protocol):
    """``poller.run.Runner``: its digest of a Watch's records and its batch buffer."""

    runtime_id: str
    metrics: metrics.Metrics

    def watch_summary(self, watch: str, identity: str) -> dict[str, Any] | None: ...

    def digest(
        self, state: batching.RunState, report: listenerapi.EpochReport, watch: str = ""
    ) -> tuple[diff.Digest, int | None]: ...

    def buffer(
        self, state: batching.RunState, keep_going: Callable[[], bool]
    ) -> batching.Buffer: ...

    def environment(self, state: batching.RunState, keep_going: Callable[[], bool]) -> Scope: ...


# -- the decisions (pure) ----------------------------------------------------------------------


def resource_of(target: watches.Target) -> apitypes.Resource:
    return apitypes.watched(target.group, target.version, target.resource)


def listings(w: watches.Watch) -> tuple[str | None, ...]:
    """The namespaces to list, each its own listing; ``(None,)``: one listing across all
    namespaces (the Watch names none)."""
    if not w.namespaces:
        return (None,)
    return tuple(ns for ns in w.namespaces if watches.namespace_admitted(w, ns))


def field_selector(w: watches.Watch) -> str:
    """For a listing across all namespaces: the namespaces never watched and the Watch's
    ignored ones, excluded by the apiserver."""
    ignored = sorted(set(watches.ALWAYS_IGNORED_NAMESPACES) | set(w.ignored_namespaces))
    return ",".join(f"metadata.namespace!={ns}" for ns in ignored)


def tomb_rv(listed: Mapping[str | None, str], namespace: str) -> str:
    """The collection resourceVersion a tombstone in ``namespace`` is judged at: that of
    the namespace's own listing, else of the listing across all namespaces, else (a
    namespace the Watch no longer names) the highest of the listings; "" when nothing
    was listed (then nothing is tombstoned)."""
    for key in (namespace, None):
        if listed.get(key):
            return listed[key]
    best = ""
    for rv in listed.values():
        n = numbers.ascii_int(rv, 64)
        if n is not None and (not best or n > (numbers.ascii_int(best, 64) or -1)):
            best = rv
    return best


# -- the run -----------------------------------------------------------------------------------


class WatchRun:
    """One run over ``in_force`` (``run``); raises ``batching.Stop``, ``Restart`` and
    ``WentBack`` as the environment's run does."""

    def __init__(
        self,
        host: Host,
        lister: WatchLister | None,  # None: a runner of the environment's scope only
        state: batching.RunState,
        full: bool,
        keep_going: Callable[[], bool],
    ) -> None:
        self.host, self.lister, self.state = host, lister, state
        self.full, self.keep_going = full, keep_going
        self.skipped: list[tuple[str, str]] = []  # (watch, reason)

    def run(self, in_force: Sequence[watches.Watch], report: listenerapi.EpochReport) -> None:
        self.state.scanned = 0
        self.skipped = []
        entries = 0
        m = self.host.metrics
        m.watches.set(len(in_force))
        for i, w in enumerate(in_force):
            if not self.keep_going():
                raise batching.Stop("aborted", "leadership lost")
            entries += self._pass(w, report, first=i == 0)
        self.state.digest_entries = entries
        m.digest_entries.set(entries)
        m.last_scanned.set(self.state.scanned)

    def _scope(self, w: watches.Watch) -> Scope:
        """How ``w``'s pass lists, admits and records (the built-in Watch's: the host's)."""
        if conversion.is_builtin(w):
            return self.host.environment(self.state, self.keep_going)
        lister, res, rid = self.lister, resource_of(w.target), self.host.runtime_id
        if lister is None:
            raise batching.Stop("apiserver-failed", f"no lister of the kind of watch {w.name}")

        def pages() -> Iterator[tuple[str | None, scan.Page]]:
            for ns in listings(w):
                for page in lister.watch_pages(
                    res,
                    ns,
                    field_selector=field_selector(w) if ns is None else "",
                    label_selector=w.selector_text,
                ):
                    yield ns, page

        def admits(obj: Mapping[str, Any], key: tuple[str, str]) -> bool:
            foreign = watches.foreign(w, obj)
            if foreign is not None:  # never reduced nor sent; the Watch's pass ends here
                raise scan.Unserved(f"{foreign}: nothing of it is sent", "foreign-kind")
            return watches.admits(w, key[0], key[1], (obj.get("metadata") or {}).get("labels"))

        def record(
            obj: Mapping[str, Any], observed: str, epoch: int | None
        ) -> changes.ChangeRecord:
            return changes.from_object(
                obj, watch=w, runtime_id=rid, source="poller", observed_at=observed, epoch=epoch
            )

        def tombstone(
            ns: str, name: str, uid: str, rv: str, observed: str, epoch: int | None
        ) -> changes.ChangeRecord:
            return changes.watch_tombstone(
                watch=w,
                runtime_id=rid,
                namespace=ns,
                name=name,
                uid=uid,
                resource_version=rv,
                source="poller",
                observed_at=observed,
                epoch=epoch,
            )

        def summary(identity: str) -> dict[str, Any] | None:
            return self.host.watch_summary(w.name, identity)

        return Scope(w.name, pages, admits, record, tombstone, summary, None, True)

    def _pass(self, w: watches.Watch, report: listenerapi.EpochReport, first: bool) -> int:
        """One Watch: its summary first (in sync: done), else its digest, its listings, its
        differences; the digest's size. The claim of a new epoch goes with the run's first
        state page only (never with a summary: a run that claims compares by digests)."""
        scope = self._scope(w)
        if not self.full and report.epoch is None:
            held = self._settled(scope, report.identity)
            if held is not None:
                self.host.metrics.watch_passes.labels("summary").inc()
                return held
        self.host.metrics.watch_passes.labels("digest").inc()
        try:
            digest, epoch = self.host.digest(
                self.state,
                report if first else report._replace(epoch=None, collection_rv=""),
                scope.digest_watch,
            )
        except batching.Stop as e:
            if e.status != 404 or not scope.skips_unknown:
                raise
            self._skip(w, "unknown", f"the listener has no such watch for this runtime: {e}")
            return 0
        entries = len(digest)
        mark = None if epoch is None else diff.high_water(digest, epoch)
        buffer = self.host.buffer(self.state, self.keep_going)
        listed_at = times.now()
        listed: dict[str | None, str] = {}
        with batching.listing(buffer):
            try:
                for ns, page in scope.pages():
                    if not self.keep_going():
                        raise batching.Stop("aborted", "leadership lost")
                    listed[ns] = page.resource_version or listed.get(ns, "")
                    if (
                        mark is not None
                        and epoch is not None
                        and changes.went_back(listed[ns], mark)
                    ):
                        batching.went_back(epoch, listed[ns], mark, report)
                        mark = None
                    self._compare(scope, page.items, digest, epoch, buffer)
            except scan.Unserved as e:
                buffer.flush()
                self._skip(w, e.reason, str(e))
                return entries
        for (ns, name), entry in digest.items():
            rv = diff.leftover(entry, tomb_rv(listed, ns), listed_at, epoch or 0)
            if rv is None:
                continue
            self._differ("deleted")
            buffer.add(scope.tombstone(ns, name, entry.uid, rv, listed_at, epoch))
        buffer.flush()
        return entries

    def _settled(self, scope: Scope, identity: str) -> int | None:
        """The pass by the scope's summary: its entries when in sync (then it ends), None
        when the digest must be compared."""
        if scope.by_buckets is not None:
            return scope.by_buckets()
        if scope.summary is None:
            return None
        try:
            with batching.listing(self.host.buffer(self.state, self.keep_going)):
                try:
                    return self._in_sync(scope, identity)
                except scan.Unserved:
                    return None  # the digest's pass skips it, naming why
        except batching.Stop as e:
            if e.status != 404:
                raise
            return None  # a Watch the listener does not hold: the digest's pass skips it

    def _in_sync(self, scope: Scope, identity: str) -> int | None:
        """The Watch's live records when its summary equals the hashes of the objects it
        admits in the runtime (``tether.wire.statehash``, at the summary's epoch); None when
        they differ or there is no summary to compare with. Nothing is sent here."""
        doc = None if scope.summary is None else scope.summary(identity)
        remote = None if doc is None else statehash.parse_summary(doc)
        if doc is None or remote is None:
            return None
        epoch = listenerapi.epoch_in(doc.get("epoch")) or 0
        local = statehash.Buckets()
        scanned = 0
        for _, page in scope.pages():
            if not self.keep_going():
                raise batching.Stop("aborted", "leadership lost")
            for obj in page.items:
                key = diff.key_of(obj)
                if scope.admits(obj, key):
                    scanned += 1
                    local.add_live(key[0], key[1], diff.resource_version_of(obj), epoch)
        if statehash.mismatching(local, remote):
            return None
        self.state.epoch = epoch
        self.host.metrics.epoch.set(epoch)
        self.host.metrics.scanned.inc(scanned)
        self.state.scanned += scanned
        return sum(max(c, 0) for c in remote.counts)

    def _compare(
        self,
        scope: Scope,
        items: Sequence[Mapping[str, Any]],
        digest: diff.Digest,
        epoch: int | None,
        buffer: batching.Buffer,
    ) -> None:
        """Judge one page against the digest (taking what the scope admits out of it)."""
        observed = times.now()
        scanned = 0
        for obj in items:
            key = diff.key_of(obj)
            if not scope.admits(obj, key):
                continue  # left in the digest: a record of it is tombstoned
            scanned += 1
            entry = digest.pop(key, None)
            rv = diff.resource_version_of(obj)
            kind = diff.judge(entry, rv, observed, epoch or 0)
            if kind is not None:
                self._differ(kind)
            elif not (self.full and diff.resend(entry, rv, observed, epoch or 0)):
                continue
            buffer.add(scope.record(obj, observed, epoch))
        self.host.metrics.scanned.inc(scanned)
        self.state.scanned += scanned

    def _differ(self, kind: str) -> None:
        self.state.count(kind)
        self.host.metrics.differences.labels(kind).inc()

    def _skip(self, w: watches.Watch, reason: str, detail: str) -> None:
        self.skipped.append((w.name, reason))
        self.host.metrics.watches_skipped.labels(reason).inc()
        log.warning(
            "watch %s skipped: %s (its records are kept; the other watches run)", w.name, detail
        )
