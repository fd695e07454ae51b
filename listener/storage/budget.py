"""The KCP storage budget: ``tether.storagebudget`` (shared with the injector, which bounds
its reads by what the listener lets a runtime store)."""

from tether.storagebudget import (
                                  ETCD_BYTES_PER_RECORD,
                                  ETCD_QUOTA_BYTES,
                                  GIB,
                                  MIB,
                                  RECORD_BYTES_FLOOR,
                                  RECORDS_SHARE,
                                  RUNTIMES,
                                  records_bytes,
                                  records_per_runtime,
)

__all__ = ["ETCD_BYTES_PER_RECORD", "ETCD_QUOTA_BYTES", "GIB", "MIB", "RECORD_BYTES_FLOOR",
           "RECORDS_SHARE", "RUNTIMES", "records_bytes", "records_per_runtime"]


def unbacked_per_runtime() -> int:
    """The cap of unbacked tombstones' default (tombstones of keys never stored, kept apart
    from the records quota: ``listener.storage.rules``): a tenth of the records quota. At
    every runtime's cap they add a tenth to the records' share of etcd (about 0.4 GiB at
    5,000 runtimes), taken from the KCP's half."""
    return max(1, records_per_runtime() // 10)
