"""The KCP storage budget the listener's per-runtime quota defaults are derived from
(docs/performance.md, "KCP storage"; measured by bench/etcd_size.py), and what a runtime may
therefore store: the listener enforces it (``listener.settings.Storage``), the injector bounds
its reads by it (``injector.settings``: it reads the listener's quota variables,
``TETHER_LISTENER_QUOTA_RECORDS`` and ``_BYTES``, with these defaults).

The KCP's etcd holds the whole fleet's records. Its database should stay under etcd's
recommended maximum quota, 8 GiB, and Tether's records may take half of it; the rest is the
KCP's own objects (Kyma CRs, modules' CRs, Leases, Secrets). Spread over the fleet one KCP is
meant to carry (lifecycle-manager's target, 5,000 runtimes), at what a record costs in etcd
(about 4.1 KiB, whatever its send mode: bench/etcd_size.py, 10,000 records), that is 200
records per runtime. A runtime may hold more, but then the operator chose it (the quota
settings), knowing what the fleet then takes.

The bytes quota cannot follow the same share: a record of one maximal ConfigMap (1 MiB of
binaryData, ~1.4 MiB of JSON) must always fit, so its floor, 2 MiB, is its default. The fleet
at every runtime's records quota is within the budget; a fleet of runtimes that all store
maximal values is not, and the KCP etcd alert (TetherKcpEtcdNearQuota) is the guard."""

from __future__ import annotations

MIB = 1024 * 1024
GIB = 1024 * MIB
ETCD_QUOTA_BYTES = 8 * GIB  # etcd's recommended maximum --quota-backend-bytes
RECORDS_SHARE = 0.5  # of it for Tether's records
RUNTIMES = 5_000  # runtimes one KCP carries (lifecycle-manager's target)
ETCD_BYTES_PER_RECORD = 4_200  # bench/etcd_size.py: 4,112-4,119 B for full, digest, metadata
RECORD_BYTES_FLOOR = 2 * MIB  # one maximal ConfigMap's record must fit


def records_bytes() -> int:
    """etcd bytes the fleet's records may take."""
    return int(ETCD_QUOTA_BYTES * RECORDS_SHARE)


def records_per_runtime() -> int:
    """The records quota's default: the budget's share of one runtime, in whole hundreds."""
    return max(100, records_bytes() // RUNTIMES // ETCD_BYTES_PER_RECORD // 100 * 100)


# the keys of one record's map (data, binaryData): the record schema's maxProperties
# (tether/wire/schemas/change-record.v2.json), enforced while the listener parses a body
MAX_KEYS_PER_RECORD = 10_000


def unbacked_per_runtime() -> int:
    """The cap of unbacked tombstones' default (tombstones of keys never stored, kept apart
    from the records quota: ``listener.storage.rules``): a tenth of the records quota. At
    every runtime's cap they add a tenth to the records' share of etcd (about 0.4 GiB at
    5,000 runtimes), taken from the KCP's half."""
    return max(1, records_per_runtime() // 10)
