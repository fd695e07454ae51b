"""The staged rollout kept in the KCP: its record and the last good bundle in one ConfigMap
(``TETHER_ENROLLER_ROLLOUT_CONFIGMAP`` in the enroller's namespace), the bundle each runtime
is given, and its gate evaluated at the end of each full run (decisions in
``enroller.rollout``).

Why a ConfigMap and not a CRD: the record must hold the last good bundle's text (the
rendered manifests, ~15 kB) to roll back to, which is no status field; there is one rollout
per enroller (one bundle per KCP); and the rollout must work on the very upgrade that brings
it, before any new CRD is known to be installed. ``kubectl get cm tether-bundle-rollout -o
jsonpath='{.data.state\\.json}'`` and the admin page show it.

The ConfigMap's data: ``state.json`` (``rollout.State``), ``good-bundle.yaml`` and
``good-image`` (the last good bundle as the enroller was given it), ``phase`` and ``target``
(for a glance). The first enroller that finds none records its bundle as the good one.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from enroller import metrics, render, rollout
from enroller import settings as settings_mod
from tether.base import logs, times
from tether.kube import apitypes, events, gateway, skr_clients

log = logging.getLogger("tether.enroller")


class Chosen(NamedTuple):
    """A bundle a runtime may be given."""

    objects: list[dict[str, Any]]
    image: str | None
    digest: str


class Facts(NamedTuple):
    """What a run learnt of one runtime of the current wave."""

    kyma: str  # its Kyma CR's name
    ready: bool  # enrolled in this run
    failure: str | None  # the enroller's failure reason


class Rollouts:
    def __init__(
        self,
        s: settings_mod.Settings,
        kcp: gateway.Kube,
        skrs: skr_clients.SkrClients,
        bundle_text: str,
        recorder: events.Recorder,
        stats: metrics.Metrics,
        audit: logging.Logger,
        now: Callable[[], datetime.datetime],
    ) -> None:
        self.s, self.kcp, self.skrs, self.recorder, self.stats = s, kcp, skrs, recorder, stats
        self.audit, self.now = audit, now
        self.holding: dict[str, str] = {}  # runtime ID -> digest of the bundle it was enrolled with
        self.since: dict[
            tuple[str, str], datetime.datetime
        ] = {}  # (runtime ID, digest): first seen holding it
        self.text = bundle_text
        self.target = Chosen(
            render.load_bundle(bundle_text), s.image, rollout.identity(bundle_text, s.image)
        )
        self.good: Chosen | None = None
        self.state: rollout.State | None = None
        self.gate = rollout.Gate(
            s.rollout_gate_timeout,
            s.rollout_max_refusals,
            s.rollout_heartbeat,
            s.rollout_max_unhealthy,
        )
        self._cm: dict[str, Any] | None = None
        self.unrecorded = (
            False  # this run holds every runtime at the good bundle: its record not written
        )

    # -- the record ----------------------------------------------------------------------

    def _read(self) -> tuple[rollout.State | None, Chosen | None]:
        self._cm = cm = self.kcp.get_or_none(
            gateway.CONFIGMAPS, self.s.namespace, self.s.rollout_config_map
        )
        data = (cm or {}).get("data") or {}
        good = None
        if "good-bundle.yaml" in data:
            image = data.get("good-image") or None
            try:
                good = Chosen(
                    render.load_bundle(data["good-bundle.yaml"]),
                    image,
                    rollout.identity(data["good-bundle.yaml"], image),
                )
            except render.BundleError as e:
                log.error(
                    "rollout ConfigMap %s: its good bundle does not load: %s",
                    self.s.rollout_config_map,
                    e,
                )
        if "state.json" not in data:
            return None, good
        try:
            return rollout.State.from_json(json.loads(data["state.json"])), good
        except (ValueError, KeyError, TypeError) as e:
            log.error(
                "rollout ConfigMap %s: its state does not parse (%s); a new record is begun",
                self.s.rollout_config_map,
                logs.bounded(e, 200),
            )
            return None, good

    def _write(self, state: rollout.State, good_text: str | None) -> bool:
        data = dict(((self._cm or {}).get("data")) or {})
        data.update(
            {
                "state.json": json.dumps(state.to_json(), sort_keys=True),
                "phase": state.phase,
                "target": state.target,
            }
        )
        if good_text is not None:
            data.update({"good-bundle.yaml": good_text, "good-image": self.s.image or ""})
        meta: dict[str, Any] = {
            "name": self.s.rollout_config_map,
            "namespace": self.s.namespace,
            "labels": {
                "app.kubernetes.io/part-of": "tether",
                "app.kubernetes.io/component": "bundle-rollout",
            },
        }
        try:
            if self._cm is None:
                self._cm = self.kcp.create(
                    gateway.CONFIGMAPS,
                    self.s.namespace,
                    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data},
                )
            else:
                meta["resourceVersion"] = self._cm["metadata"]["resourceVersion"]
                self._cm = self.kcp.replace(
                    gateway.CONFIGMAPS,
                    self.s.namespace,
                    self.s.rollout_config_map,
                    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data},
                )
        except gateway.GatewayError as e:
            log.warning(
                "rollout ConfigMap %s not written (next run): %s",
                self.s.rollout_config_map,
                logs.bounded(e, 200),
            )
            return False
        return True

    def _event(self, reason: str, message: str, *, warning: bool = False) -> None:
        meta = (self._cm or {}).get("metadata") or {}
        self.recorder.emit(
            events.Ref(
                "v1",
                "ConfigMap",
                self.s.namespace,
                self.s.rollout_config_map,
                str(meta.get("uid") or ""),
            ),
            reason,
            message,
            warning=warning,
        )

    # -- a full run ----------------------------------------------------------------------

    def begin(self, runtime_ids: Iterable[str]) -> None:
        """At the start of a full run: the rollout of this enroller's bundle (begun when new)."""
        self.holding, self.unrecorded = {}, False
        if len(self.since) > 100_000:  # bounded: a fleet's worth of two bundles is far less
            self.since.clear()
        try:
            recorded, good = self._read()
        except gateway.GatewayError as e:  # unknown: hold every runtime where it is told last
            log.warning("rollout ConfigMap not readable: %s", logs.bounded(e, 200))
            return
        state = rollout.begin(
            recorded, self.target.digest, runtime_ids, self.s.rollout_waves, self.now()
        )
        keep_good = state.phase == "Complete" and (good is None or good.digest != state.target)
        if state != recorded and not self._write(state, self.text if keep_good else None):
            if (
                recorded is not None and good is not None
            ):  # a new rollout not recorded: nobody gets it yet
                self.good, self.state = (
                    good,
                    dataclasses.replace(recorded, phase="Halted", good=good.digest),
                )
                self.unrecorded = True
            return
        self.good = self.target if keep_good else good
        if recorded is None or recorded.target != state.target:
            self._changed(state, recorded)
        self.state = state
        self._gauges()

    def choose(self, runtime_id: str) -> Chosen:
        """The bundle a runtime is given in this run."""
        state = self.state
        if state is None or rollout.assign(state, runtime_id) == "target":
            return self.target
        if self.good is None or self.good.digest != state.good:  # not kept: cannot hold it back
            return self.target
        return self.good

    def enrolled(self, runtime_id: str, digest: str) -> None:
        """A runtime was enrolled with the bundle ``digest`` in this run."""
        self.holding[runtime_id] = digest
        self.since.setdefault((runtime_id, digest), self.now())

    def current_wave(self) -> tuple[str, ...]:
        s = self.state
        if s is None or s.phase not in ("Progressing", "Halted") or not s.waves:
            return ()
        return s.waves[s.wave]

    def end(self, facts: Mapping[str, Facts], beats: Mapping[str, datetime.datetime]) -> None:
        """At the end of a full run: the current wave's gate (``facts`` of its runtimes, their
        heartbeats), or a halted rollout's restoration (the wave's runtimes enrolled with the
        good bundle in this run)."""
        state = self.state
        if state is None or self.unrecorded:
            return
        if state.phase == "Progressing":
            health = self._health(state, facts, beats)
            v = rollout.gate(state.waves[state.wave], health, state.started, self.now(), self.gate)
            new = rollout.advance(state, v, self.now())
        else:
            new = rollout.restored(state, [r for r, d in self.holding.items() if d == state.good])
        if new == state:
            return
        good_text = self.text if new.phase == "Complete" else None
        if not self._write(new, good_text):
            return
        if good_text is not None:
            self.good = self.target
        self.state = new
        self._changed(new, state)
        self._gauges()

    def _health(
        self,
        state: rollout.State,
        facts: Mapping[str, Facts],
        beats: Mapping[str, datetime.datetime],
    ) -> dict[str, rollout.Health]:
        try:
            refused = refusals(
                self.kcp.list_items(apitypes.RUNTIME_DELIVERIES, self.s.kcp_namespace),
                state.started,
            )
        except gateway.NotFound:  # no RuntimeDelivery CRD: no listener has recorded any
            refused = {}
        except gateway.GatewayError as e:  # unknown: no runtime passes on them
            log.warning(
                "RuntimeDeliveries not readable for the rollout's gate: %s", logs.bounded(e, 200)
            )
            refused = {}
            facts = {
                r: f._replace(ready=False, failure=f.failure or "RuntimeDeliveriesUnreadable")
                for r, f in facts.items()
            }
        out = {}
        for rid, f in facts.items():
            out[rid] = rollout.Health(
                applied=f.ready and self.holding.get(rid) == state.target,
                failure=f.failure,
                serving=self._rolled_out(f.kyma) if f.ready else None,
                beat=beats.get(rid),
                refusals=refused.get(rid, 0),
                since=self.since.get((rid, state.target)),
            )
        return out

    def _rolled_out(self, kyma_name: str) -> bool | None:
        """The runtime's webhook Deployment rolled out (None: not readable)."""
        try:
            dep = self.skrs.get(kyma_name).get_or_none(
                apitypes.DEPLOYMENTS, render.NAMESPACE, "tether-webhook", timeout=self.s.skr_timeout
            )
        except (gateway.GatewayError, skr_clients.SkrClientError) as e:
            log.info(
                "rollout gate: the webhook Deployment of %s not readable: %s",
                kyma_name,
                logs.bounded(e, 200),
            )
            return None
        return dep is not None and rolled_out(dep)

    def _changed(self, new: rollout.State, old: rollout.State | None) -> None:
        wave = f"wave {new.wave + 1} of {len(new.waves)}"
        if new.phase == "Progressing":
            n = len(new.waves[new.wave])
            self._event("RolloutWaveStarted", f"bundle {new.target}: {wave} ({n} runtime(s)) begun")
            log.info("bundle rollout %s: %s begun (%d runtime(s))", new.target, wave, n)
        elif new.phase == "Halted":
            self.stats.rollout_halts.inc()
            self._event(
                "RolloutHalted",
                f"bundle {new.target}: {new.reason}; every runtime gets bundle {new.good} again",
                warning=True,
            )
            log.warning("bundle rollout %s halted: %s", new.target, new.reason)
            logs.audit(
                self.audit,
                "bundle_rollout_halted",
                bundle=new.target,
                good=new.good or "",
                wave=new.wave + 1,
                reason=logs.bounded(new.reason, 300),
            )
        elif new.phase == "RolledBack":
            self._event(
                "RolloutRolledBack",
                f"bundle {new.target}: {wave}'s runtimes hold bundle {new.good} again",
                warning=True,
            )
            log.warning("bundle rollout %s rolled back: %s", new.target, new.reason)
        elif old is not None and old.phase == "Progressing":
            self._event("RolloutComplete", f"bundle {new.target}: {new.reason}")
            log.info("bundle rollout %s complete: %s", new.target, new.reason)

    def _gauges(self) -> None:
        s = self.state
        for p in rollout.PHASES:
            self.stats.rollout_phase.labels(p).set(1 if s is not None and s.phase == p else 0)
        self.stats.rollout_wave.set(0 if s is None or not s.waves else s.wave + 1)


