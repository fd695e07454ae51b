"""The canary's domain object: ``Canary.run`` is one probe (the scheduled job, one at a time).

1. **Where** (KCP): the Watch ``TETHER_CANARY_WATCH`` read by name (its storage namespace,
   its ``inject`` target when it has one) and the probe runtime's Kyma CR, label-selected by
   its runtime ID (``kyma.list_by_runtime_id``). Unreadable: every stage ``read_failed``,
   nothing written.
2. **Write** (the runtime): server-side apply of the canary ConfigMap with a fresh nonce
   under ``TETHER_CANARY_KEY``, through the runtime's bounded client
   (``skr_clients.SkrClients``: the kubeconfig Secret read by name, parsed by the
   allow-list, every call with a deadline and a size cap). No client or a failed apply:
   every stage ``write_failed``.
3. **Wait** (KCP), every ``TETHER_CANARY_POLL_SECONDS`` until ``TETHER_CANARY_TIMEOUT_SECONDS``
   after the write: ``stored``: the Watch's records of this runtime and namespace
   (label-selected in the storage namespace, at most ``MAX_PAGES`` pages) hold the
   ConfigMap's live record with the nonce; ``injected``: the target (the object of
   ``inject.resource`` in ``inject.namespace`` labelled with the runtime ID; more than one:
   not seen) has the nonce at ``inject.field``.

Each stage's result goes to the metrics (``probe`` decides it); a failure is a counted
outcome and one log line (the error's class and a bounded message: never a kubeconfig,
a token or a value), and the next probe runs on schedule. Losing the Lease (``active``
false) ends a probe's waiting without counting it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from canary import probe
from canary.metrics import Metrics
from canary.settings import Settings
from tether.base import logs
from tether.kube import apitypes, gateway, kyma, skr_clients
from tether.wire import watches, watchuse

log = logging.getLogger("canary")
FIELD_MANAGER = "tether-canary"
# the label of a record that names its object's namespace in the runtime (docs/api.md)
RECORD_NAMESPACE_LABEL = "tether.kyma-project.io/namespace"
PAGE = 100  # records per list page
MAX_PAGES = 10  # pages read per look for the record (keep the canary in a namespace of its own)


class Report(NamedTuple):
    """What one run returns (``elected.record_runs`` reads ``ok`` and ``skipped``)."""

    ok: bool
    skipped: bool
    results: tuple[probe.Result, ...]


class Where(NamedTuple):
    kyma: str  # the Kyma CR's name (its kubeconfig Secret's)
    records_namespace: str
    inject: watchuse.Inject | None


class Canary:
    def __init__(
        self,
        kcp: gateway.Kube,
        skrs: skr_clients.SkrClients,
        s: Settings,
        meters: Metrics,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.kcp, self.skrs, self.s, self.meters = kcp, skrs, s, meters
        self.clock, self.wall = clock, wall
        self.active: Callable[[], bool] = lambda: True  # elected.run_elected sets it
        self.stopped = threading.Event()
        self._logged: str = ""  # the last problem logged, so a lasting one is logged once
        meters.enabled.set(1 if s.enabled else 0)

    # -- one probe -------------------------------------------------------------------------

    def run(self) -> Report:
        if not self.s.enabled:
            return Report(True, True, ())
        stages: list[probe.Stage] = ["stored"]
        try:
            where = self._where()
        except (gateway.GatewayError, ValueError) as e:
            return self._count(probe.read_failed(stages), f"Watch or Kyma CR not read: {_why(e)}")
        if where.inject is not None and self.s.injected:
            stages.append("injected")
        value = probe.nonce()
        written_at = self.clock()
        try:
            self._write(where.kyma, value)
        except (gateway.GatewayError, skr_clients.SkrClientError) as e:
            self.skrs.forget(where.kyma)  # a rotated or repaired kubeconfig is read again
            return self._count(
                probe.write_failed(stages), f"canary ConfigMap not written: {_why(e)}"
            )
        p = probe.start(value, written_at, self.s.timeout, stages)
        while not p.finished:
            if not self.active() or self.stopped.is_set():
                return Report(True, True, ())  # not leading any more: nothing measured
            for stage in p.pending:
                p = probe.observe(p, stage, self._seen(stage, where, value), self.clock())
            p = probe.expire(p, self.clock())
            if not p.finished:
                self.stopped.wait(probe.next_read(p, self.clock(), self.s.poll))
        return self._count(p.results, "")

    def _count(self, results: tuple[probe.Result, ...], problem: str) -> Report:
        now = self.wall()
        for r in results:
            self.meters.probes.labels(r.stage, r.outcome).inc()
            if r.outcome == "ok" and r.seconds is not None:
                self.meters.seconds.labels(r.stage).observe(r.seconds)
                self.meters.last_success.labels(r.stage).set(now)
        ok = all(r.outcome == "ok" for r in results)
        text = problem or ", ".join(
            f"{r.stage} {r.outcome}" + (f" in {r.seconds:.2f}s" if r.seconds is not None else "")
            for r in results
        )
        if ok:
            log.info("probe of runtime %s: %s", self.s.runtime, text)
            self._logged = ""
        elif text != self._logged:
            log.warning("probe of runtime %s: %s", self.s.runtime, text)
            self._logged = text
        return Report(ok, False, results)

    # -- the reads and the write -------------------------------------------------------------

    def _where(self) -> Where:
        t = self.s.kcp_timeout
        w = watches.parse(
            self.kcp.get(apitypes.WATCHES, self.s.kcp_namespace, self.s.watch, timeout=t)
        )
        views = [
            v
            for v in kyma.list_by_runtime_id(
                self.kcp, self.s.kcp_namespace, self.s.runtime, timeout=t
            )
            if not v.deleting
        ]
        if len(views) != 1:
            raise ValueError(f"{len(views)} Kyma CRs with the runtime ID (one expected)")
        return Where(views[0].name, w.storage_namespace or self.s.kcp_namespace, w.inject)

    def _write(self, kyma_name: str, value: str) -> None:
        key, label_value = self.s.label
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": self.s.name,
                "namespace": self.s.namespace,
                "labels": {key: label_value, apitypes.MANAGED_BY_LABEL: FIELD_MANAGER},
            },
            "data": {self.s.key: value},
        }
        self.skrs.get(kyma_name).apply(
            apitypes.CONFIGMAPS,
            self.s.namespace,
            self.s.name,
            body,
            field_manager=FIELD_MANAGER,
            timeout=self.s.skr_timeout,
        )

    def _seen(self, stage: probe.Stage, where: Where, value: str) -> bool | None:
        """Whether the stage shows ``value`` now; None: the read failed (logged at debug,
        the outcome says it)."""
        try:
            found = self._stored(where) if stage == "stored" else self._injected(where)
        except gateway.GatewayError as e:
            log.debug("%s not read: %s", stage, _why(e))
            return None
        return found == value

    def _stored(self, where: Where) -> str | None:
        selector = ",".join(
            (
                f"{watches.WATCH_LABEL}={self.s.watch}",
                f"{apitypes.RUNTIME_ID_LABEL}={self.s.runtime}",
                f"{RECORD_NAMESPACE_LABEL}={self.s.namespace}",
            )
        )
        token = ""
        for _ in range(MAX_PAGES):
            page = self.kcp.list(
                apitypes.RUNTIME_CONFIGMAPS,
                where.records_namespace,
                label_selector=selector,
                limit=PAGE,
                continue_token=token,
                timeout=self.s.kcp_timeout,
            )
            items: Any = page.get("items") or []
            found = probe.record_nonce(items, self.s.namespace, self.s.name, self.s.key)
            if found is not None:
                return found
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                break
        return None

    def _injected(self, where: Where) -> str | None:
        inject = where.inject
        assert inject is not None
        page = self.kcp.list(
            inject.resource,
            inject.namespace,
            label_selector=f"{apitypes.RUNTIME_ID_LABEL}={self.s.runtime}",
            limit=2,
            timeout=self.s.kcp_timeout,
        )
        items = page.get("items") or []
        if len(items) != 1 or not isinstance(items[0], dict):
            return None  # no target (or two): the injector injects nothing either
        return probe.target_nonce(items[0], inject.field, self.s.key)


def _why(e: BaseException) -> str:
    return f"{type(e).__name__}: {logs.bounded(e, 200)}"
