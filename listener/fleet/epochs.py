"""When a runtime's history went back, and so a new epoch starts (pure decisions).

resourceVersions order one runtime's changes only while its history goes forward. An etcd
restored from a backup, or a cluster rebuilt under the same runtime ID, writes
resourceVersions again that the KCP holds already for other (lost) changes; compared as
integers, every later change would be refused as stale. So records carry an epoch
(``tether.wire.changes.compare``: the higher epoch wins, resourceVersions are compared only
within one), and the KCP, never the runtime, starts a new one: a restored runtime's own
state went back too, and it could not remember a counter of its own.

What the listener keeps per runtime (annotations of its heartbeat Lease, written with the
Lease's resourceVersion so two replicas cannot both start the next epoch;
``listener.fleet.heartbeat``): the current ``epoch`` (absent: 0) and the runtime's ``identity``
(the UID of its ``kube-system`` Namespace: a rebuilt cluster has a new one).

What the poller reports with the first page of ``GET .../state`` (``Report``):

* ``identity``: its cluster's identity. None recorded yet: it is recorded (no new epoch);
  a different one: a new epoch (the cluster was rebuilt).
* ``epoch`` and ``collectionResourceVersion``, only when it found its history went back:
  having read the state digest of that epoch (every record the KCP then held of it), it
  listed its ConfigMaps at a collection resourceVersion below the highest resourceVersion
  of those records. A runtime whose history goes forward never lists below a
  resourceVersion it has written before; so this proves records from a lost history. The
  listener checks the claim against its own digest (``high_water``: the epoch's highest
  stored resourceVersion only grows, so a true claim still holds) and starts the next epoch
  if ``epoch`` is still the current one (a claim about an older epoch was answered already).

The comparison needs the listing to come *after* the digest it is compared with: a
listing made before could be overtaken by a record the webhook stores meanwhile, with a
resourceVersion above the listing's, and start an epoch for nothing. And it is against the
records the KCP holds, not against earlier listings: only records above the restored
resourceVersion can be ordered wrongly; a restore that lost no watched change needs no new
epoch (and costs no resend).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal, NamedTuple

from tether.base import numbers
from tether.wire import changes

IDENTITY_MAX = 128  # a UID (36 characters); room for other identities
Reason = Literal["identity-recorded", "identity-changed", "history-went-back"]


class State(NamedTuple):
    """What the KCP holds of a runtime's epoch (its heartbeat Lease)."""

    epoch: int
    identity: str
    lease_version: str = ""  # the Lease's resourceVersion ("": no Lease)


class Report(NamedTuple):
    """What a poller reported with the first page of a state listing."""

    identity: str = ""
    epoch: int | None = None  # with collection_rv: the claim that history went back
    collection_rv: int | None = None

    @property
    def empty(self) -> bool:
        return not self.identity and self.epoch is None


class Decision(NamedTuple):
    """A write to make: the new state's epoch and identity, and why."""

    epoch: int
    identity: str
    reason: Reason


def report_of(args: Mapping[str, str]) -> Report | str:
    """The report in a state request's query (``identity``, ``epoch``,
    ``collectionResourceVersion``), or the problem with it (for a 400)."""
    identity = args.get("identity", "")
    if len(identity) > IDENTITY_MAX or not all("!" <= c <= "~" for c in identity):
        return f"identity: at most {IDENTITY_MAX} printable ASCII characters, no spaces"
    raw_epoch, raw_rv = args.get("epoch"), args.get("collectionResourceVersion")
    if (raw_epoch is None) != (raw_rv is None):
        return "epoch and collectionResourceVersion: give both or neither"
    if raw_epoch is None or raw_rv is None:
        return Report(identity)
    epoch = numbers.ascii_int(raw_epoch, 16)
    if epoch is None or epoch > changes.MAX_EPOCH:
        return f"epoch: an integer from 0 to {changes.MAX_EPOCH}"
    rv = numbers.ascii_int(raw_rv, 64)
    if rv is None:
        return "collectionResourceVersion: a resourceVersion of ASCII digits"
    return Report(identity, epoch, rv)


def high_water(items: Iterable[changes.DigestItem], epoch: int) -> int | None:
    """The highest resourceVersion (as an integer) of the stored records of ``epoch``."""
    return changes.high_water(
        ((i.get("resourceVersion"), changes.epoch_of(i.get("epoch"))) for i in items), epoch
    )


def decide(state: State, report: Report, mark: int | None) -> Decision | None:
    """The write ``report`` calls for, given the runtime's ``state`` and the highest
    resourceVersion ``mark`` of its stored records of ``state.epoch``; None: no write.
    A new epoch keeps the identity (or records the reported one)."""
    identity = report.identity or state.identity
    if report.identity and state.identity and report.identity != state.identity:
        return Decision(state.epoch + 1, report.identity, "identity-changed")
    if (
        report.epoch == state.epoch
        and report.collection_rv is not None
        and changes.went_back(str(report.collection_rv), mark)
    ):
        return Decision(state.epoch + 1, identity, "history-went-back")
    if report.identity and not state.identity:
        return Decision(state.epoch, report.identity, "identity-recorded")
    return None
