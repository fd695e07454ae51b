"""Wiring: settings -> Director client, reconciler, job, scheduler. Used by the entry
point, the tests and the benchmark (so they run exactly what production runs)."""

from __future__ import annotations

import dataclasses
import datetime
import logging
import socket

import requests
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from compass import breaker as breaker_mod
from compass import decide, event_sender, lease_notes, legacy, metrics
from compass import director as director_mod
from compass import job as job_mod
from compass import mappings as mappings_mod
from compass import oauth as oauth_mod
from compass import reconcile as reconcile_mod
from compass import settings as settings_mod
from tether.kube import events, gateway, skr_clients
from tether.runtime import elected


@dataclasses.dataclass
class Service:
    settings: settings_mod.Settings
    metrics: metrics.Metrics
    director: director_mod.DirectorClient
    tokens: oauth_mod.TokenSource
    skr: skr_clients.SkrClients
    kcp: mappings_mod.Kcp
    reconciler: reconcile_mod.Reconciler
    job: job_mod.Job
    session: requests.Session
    notes: lease_notes.LeaseNotes  # breaker and Director errors for the Lease (attach the elector)
    recorder: event_sender.Background

    def close(self) -> None:
        self.job.close()
        self.recorder.close()
        self.skr.close()
        self.session.close()


def build(
    s: settings_mod.Settings, kcp_api: gateway.Kube, stats: metrics.Metrics, audit: logging.Logger
) -> Service:
    session = requests.Session()
    session.trust_env = False  # no proxy/CA settings from the environment: verify as configured
    adapter = requests.adapters.HTTPAdapter(pool_connections=2, pool_maxsize=s.concurrency + 2)
    session.mount("https://", adapter)
    verify: str | bool = s.director_ca_file or True
    tokens = oauth_mod.TokenSource(
        session,
        s.token_url,
        s.client_id,
        s.client_secret,
        verify=verify,
        timeout=s.director_timeout,
    )
    recorder = event_sender.Background(kcp_api, "tether-compass", socket.gethostname())
    notes = lease_notes.LeaseNotes(
        recorder, events.Ref("coordination.k8s.io/v1", "Lease", s.lease_namespace, s.lease_name)
    )

    def breaker_changed(st: breaker_mod.State) -> None:
        stats.circuit.set(breaker_mod.STATE_VALUE[st])
        notes.breaker_changed(st)

    br = breaker_mod.CircuitBreaker(
        s.breaker_threshold,
        s.breaker_open_seconds,
        s.breaker_max_open_seconds,
        on_change=breaker_changed,
    )
    director = director_mod.DirectorClient(
        graphql_url=s.director_url,
        tokens=tokens,
        session=session,
        verify=verify,
        timeout=s.director_timeout,
        breaker=br,
        stats=stats,
        on_error=notes.director_error,
    )
    skr = skr_clients.SkrClients(
        kcp_api, s.namespace, dataclasses.replace(s.runtimes, timeout=s.skr_timeout)
    )
    kcp = mappings_mod.Kcp(kcp_api, s.namespace)
    tuning = reconcile_mod.Tuning(
        policy=decide.Policy(
            managed_by=s.managed_by,
            only_app_connector=s.only_app_connector,
            mode=s.mode,
            token_lifetime=s.token_lifetime,
        ),
        secret_namespace=s.secret_namespace,
        secret_name=s.secret_name,
        skr_timeout=s.skr_timeout,
        legacy_secret_namespaces=s.legacy_secret_namespaces,
        backoff_base=s.backoff_base,
        backoff_cap=s.backoff_cap,
    )
    rec = reconcile_mod.Reconciler(tuning, kcp, director, skr, stats, audit, recorder=recorder)
    if s.read_compass_manager:  # compass-manager's mappings as one more source (compass.legacy)
        source = legacy.Source(kcp_api, s.namespace, max_age=s.interval / 2)
        rec.known_runtime_id, rec.known_holder = source, source.holder
    job = job_mod.Job(
        rec,
        kcp,
        skr,
        stats,
        concurrency=s.concurrency,
        shard=(s.shard_index, s.shard_count),
        after_run=notes.flush,
        before_end=recorder.drain,
    )
    return Service(s, stats, director, tokens, skr, kcp, rec, job, session, notes, recorder)


def jobs(svc: Service) -> list[elected.Job]:
    """The interval run (the first at once) and the cron full resync."""
    s = svc.settings
    return [
        elected.Job(
            "interval",
            svc.job.run,
            IntervalTrigger(seconds=s.interval),
            kwargs={"full": False},
            at_once=True,
        ),
        elected.Job(
            "resync",
            svc.job.run,
            CronTrigger.from_crontab(s.resync_cron, timezone=datetime.UTC),
            kwargs={"full": True},
        ),
    ]


def scheduler(svc: Service) -> BackgroundScheduler:
    """A paused scheduler with ``jobs``; the leader elector resumes it while this process
    holds the Lease."""
    return elected.scheduler(jobs(svc))
