"""The canary's settings (plain data): its defaults, the probe off when no runtime is named,
and a bad value refused with one line naming the variable."""

from __future__ import annotations

import pytest

from canary import settings
from tether.base import config


def test_defaults_probe_nothing_every_minute() -> None:
    s = settings.from_env({})
    assert not s.enabled and s.runtime == ""
    assert (s.interval, s.timeout, s.poll) == (60.0, 45.0, 0.5)
    assert (s.watch, s.namespace, s.name, s.key) == (
        "configuration",
        "default",
        "tether-canary",
        "tether-canary",
    )
    assert s.label == ("tether.kyma-project.io/configuration", "true")
    assert s.runtimes.timeout == s.skr_timeout


def test_a_runtime_and_a_label_are_read() -> None:
    s = settings.from_env(
        {"TETHER_CANARY_RUNTIME": "rt-1", "TETHER_CANARY_LABEL": "example.com/probe=yes"}
    )
    assert s.enabled and s.runtime == "rt-1"
    assert s.label == ("example.com/probe", "yes")


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("TETHER_CANARY_RUNTIME", "rt 1"),
        ("TETHER_CANARY_RUNTIME", "x" * 64),
        ("TETHER_CANARY_LABEL", "no-value"),
        ("TETHER_CANARY_LABEL", "a=b,c=d"),  # one label, not a selector
        ("TETHER_CANARY_LABEL", "bad key!=x"),
        ("TETHER_CANARY_KEY", "a/b"),
        ("TETHER_CANARY_NAMESPACE", "Not_A_Name"),
        ("TETHER_CANARY_INTERVAL_SECONDS", "1"),
    ],
)
def test_bad_values_name_the_variable(name: str, raw: str) -> None:
    with pytest.raises(config.SettingError, match=name):
        settings.from_env({name: raw})


def test_the_timeout_stays_below_the_interval() -> None:
    with pytest.raises(config.SettingError, match="TETHER_CANARY_TIMEOUT_SECONDS"):
        settings.from_env(
            {"TETHER_CANARY_INTERVAL_SECONDS": "30", "TETHER_CANARY_TIMEOUT_SECONDS": "30"}
        )
