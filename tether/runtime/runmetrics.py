"""The metrics every leader-elected part that runs over all Kyma CRs (compass, the enroller)
declares alike: its Kyma CRs by state, the buckets of a run's duration, its leader gauge
(``tether.runtime.elected`` sets it while the part holds its Lease). Each part names its own series
(``tether_<part>_...``, written out where it declares them); help texts and buckets are
the same everywhere."""

from __future__ import annotations

import prometheus_client as prom

RUN_SECONDS_BUCKETS = (0.1, 0.5, 1, 5, 15, 60, 300, 900)


def runtimes(name: str, state: str, registry: prom.CollectorRegistry) -> prom.Gauge:
    """Kyma CRs by ``state`` (what the part tracks of each: its mapping, its enrollment)."""
    return prom.Gauge(
        name, f"Kyma CRs by {state} state at the end of the last run", ["state"], registry=registry
    )


def leader(name: str, registry: prom.CollectorRegistry) -> prom.Gauge:
    return prom.Gauge(name, "1 while this process holds the Lease", registry=registry)
