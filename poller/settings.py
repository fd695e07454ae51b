"""The poller's settings: one dataclass, built once in the entry point.

Every setting is declared once, as a field with its option (``tether.base.config.setting``):
variable, default, bounds, meaning; some have a flag of ``tether poller`` that overrides the
variable (``--help``). The listener client and the ConfigMap filter use the same variables as the
webhook (``TETHER_LISTENER_*``, ``TETHER_CLIENT_*``, ``TETHER_IGNORED_NAMESPACES``,
``TETHER_LABEL_SELECTOR``), so one Secret/ConfigMap configures both. See docs/poller.md.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Mapping

from apscheduler.triggers.cron import CronTrigger

from poller import run
from tether.base import config, numbers
from tether.runtime import leader, sender
from tether.wire import filters, watchset

DEFAULT_RESYNC_CRON = "17 3 * * *"  # daily, off the hour
OFF = ("", "-", "off", "none")
setting = config.setting


def _cron(name: str, raw: str) -> str:
    if raw.lower() in OFF:
        return ""
    try:
        CronTrigger.from_crontab(raw, timezone="UTC")
    except ValueError as e:
        raise config.SettingError(
            f"{name}: {raw!r} is not a crontab expression (minute hour day month weekday): {e}"
        ) from None
    return raw


def _bind(name: str, raw: str) -> str:
    host, _, port = raw.rpartition(":")
    number = numbers.ascii_int(port, 5)
    if not host or number is None or not 0 < number < 65536:
        raise config.SettingError(f"{name}: {raw!r} is not HOST:PORT")
    return raw


# the inputs of ``run.RunSettings`` and ``leader.LeaseSettings``
RUN = (
    config.integer(
        "TETHER_POLLER_BATCH_ITEMS",
        100,
        "records per POST (batches also stay below ~2 MiB)",
        minimum=1,
        maximum=sender.MAX_BATCH_ITEMS,
        flag="--batch-items",
    ),
    config.number(
        "TETHER_POLLER_RATE",
        100.0,
        "records sent per second (token bucket)",
        minimum=0.1,
        maximum=100_000,
        flag="--rate",
    ),
    config.integer(
        "TETHER_POLLER_BURST",
        None,
        "token bucket size",
        minimum=1,
        maximum=1_000_000,
        shown="max(BATCH_ITEMS, RATE)",
    ),
    config.integer(
        "TETHER_POLLER_PAGE_SIZE",
        500,
        "ConfigMaps per list request (memory: one page)",
        minimum=1,
        maximum=10_000,
        flag="--page-size",
    ),
    config.integer(
        "TETHER_POLLER_STATE_PAGE_SIZE",
        5000,
        "digest entries per state GET (the listener's maximum)",
        minimum=1,
        maximum=5000,
    ),
    config.integer(
        "TETHER_POLLER_SEND_ATTEMPTS",
        3,
        "tries of one batch before the run stops",
        minimum=1,
        maximum=20,
    ),
    config.seconds(
        "TETHER_POLLER_RETRY_BASE_SECONDS",
        0.5,
        "first backoff between tries within a run",
        minimum=0.01,
        maximum=60,
    ),
    config.seconds(
        "TETHER_POLLER_RETRY_CAP_SECONDS",
        5.0,
        "longest backoff between tries within a run",
        minimum=0.01,
        maximum=300,
    ),
    config.integer(
        "TETHER_POLLER_MAX_RESTARTS", 3, "restarts of a run after 410 Gone", minimum=0, maximum=100
    ),
)
LEASE = (
    config.seconds(
        "TETHER_POLLER_LEASE_DURATION_SECONDS",
        15.0,
        "Lease duration",
        minimum=1,
        maximum=3600,
        flag="--lease-duration",
    ),
    config.seconds(
        "TETHER_POLLER_RENEW_DEADLINE_SECONDS",
        None,
        "the holder steps down when it could not renew for this long",
        minimum=0.1,
        shown="min(10, 2/3 LEASE_DURATION)",
    ),
    config.seconds(
        "TETHER_POLLER_RETRY_PERIOD_SECONDS",
        None,
        "election loop period (RETRY_PERIOD < RENEW_DEADLINE < LEASE_DURATION)",
        minimum=0.05,
        shown="min(2, RENEW_DEADLINE / 2)",
    ),
    config.text(
        "TETHER_POLLER_IDENTITY",
        None,
        "Lease holder identity (the Deployment passes the pod name)",
        shown="HOSTNAME_PID",
        flag="--identity",
    ),
    config.object_name(
        "TETHER_POLLER_LEASE_NAMESPACE",
        "tether-system",
        "namespace of the Lease",
        flag="--lease-namespace",
    ),
    config.object_name(
        "TETHER_POLLER_LEASE_NAME", "tether-poller", "the Lease's name", flag="--lease-name"
    ),
)


@dataclasses.dataclass(frozen=True)
class ScheduleSettings:
    interval: float = setting(
        config.seconds(
            "TETHER_POLLER_INTERVAL_SECONDS",
            60.0,
            "interval of the anti-entropy run",
            minimum=0.5,
            maximum=86_400,
            flag="--interval",
        )
    )
    jitter: float = setting(
        config.seconds(
            "TETHER_POLLER_JITTER_SECONDS",
            None,
            "random delay added to each interval run (at most the interval)",
            minimum=0,
            shown="INTERVAL / 10",
            flag="--jitter",
        ),
        derived=6.0,
    )
    resync_cron: str = setting(
        config.custom(  # "" disables the full resync
            "TETHER_POLLER_RESYNC_CRON",
            DEFAULT_RESYNC_CRON,
            "crontab (UTC) of the full resync; off disables it",
            _cron,
            flag="--resync-cron",
        )
    )
    run_on_start: bool = setting(
        config.boolean("TETHER_POLLER_RUN_ON_START", True, "run at once when becoming leader")
    )
    backoff_base: float = setting(
        config.seconds(
            "TETHER_POLLER_BACKOFF_BASE_SECONDS",
            5.0,
            "first backoff of the next runs after the listener failed",
            minimum=0.01,
            maximum=3600,
        )
    )
    backoff_cap: float = setting(
        config.seconds(
            "TETHER_POLLER_BACKOFF_CAP_SECONDS",
            600.0,
            "longest backoff of the next runs after the listener failed",
            minimum=0.01,
            maximum=86_400,
        )
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    runtime_id: str = setting(config.runtime_id(flag="--runtime-id"))
    listener: sender.ClientSettings = config.inputs(*sender.client_options(read_timeout=30.0))
    run: run.RunSettings = config.inputs(*RUN)
    schedule: ScheduleSettings = config.group(ScheduleSettings)
    lease: leader.LeaseSettings = config.inputs(*LEASE)
    bind: str = setting(
        config.custom(
            "TETHER_POLLER_BIND",
            "0.0.0.0:8080",
            "HOST:PORT of probes and metrics",
            _bind,
            flag="--bind",
        )
    )
    list_timeout: float = setting(
        config.seconds(
            "TETHER_POLLER_LIST_TIMEOUT_SECONDS",
            30.0,
            "timeout of one ConfigMap list request",
            minimum=1,
            maximum=600,
        )
    )
    filter: filters.ConfigMapFilter = config.inputs(*filters.OPTIONS)
    watches_configmap: tuple[str, str] = setting(watchset.OPTION)  # (namespace, name)
    digest_key_file: str | None = setting(watchset.KEY_OPTION)  # read at start
    kubeconfig: str | None = setting(  # None: in-cluster service account
        config.kubeconfig("TETHER_KUBECONFIG", flag="--kubeconfig")
    )
    log_level: str = setting(config.log_level(flag="--log-level"))
    log_format: str = setting(config.log_format())


SPEC = config.Spec.of(
    Settings,
    part="poller",
    summary="Polling fallback (SKR): reconciles the runtime's ConfigMaps with the listener's "
    "state.",
    renamed={
        **sender.CLIENT_RENAMED,
        "TETHER_POLLER_LIST_TIMEOUT": "TETHER_POLLER_LIST_TIMEOUT_SECONDS",
    },
    pairs=sender.CLIENT_PAIRS,
)


def _lease(v: config.Values) -> leader.LeaseSettings:
    duration = v["TETHER_POLLER_LEASE_DURATION_SECONDS"]
    deadline = v["TETHER_POLLER_RENEW_DEADLINE_SECONDS"]
    deadline = min(10.0, duration * 2 / 3) if deadline is None else deadline
    retry = v["TETHER_POLLER_RETRY_PERIOD_SECONDS"]
    retry = min(2.0, deadline / 2) if retry is None else retry
    if not retry < deadline < duration:
        raise config.SettingError(
            "TETHER_POLLER_RENEW_DEADLINE_SECONDS: TETHER_POLLER_RETRY_PERIOD_SECONDS < "
            "TETHER_POLLER_RENEW_DEADLINE_SECONDS < TETHER_POLLER_LEASE_DURATION_SECONDS "
            f"must hold (got {retry:g} < {deadline:g} < {duration:g})"
        )
    return leader.LeaseSettings(
        namespace=v["TETHER_POLLER_LEASE_NAMESPACE"],
        name=v["TETHER_POLLER_LEASE_NAME"],
        identity=v["TETHER_POLLER_IDENTITY"] or f"{socket.gethostname()}_{os.getpid()}",
        lease_duration=duration,
        renew_deadline=deadline,
        retry_period=retry,
    )


def build(v: config.Values) -> Settings:
    """The settings from the options' values, with the checks between them."""
    batch_items, rate = v["TETHER_POLLER_BATCH_ITEMS"], v["TETHER_POLLER_RATE"]
    burst = v["TETHER_POLLER_BURST"]
    runs = run.RunSettings(
        buckets=True,
        page_size=v["TETHER_POLLER_PAGE_SIZE"],
        state_page_size=v["TETHER_POLLER_STATE_PAGE_SIZE"],
        batch_items=batch_items,
        rate=rate,
        burst=max(batch_items, int(rate)) if burst is None else burst,
        send_attempts=v["TETHER_POLLER_SEND_ATTEMPTS"],
        retry_base=v["TETHER_POLLER_RETRY_BASE_SECONDS"],
        retry_cap=v["TETHER_POLLER_RETRY_CAP_SECONDS"],
        max_restarts=v["TETHER_POLLER_MAX_RESTARTS"],
    )
    interval = v["TETHER_POLLER_INTERVAL_SECONDS"]
    jitter = v["TETHER_POLLER_JITTER_SECONDS"]
    if jitter is not None and jitter > interval:
        raise config.SettingError(
            f"TETHER_POLLER_JITTER_SECONDS: {jitter:g} is above the "
            f"maximum {interval:g} (TETHER_POLLER_INTERVAL_SECONDS)"
        )
    schedule = config.fill(
        ScheduleSettings, v, jitter=round(interval / 10, 3) if jitter is None else jitter
    )
    return config.fill(
        Settings,
        v,
        run=runs,
        schedule=schedule,
        lease=_lease(v),
        filter=filters.from_values(v),
        listener=sender.client_settings(v, v["TETHER_RUNTIME_ID"], pool_size=2),
    )


def from_env(env: Mapping[str, str] | None = None) -> Settings:
    """Raises ``config.SettingError`` naming the first bad variable (``env`` for tests;
    default ``os.environ``). Files are only checked to exist here (``SPEC.check_files``)."""
    return build(SPEC.read(env))
