"""The poller's settings: one dataclass, built once in the entry point.

Every setting is an environment variable; flags of ``tether poller`` override them (see
``FLAGS``). The listener client and the ConfigMap filter use the same variables as the
webhook (``TETHER_LISTENER_*``, ``TETHER_CLIENT_*``, ``TETHER_IGNORED_NAMESPACES``,
``TETHER_LABEL_SELECTOR``), so one Secret/ConfigMap configures both. See docs/poller.md.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Mapping

from apscheduler.triggers.cron import CronTrigger

from common import config, filters, leader, numbers, sender
from poller import run

DEFAULT_RESYNC_CRON = "17 3 * * *"  # daily, off the hour
OFF = ("", "-", "off", "none")


@dataclasses.dataclass(frozen=True)
class ScheduleSettings:
    interval: float = 60.0
    jitter: float = 6.0
    resync_cron: str = DEFAULT_RESYNC_CRON  # "" disables the full resync
    run_on_start: bool = True
    backoff_base: float = 5.0
    backoff_cap: float = 600.0


@dataclasses.dataclass(frozen=True)
class Settings:
    runtime_id: str
    listener: sender.ClientSettings
    filter: filters.ConfigMapFilter
    run: run.RunSettings
    schedule: ScheduleSettings
    lease: leader.LeaseSettings
    bind: str = "0.0.0.0:8080"
    list_timeout: float = 30.0
    kubeconfig: str | None = None  # None: in-cluster service account
    log_level: str = "INFO"
    log_format: str = "json"


def _cron(env: Mapping[str, str]) -> str:
    raw = env.get("TETHER_POLLER_RESYNC_CRON")
    value = DEFAULT_RESYNC_CRON if raw is None else raw.strip()
    if value.lower() in OFF:
        return ""
    try:
        CronTrigger.from_crontab(value, timezone="UTC")
    except ValueError as e:
        raise config.SettingError(f"TETHER_POLLER_RESYNC_CRON={value!r} is not a crontab "
                                  f"expression (minute hour day month weekday): {e}") from None
    return value


def _bind(env: Mapping[str, str]) -> str:
    value = config.string("TETHER_POLLER_BIND", "0.0.0.0:8080", env=env)
    host, _, port = value.rpartition(":")
    number = numbers.ascii_int(port, 5)
    if not host or number is None or not 0 < number < 65536:
        raise config.SettingError(f"TETHER_POLLER_BIND={value!r} is not HOST:PORT")
    return value


def from_env(env: Mapping[str, str]) -> Settings:
    """Raises ``config.SettingError`` naming the first bad variable."""
    runtime_id = config.runtime_id(env=env)
    listener = sender.client_settings_from_env(env, runtime_id, read_timeout=30.0, pool_size=2)
    batch_items = config.integer("TETHER_POLLER_BATCH_ITEMS", 100, minimum=1,
                                 maximum=sender.MAX_BATCH_ITEMS, env=env)
    rate = config.number("TETHER_POLLER_RATE", 100.0, minimum=0.1, maximum=100_000, env=env)
    runs = run.RunSettings(
        page_size=config.integer("TETHER_POLLER_PAGE_SIZE", 500, minimum=1, maximum=10_000, env=env),
        state_page_size=config.integer("TETHER_POLLER_STATE_PAGE_SIZE", 5000, minimum=1, maximum=5000, env=env),
        batch_items=batch_items,
        rate=rate,
        burst=config.integer("TETHER_POLLER_BURST", max(batch_items, int(rate)), minimum=1,
                             maximum=1_000_000, env=env),
        send_attempts=config.integer("TETHER_POLLER_SEND_ATTEMPTS", 3, minimum=1, maximum=20, env=env),
        retry_base=config.number("TETHER_POLLER_RETRY_BASE_SECONDS", 0.5, minimum=0.01, maximum=60, env=env),
        retry_cap=config.number("TETHER_POLLER_RETRY_CAP_SECONDS", 5.0, minimum=0.01, maximum=300, env=env),
        max_restarts=config.integer("TETHER_POLLER_MAX_RESTARTS", 3, minimum=0, maximum=100, env=env),
    )
    interval = config.number("TETHER_POLLER_INTERVAL_SECONDS", 60.0, minimum=0.5, maximum=86_400, env=env)
    schedule = ScheduleSettings(
        interval=interval,
        jitter=config.number("TETHER_POLLER_JITTER_SECONDS", round(interval / 10, 3), minimum=0,
                             maximum=interval, env=env),
        resync_cron=_cron(env),
        run_on_start=config.boolean("TETHER_POLLER_RUN_ON_START", True, env=env),
        backoff_base=config.number("TETHER_POLLER_BACKOFF_BASE_SECONDS", 5.0, minimum=0.01, maximum=3600, env=env),
        backoff_cap=config.number("TETHER_POLLER_BACKOFF_CAP_SECONDS", 600.0, minimum=0.01, maximum=86_400, env=env),
    )
    duration = config.number("TETHER_POLLER_LEASE_DURATION_SECONDS", 15.0, minimum=1, maximum=3600, env=env)
    deadline = config.number("TETHER_POLLER_RENEW_DEADLINE_SECONDS", min(10.0, duration * 2 / 3),
                             minimum=0.1, env=env)
    retry = config.number("TETHER_POLLER_RETRY_PERIOD_SECONDS", min(2.0, deadline / 2), minimum=0.05, env=env)
    if not retry < deadline < duration:
        raise config.SettingError(
            "TETHER_POLLER_RETRY_PERIOD_SECONDS < TETHER_POLLER_RENEW_DEADLINE_SECONDS < "
            f"TETHER_POLLER_LEASE_DURATION_SECONDS must hold (got {retry} < {deadline} < {duration})")
    identity = config.string("TETHER_POLLER_IDENTITY", f"{socket.gethostname()}_{os.getpid()}", env=env)
    lease = leader.LeaseSettings(
        namespace=config.string("TETHER_POLLER_LEASE_NAMESPACE", "tether-system", env=env),
        name=config.string("TETHER_POLLER_LEASE_NAME", "tether-poller", env=env),
        identity=identity, lease_duration=duration, renew_deadline=deadline, retry_period=retry)
    return Settings(
        runtime_id=runtime_id, listener=listener, filter=filters.from_env(env), run=runs,
        schedule=schedule, lease=lease, bind=_bind(env),
        list_timeout=config.number("TETHER_POLLER_LIST_TIMEOUT", 30.0, minimum=1, maximum=600, env=env),
        kubeconfig=config.optional("TETHER_KUBECONFIG", env=env) or config.optional("KUBECONFIG", env=env),
        log_level=config.log_level(env=env), log_format=config.string("TETHER_LOG_FORMAT", "json", env=env),
    )


FLAGS = {
    # flag -> variable
    "--runtime-id": "TETHER_RUNTIME_ID",
    "--listener-url": "TETHER_LISTENER_URL",
    "--listener-ca-file": "TETHER_LISTENER_CA_FILE",
    "--client-cert-file": "TETHER_CLIENT_CERT_FILE",
    "--client-key-file": "TETHER_CLIENT_KEY_FILE",
    "--interval": "TETHER_POLLER_INTERVAL_SECONDS",
    "--jitter": "TETHER_POLLER_JITTER_SECONDS",
    "--resync-cron": "TETHER_POLLER_RESYNC_CRON",
    "--page-size": "TETHER_POLLER_PAGE_SIZE",
    "--batch-items": "TETHER_POLLER_BATCH_ITEMS",
    "--rate": "TETHER_POLLER_RATE",
    "--ignored-namespaces": "TETHER_IGNORED_NAMESPACES",
    "--label-selector": "TETHER_LABEL_SELECTOR",
    "--lease-namespace": "TETHER_POLLER_LEASE_NAMESPACE",
    "--lease-name": "TETHER_POLLER_LEASE_NAME",
    "--lease-duration": "TETHER_POLLER_LEASE_DURATION_SECONDS",
    "--identity": "TETHER_POLLER_IDENTITY",
    "--bind": "TETHER_POLLER_BIND",
    "--kubeconfig": "TETHER_KUBECONFIG",
    "--log-level": "TETHER_LOG_LEVEL",
}
