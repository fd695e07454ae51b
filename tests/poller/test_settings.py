"""The poller's settings from the environment: defaults and clear errors."""

from __future__ import annotations

import pathlib

import pytest

from poller import settings
from tether.base import config


@pytest.fixture
def env(tmp_path: pathlib.Path) -> dict[str, str]:
    for name in ("ca.crt", "tls.crt", "tls.key"):
        (tmp_path / name).write_text("x")
    return {
        "TETHER_RUNTIME_ID": "rt-1",
        "TETHER_LISTENER_URL": "https://listener.example.com/",
        "TETHER_LISTENER_CA_FILE": str(tmp_path / "ca.crt"),
        "TETHER_CLIENT_CERT_FILE": str(tmp_path / "tls.crt"),
        "TETHER_CLIENT_KEY_FILE": str(tmp_path / "tls.key"),
    }


def test_defaults(env: dict[str, str]) -> None:
    s = settings.from_env(env)
    assert s.listener.base_url == "https://listener.example.com"
    assert (s.schedule.interval, s.schedule.jitter, s.schedule.resync_cron) == (
        60.0,
        6.0,
        "17 3 * * *",
    )
    assert (s.run.page_size, s.run.state_page_size, s.run.batch_items, s.run.rate) == (
        500,
        5000,
        100,
        100.0,
    )
    assert (s.lease.namespace, s.lease.name, s.lease.lease_duration) == (
        "tether-system",
        "tether-poller",
        15.0,
    )
    assert s.filter.ignored_namespaces == frozenset({"kube-system", "tether-system"})
    assert s.bind == "0.0.0.0:8080"


def test_short_lease_and_disabled_resync(env: dict[str, str]) -> None:
    s = settings.from_env(
        {
            **env,
            "TETHER_POLLER_LEASE_DURATION_SECONDS": "3",
            "TETHER_POLLER_RESYNC_CRON": "off",
            "TETHER_LABEL_SELECTOR": "team=a",
        }
    )
    assert (s.lease.lease_duration, s.lease.renew_deadline, s.lease.retry_period) == (3.0, 2.0, 1.0)
    assert s.schedule.resync_cron == ""
    assert s.filter.selector_text == "team=a"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("TETHER_RUNTIME_ID", "-bad-", "TETHER_RUNTIME_ID"),
        ("TETHER_LISTENER_URL", "http://x", "must be an https:// URL"),
        ("TETHER_POLLER_INTERVAL_SECONDS", "0.1", "below the minimum"),
        ("TETHER_POLLER_RESYNC_CRON", "every day", "TETHER_POLLER_RESYNC_CRON"),
        ("TETHER_POLLER_BATCH_ITEMS", "501", "above the maximum"),
        ("TETHER_POLLER_RENEW_DEADLINE_SECONDS", "20", "must hold"),
        ("TETHER_POLLER_BIND", "8080", "HOST:PORT"),
        ("TETHER_LABEL_SELECTOR", "a in (", "TETHER_LABEL_SELECTOR"),
        ("TETHER_CLIENT_KEY_FILE", "/nonexistent", "TETHER_CLIENT_KEY_FILE"),
    ],
)
def test_bad_values_name_the_variable(
    env: dict[str, str], name: str, value: str, message: str
) -> None:
    with pytest.raises(config.SettingError, match=message):
        settings.from_env({**env, name: value})