def rolled_out(dep: Mapping[str, Any]) -> bool:
    """A Deployment's rollout is complete (``kubectl rollout status``'s test): its controller
    saw this generation, every replica runs the current template, no old one is left, and all
    are available."""
    meta, spec, st = dep.get("metadata") or {}, dep.get("spec") or {}, dep.get("status") or {}
    want = int(spec.get("replicas", 1))
    updated = int(st.get("updatedReplicas") or 0)
    return (
        int(st.get("observedGeneration") or 0) >= int(meta.get("generation") or 0)
        and updated >= want
        and int(st.get("replicas") or 0) <= updated
        and int(st.get("availableReplicas") or 0) >= updated
    )


def refusals(deliveries: Iterable[Mapping[str, Any]], since: datetime.datetime) -> dict[str, int]:
    """Refusals by runtime ID the listener recorded (RuntimeDelivery ``status.minutes``) in the
    minutes that began at or after the minute ``since`` falls in."""
    floor = since.replace(second=0, microsecond=0)
    out: dict[str, int] = {}
    for d in deliveries:
        rid = str(((d.get("spec") or {}).get("runtimeId")) or "")
        for m in ((d.get("status") or {}).get("minutes")) or []:
            start = times.parse_time(m.get("start"))
            if rid and start is not None and start >= floor:
                out[rid] = out.get(rid, 0) + sum(int(v) for v in (m.get("refused") or {}).values())
    return out
