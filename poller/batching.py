"""What every pass of one run shares: its counts, its pacer, its batch buffer and how a
listing's failure ends or restarts the run.

A run is one pass over the environment's ConfigMaps (``poller.run``) or one pass per Watch
(``poller.watchrun``); either way the run's ``RunState`` (one ``pacing.Pacer``: the rate and
burst are the run's, not each pass's) and its ``Stop``/``Restart`` rules are these.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator

from poller import metrics, pacing, scan
from tether.runtime import sender
from tether.wire import changes, listenerapi

log = logging.getLogger(__name__)


class Stop(Exception):
    """The run ends with ``outcome``; ``status``: the listener's HTTP status when it ended it."""

    def __init__(
        self, outcome: str, detail: str = "", retry_after: float | None = None, status: int = 0
    ) -> None:
        super().__init__(f"{outcome}: {detail}")
        self.outcome, self.detail, self.retry_after = outcome, detail, retry_after
        self.status = status


def by_watches(outcome: sender.Outcome) -> bool:
    """A 403 of the listener's check of records against the Watches (a record its Watch,
    as the KCP holds it now, does not admit: this runtime's Watch list is behind): the
    record is refused like an invalid one, the run goes on. Any other 403 (the runtime
    itself refused) stops the run."""
    return outcome.status == 403 and outcome.error == listenerapi.WATCH_REFUSAL


class Restart(Exception):
    """The listing expired (410 Gone): the run starts again from the digest."""


class WentBack(Exception):
    """The listing came below the digest's records of its epoch: claim it, run again."""

    def __init__(self, epoch: int, collection_rv: str, mark: int) -> None:
        super().__init__(f"epoch {epoch}: listed at {collection_rv}, records up to {mark}")
        self.epoch, self.collection_rv, self.mark = epoch, collection_rv, mark


def went_back(epoch: int, list_rv: str, mark: int, report: listenerapi.EpochReport) -> None:
    """The listing came below the records of the digest's epoch: claim a new epoch
    (``WentBack``), or, when this run claimed it already, compare as before."""
    if report.epoch is None:
        raise WentBack(epoch, list_rv, mark)
    if report.epoch == epoch:  # claimed, yet no new epoch
        log.warning(
            "listed at %s below records of epoch %d up to %d, and the "
            "listener started no new epoch",
            list_rv,
            epoch,
            mark,
        )


class RunState:
    def __init__(self, pacer: pacing.Pacer) -> None:
        self.pacer = pacer
        self.scanned = 0
        self.digest_entries = 0
        self.sent = 0
        self.digest_seconds = 0.0
        self.epoch: int | None = None
        self.differences = dict.fromkeys(metrics.DIFF_TYPES, 0)

    def count(self, kind: str) -> None:
        self.differences[kind] += 1


Send = Callable[[list[changes.ChangeRecord], RunState], None]


class Buffer:
    """Records waiting for a batch: at most ``batch_items`` and about ``batch_bytes``."""

    def __init__(
        self,
        send: Send,
        batch_items: int,
        batch_bytes: int,
        state: RunState,
        keep_going: Callable[[], bool],
    ) -> None:
        self._send = send
        self._items, self._max_bytes = batch_items, batch_bytes
        self._state = state
        self._keep_going = keep_going
        self._records: list[changes.ChangeRecord] = []
        self._bytes = 0

    def add(self, record: changes.ChangeRecord) -> None:
        self._records.append(record)
        self._bytes += sender.record_size(record)
        if len(self._records) >= self._items or self._bytes >= self._max_bytes:
            self.flush()

    def flush(self) -> None:
        if not self._records:
            return
        if not self._keep_going():
            raise Stop("aborted", "leadership lost")
        records, self._records, self._bytes = self._records, [], 0
        for chunk in sender.split_batches(
            records, max_items=self._items, max_bytes=self._max_bytes
        ):
            self._send(chunk, self._state)


@contextlib.contextmanager
def listing(buffer: Buffer) -> Iterator[None]:
    """Around a listing of the runtime: an expired one (410 Gone) restarts the run, a failed
    one stops it; either way what the buffer holds is sent first."""
    try:
        yield
    except scan.Gone:
        buffer.flush()
        raise Restart() from None
    except scan.ListError as e:
        buffer.flush()
        raise Stop("apiserver-failed", str(e)) from None


def stop_for(outcome: sender.Outcome, call: str) -> Stop:
    detail = f"{call}: {outcome.reason} {outcome.error}".strip()
    if outcome.verdict == "permanent":
        return Stop("listener-refused", detail, status=outcome.status)
    return Stop("listener-failed", detail, outcome.retry_after, outcome.status)
