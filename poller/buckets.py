"""One anti-entropy run by buckets: compare hashes first, list only what differs.

    GET state/summary (the heartbeat)       -> 256 bucket hashes and counts of the KCP
    LIST configmaps, metadata only, pages   -> the same hashes of the runtime (streaming)
    equal                                   -> done: one listener request, one KCP read
    else GET state/buckets/{n} per bucket that differs (their digests, before the listing)
    LIST configmaps, metadata only, again   -> judge the objects of those buckets only; GET
                                               the ones to send (their data); tombstones for
                                               the digests' live entries left over

Memory is flat: the first pass keeps 2 x 256 integers, the second the digests of the
differing buckets and one page. The rules are ``poller.diff``'s, applied to the keys of
the differing buckets; the listings are the ones ``poller.scan`` makes (``metadata_only``).

The run falls back to the full digest (``poller.run``; ``FALLBACK``) when the listener
has no summaries (404: older), answers another protocol (``statehash.parse_summary``),
when more than ``MAX_BUCKETS`` buckets differ (then one paged digest is cheaper than
bucket requests, and listing with data cheaper than a GET per object), or when a bucket
still differs after its records were compared and nothing could be sent for it (the
listener holds newer records than the runtime shows: a runtime whose history went back,
which the full digest's epoch rules handle). Pure apart from the injected lister and
client; the caller maps their errors (``poller.run``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, Literal, NamedTuple, Protocol

from poller import diff
from tether.base import times
from tether.wire import changes, conversion, filters, statehash

MAX_BUCKETS = statehash.BUCKETS // 4
FALLBACK: Literal["fallback"] = "fallback"


class PageLike(Protocol):
    items: list[dict[str, Any]]
    resource_version: str


class Lister(Protocol):
    def pages(self, metadata_only: bool = False) -> Iterator[PageLike]: ...

    def get(self, namespace: str, name: str) -> dict[str, Any] | None: ...


class Client(Protocol):
    def state_summary(self, identity: str = "") -> dict[str, Any] | None: ...

    def state_bucket(self, bucket: int) -> list[changes.DigestItem]: ...


def supported(client: object, lister: object) -> bool:
    return all(
        callable(getattr(client, m, None)) for m in ("state_summary", "state_bucket")
    ) and callable(getattr(lister, "get", None))


class Outcome(NamedTuple):
    scanned: int
    digest_entries: int
    buckets_listed: int
    epoch: int = 0  # the runtime's epoch (the summary's): what the run's records carried


def _epoch(doc: dict[str, Any]) -> int:
    """The runtime's current epoch as the summary says it (absent: 0, before epochs)."""
    e = doc.get("epoch")
    return e if isinstance(e, int) and not isinstance(e, bool) and e >= 0 else 0


class BucketRun:
    """``add`` takes a record to send, ``differ`` a difference found, ``request`` a
    listener call made (``summary`` or ``bucket``), ``keep_going`` False stops (raises
    ``stop``)."""

    def __init__(
        self,
        runtime_id: str,
        flt: filters.ConfigMapFilter,
        lister: Lister,
        client: Client,
        *,
        add: Callable[[changes.ChangeRecord], None],
        differ: Callable[[str], None],
        request: Callable[[str], None],
        keep_going: Callable[[], bool],
        stop: Callable[[], BaseException],
        problems: Counter[str] | None = None,
        max_buckets: int = MAX_BUCKETS,
        identity: str = "",
    ) -> None:
        self.max_buckets, self.identity = max_buckets, identity
        self.runtime_id, self.filter, self.lister, self.client = runtime_id, flt, lister, client
        self._add, self._differ, self._request = add, differ, request
        self._keep_going, self._stop = keep_going, stop
        self.problems: Counter[str] = problems if problems is not None else Counter()
        self.bad_keys: list[str] = []

    def _watched(self, obj: dict[str, Any]) -> tuple[str, str] | None:
        key = diff.key_of(obj)
        labels = (obj.get("metadata") or {}).get("labels")
        if filters.rejection(self.filter, key[0], labels) is not None:
            return None
        return key

    def _pages(self) -> Iterator[PageLike]:
        for page in self.lister.pages(metadata_only=True):
            if not self._keep_going():
                raise self._stop()
            yield page

    def run(self) -> Outcome | Literal["fallback"]:
        self._request("summary")
        doc = self.client.state_summary(self.identity)
        remote = None if doc is None else statehash.parse_summary(doc)
        if doc is None or remote is None:
            return FALLBACK
        epoch = _epoch(doc)
        local = statehash.Buckets()
        scanned = 0
        for page in self._pages():
            for obj in page.items:
                key = self._watched(obj)
                if key is not None:
                    scanned += 1
                    local.add_live(key[0], key[1], diff.resource_version_of(obj), epoch)
        differing = statehash.mismatching(local, remote)
        if not differing:
            return Outcome(scanned, sum(max(c, 0) for c in remote.counts), 0, epoch)
        if len(differing) > self.max_buckets:
            return FALLBACK
        return self._compare(set(differing), epoch, remote)

    def _compare(
        self, differing: set[int], epoch: int, remote: statehash.Remote
    ) -> Outcome | Literal["fallback"]:
        digest: diff.Digest = {}
        listed: dict[int, tuple[int, int]] = {}
        for b in sorted(differing):
            self._request("bucket")
            items = self.client.state_bucket(b)
            digest.update(diff.load(items, self.problems, self.bad_keys))
            listed[b] = statehash.bucket_hash(items)
        entries = len(digest)
        now_local = {b: [0, 0] for b in differing}
        sent_in: set[int] = set()
        listed_at = times.now()
        list_rv = ""
        scanned = 0
        for page in self._pages():
            observed = times.now()
            list_rv = page.resource_version or list_rv
            for obj in page.items:
                key = self._watched(obj)
                if key is None:
                    continue
                scanned += 1
                b = statehash.bucket_of(*key)
                if b not in differing:
                    continue
                rv = diff.resource_version_of(obj)
                acc = now_local[b]
                acc[0] ^= statehash.item_hash(key[0], key[1], rv, epoch)
                acc[1] += 1
                entry = digest.pop(key, None)
                kind = diff.judge(entry, rv, observed, epoch)
                if kind is None:
                    continue
                full = self.lister.get(*key)
                if full is None:
                    continue  # deleted since the listing: the next run sends its tombstone
                self._differ(kind)
                sent_in.add(b)
                self._add(
                    conversion.from_configmap(
                        full,
                        runtime_id=self.runtime_id,
                        source="poller",
                        observed_at=observed,
                        epoch=epoch,
                    )
                )
        for (ns, name), entry in digest.items():
            tomb_rv = diff.leftover(entry, list_rv, listed_at, epoch)
            if tomb_rv is None:
                continue
            self._differ("deleted")
            sent_in.add(statehash.bucket_of(ns, name))
            self._add(
                conversion.tombstone(
                    runtime_id=self.runtime_id,
                    namespace=ns,
                    name=name,
                    uid=entry.uid,
                    resource_version=tomb_rv,
                    source="poller",
                    observed_at=listed_at,
                    epoch=epoch,
                )
            )
        # a bucket that still differs with nothing to send: the listener holds what the
        # runtime does not show (newer records); the full digest's rules decide
        if any(tuple(now_local[b]) != listed[b] and b not in sent_in for b in differing):
            return FALLBACK
        return Outcome(scanned, entries, len(differing), epoch)
