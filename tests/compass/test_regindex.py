"""The run's index of labelled Director registrations (compass.regindex) against the
stand-in over HTTPS: one paginated "label exists" list per tenant and run instead of one
query per runtime; bounded (past the bound: one query per runtime, as before); gone at the
end of the run."""

from __future__ import annotations

import logging
import uuid

import pytest

from compass import metrics, regindex, service
from standins.director import store as store_mod
from testing import compassenv as h


@pytest.fixture
def svc(clean_director: h.Director) -> service.Service:
    s = h.make_settings(clean_director, "unused")
    return service.build(s, None, metrics.Metrics(), logging.getLogger("tether.audit.unit"))  # type: ignore[arg-type]


def ops_since(d: h.Director, mark: int) -> list[str]:
    return [r.operation for r in d.store.requests[mark:]]


def test_label_exists_filter_lists_every_labelled_runtime_page_by_page(
    svc: service.Service, clean_director: h.Director
) -> None:
    d, tenant = clean_director, f"ga-{uuid.uuid4().hex[:6]}"
    seeded = [d.store.seed_provisioned(tenant, f"shoot-{i}") for i in range(5)]
    d.store.register(tenant, {"name": "unlabelled", "labels": {"other": "x"}})
    d.store.seed_provisioned("ga-other-tenant", "shoot-0")
    svc.director._page = 2  # noqa: SLF001 - three pages of two
    mark = len(d.store.requests)
    found = svc.director.list_labelled(tenant, "gardenerClusterName", 100)
    assert found is not None
    assert [r.id for r in found] == [r.id for r in seeded]  # oldest first, none missing
    assert ops_since(d, mark) == ["runtimes"] * 3
    mark = len(d.store.requests)
    assert svc.director.list_labelled(tenant, "gardenerClusterName", 4) is None  # over the bound
    assert ops_since(d, mark) == ["runtimes"]  # known from the first page's totalCount


def test_one_list_per_tenant_and_run_then_per_runtime_queries_outside_a_run(
    svc: service.Service, clean_director: h.Director
) -> None:
    d, tenant = clean_director, f"ga-{uuid.uuid4().hex[:6]}"
    a = d.store.seed_provisioned(tenant, "shoot-a")
    b = d.store.seed_provisioned(tenant, "shoot-b")
    index = regindex.RunIndex(svc.director, direct_first=0)
    index.begin()
    mark = len(d.store.requests)
    assert [r.id for r in index.find(tenant, "shoot-a")] == [a.id]
    assert [r.id for r in index.find(tenant, "shoot-b")] == [b.id]
    assert index.find(tenant, "shoot-new") == []
    assert ops_since(d, mark) == ["runtimes"]  # one list for the three lookups
    # what Tether registers during the run is seen by a later lookup of the run
    mine = svc.director.register(
        tenant,
        {
            "name": "shoot-new",
            "labels": {
                "gardenerClusterName": "shoot-new",
                "director_connection_managed_by": "tether",
            },
        },
    )
    index.note(tenant, mine)
    assert [r.id for r in index.find(tenant, "shoot-new")] == [mine.id]
    index.end()
    # no cache across runs: outside a run, one query per lookup
    c = d.store.seed_provisioned(tenant, "shoot-c")
    mark = len(d.store.requests)
    assert [r.id for r in index.find(tenant, "shoot-c")] == [c.id]
    assert ops_since(d, mark) == ["runtimes"]
    # the next run reads the tenant again and sees what was added since
    index.begin()
    assert [r.id for r in index.find(tenant, "shoot-c")] == [c.id]
    assert [r.id for r in index.find(tenant, "shoot-a")] == [a.id]
    index.end()
    assert index.lists == 2 and index.fallbacks == 0


def test_past_the_bound_a_tenant_is_looked_up_per_runtime_and_said_so(
    svc: service.Service, clean_director: h.Director, caplog: pytest.LogCaptureFixture
) -> None:
    d, tenant = clean_director, f"ga-{uuid.uuid4().hex[:6]}"
    a = d.store.seed_provisioned(tenant, "shoot-a")
    d.store.seed_provisioned(tenant, "shoot-b")
    index = regindex.RunIndex(svc.director, max_held=1, direct_first=0)
    index.begin()
    mark = len(d.store.requests)
    with caplog.at_level(logging.WARNING, logger="compass.regindex"):
        assert [r.id for r in index.find(tenant, "shoot-a")] == [a.id]
        assert len(index.find(tenant, "shoot-b")) == 1
    index.end()
    # the list (stopped at its first page) and then one query per lookup
    assert ops_since(d, mark) == ["runtimes"] * 3
    assert index.fallbacks == 1
    assert sum("one Director query per runtime" in r.getMessage() for r in caplog.records) == 1


def test_a_failed_list_leaves_the_tenant_to_per_runtime_queries_for_the_run(
    svc: service.Service, clean_director: h.Director
) -> None:
    d, tenant = clean_director, f"ga-{uuid.uuid4().hex[:6]}"
    a = d.store.seed_provisioned(tenant, "shoot-a")
    b = d.store.seed_provisioned(tenant, "shoot-b")
    index = regindex.RunIndex(svc.director, direct_first=0)
    index.begin()
    d.store.set_faults(store_mod.Faults(http_status=503, operations=("runtimes",), remaining=1))
    mark = len(d.store.requests)
    assert [r.id for r in index.find(tenant, "shoot-a")] == [a.id]  # the list failed: one query
    assert [r.id for r in index.find(tenant, "shoot-b")] == [b.id]  # not a list again
    index.end()
    assert ops_since(d, mark) == ["runtimes"] * 3
    assert index.fallbacks == 1


def test_a_runs_first_lookups_of_a_tenant_are_single_queries_then_one_list(
    svc: service.Service, clean_director: h.Director
) -> None:
    """One new Kyma CR in a big tenant costs one query, not the tenant's whole list."""
    d, tenant = clean_director, f"ga-{uuid.uuid4().hex[:6]}"
    a = d.store.seed_provisioned(tenant, "shoot-a")
    index = regindex.RunIndex(svc.director, direct_first=2)
    index.begin()
    mark = len(d.store.requests)
    assert [r.id for r in index.find(tenant, "shoot-a")] == [a.id]
    assert index.find(tenant, "shoot-x") == []
    assert index.lists == 0 and ops_since(d, mark) == ["runtimes", "runtimes"]  # two queries
    assert [r.id for r in index.find(tenant, "shoot-a")] == [a.id]
    assert index.find(tenant, "shoot-y") == []
    assert index.lists == 1 and len(ops_since(d, mark)) == 3  # then the list, once
    index.end()
