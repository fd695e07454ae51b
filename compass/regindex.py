"""The tenant's labelled Director registrations, read once per run (issue 27).

Before registering, ``adoption.lookup`` looks for a registration of the Kyma CR's shoot.
Instead of one Director query per runtime, a run reads, per tenant, lazily at the first
Kyma CR that needs a lookup, every runtime of the tenant that carries the
``gardenerClusterName`` label (a ``LabelFilter`` with a ``key`` and no ``query``: the
label exists), page by page, and indexes them by shoot name.

A run's first ``direct_first`` lookups of a tenant (default ``DIRECT_FIRST``) are single
queries all the same: a run that adopts one new Kyma CR in a tenant of 5,000 runtimes costs
one query, not the ~50 pages of its list; a run with many lookups (a cold start, a
migration) lists once after them (a few requests more than the bare list, ~2.0 per runtime).

Bounded: at most ``max_held`` runtimes over all tenants of a run. A tenant whose runtimes
do not fit (its ``totalCount`` says so on the first page) is not indexed: its lookups are
one query per runtime as before, and a log line says so (once per tenant and run). So
are those of a tenant whose list failed (a Director error): a flaky Director costs each
lookup one request, as before, not a list again.

The index lives for one run only (``begin``/``end``, called by the run): outside a run,
or after a run, every lookup is a Director query; it is never a cache across runs. What
Tether writes during the run (a registration, labels added on adoption) is ``note``d.
"""

from __future__ import annotations

import logging
import threading

from compass import director as director_mod
from compass import errors, model, queries

log = logging.getLogger(__name__)
MAX_HELD = 20_000  # runtimes held per run, over all tenants (~1 KB each)
DIRECT_FIRST = 4  # lookups per tenant and run made as single queries before the list


class _Tenant:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.loaded = False
        self.asked = 0  # lookups in this run
        self.by_shoot: dict[str, list[queries.Runtime]] | None = None  # None: over the bound


class RunIndex:
    def __init__(
        self,
        director: director_mod.DirectorClient,
        *,
        max_held: int = MAX_HELD,
        direct_first: int = DIRECT_FIRST,
    ) -> None:
        self.director = director
        self.max_held = max_held
        self.direct_first = direct_first
        self._lock = threading.Lock()
        self._open = False
        self._tenants: dict[str, _Tenant] = {}
        self._held = 0
        self.lists = 0  # tenants listed, over the process's life (tests)
        self.fallbacks = 0  # tenants over the bound, over the process's life (tests)

    def begin(self) -> None:
        with self._lock:
            self._open, self._tenants, self._held = True, {}, 0

    def end(self) -> None:
        with self._lock:
            self._open, self._tenants, self._held = False, {}, 0

    def find(self, tenant: str, shoot: str) -> list[queries.Runtime]:
        """The tenant's runtimes labelled ``gardenerClusterName`` = ``shoot``."""
        index = self._index(tenant)
        if index is None:
            return self.director.find_registrations(tenant, shoot)
        return list(index.get(shoot, ()))

    def note(self, tenant: str, rt: queries.Runtime) -> None:
        """A runtime Tether registered or labelled during the run (replaces the held one)."""
        with self._lock:
            t = self._tenants.get(tenant) if self._open else None
        if t is None:
            return
        with t.lock:
            if t.by_shoot is None:
                return
            for runtimes in t.by_shoot.values():
                runtimes[:] = [r for r in runtimes if r.id != rt.id]
            shoot = rt.labels.get(model.SHOOT_LABEL)
            if isinstance(shoot, str) and shoot:
                t.by_shoot.setdefault(shoot, []).append(rt)

    def _index(self, tenant: str) -> dict[str, list[queries.Runtime]] | None:
        with self._lock:
            if not self._open:
                return None
            t = self._tenants.setdefault(tenant, _Tenant())
            t.asked += 1
            if t.asked <= self.direct_first and not t.loaded:
                return None
        with t.lock:
            if not t.loaded:
                self._load(tenant, t)
            return t.by_shoot

    def _load(self, tenant: str, t: _Tenant) -> None:
        with self._lock:
            room = self.max_held - self._held
        t.loaded = True
        self.lists += 1
        try:
            found = self.director.list_labelled(tenant, model.SHOOT_LABEL, room)
        except errors.DirectorError as e:
            self.fallbacks += 1
            log.warning(
                "listing a tenant's labelled Director runtimes failed (%s): its lookups "
                "are one Director query per runtime in this run",
                e.kind,
            )
            return
        if found is None:
            self.fallbacks += 1
            log.warning(
                "more labelled Director runtimes in a tenant than the %d a run holds: "
                "its lookups are one Director query per runtime in this run",
                self.max_held,
            )
            return
        with self._lock:
            self._held += len(found)
        by_shoot: dict[str, list[queries.Runtime]] = {}
        for rt in found:
            shoot = rt.labels.get(model.SHOOT_LABEL)
            if isinstance(shoot, str) and shoot:
                by_shoot.setdefault(shoot, []).append(rt)
        t.by_shoot = by_shoot
