"""Settings helpers: clear errors naming the variable."""

from __future__ import annotations

import pytest

from common import config


def test_required_missing() -> None:
    with pytest.raises(config.SettingError, match="TETHER_X is required"):
        config.string("TETHER_X", env={})


def test_blank_is_missing() -> None:
    assert config.string("A", "d", env={"A": "  "}) == "d"


@pytest.mark.parametrize("raw,msg", [("ten", "not an integer"), ("0", "below the minimum 1"),
                                     ("99", "above the maximum 10")])
def test_integer_errors(raw: str, msg: str) -> None:
    with pytest.raises(config.SettingError, match=f"Q={raw!r}|Q={raw}") as e:
        config.integer("Q", 5, minimum=1, maximum=10, env={"Q": raw})
    assert msg in str(e.value)


def test_values() -> None:
    env = {"N": "7", "F": "0.5", "B": "Yes", "L": "a, b,,c"}
    assert config.integer("N", 1, env=env) == 7
    assert config.number("F", 1.0, env=env) == 0.5
    assert config.boolean("B", False, env=env) is True
    assert config.string_list("L", env=env) == ("a", "b", "c")
    with pytest.raises(config.SettingError, match="not a boolean"):
        config.boolean("X", False, env={"X": "maybe"})


def test_existing_file(tmp_path: object) -> None:
    with pytest.raises(config.SettingError, match="does not exist"):
        config.existing_file("P", env={"P": "/nonexistent/file"})


@pytest.mark.parametrize("raw", ["http://x", "https://", "listener:8443", "ftp://h"])
def test_https_url_refused(raw: str) -> None:
    with pytest.raises(config.SettingError, match="must be an https:// URL with a host"):
        config.https_url("U", env={"U": raw})


def test_https_url_and_level() -> None:
    assert config.https_url("U", env={"U": "https://l.example:8443/"}) == "https://l.example:8443"
    assert config.log_level(env={"TETHER_LOG_LEVEL": "debug"}) == "DEBUG"
    with pytest.raises(config.SettingError, match="TETHER_LOG_LEVEL='LOUD'"):
        config.log_level(env={"TETHER_LOG_LEVEL": "loud"})


@pytest.mark.parametrize("raw", ["-rt", "rt-", "a" * 64, "rt/1", "r t"])
def test_runtime_id_refused(raw: str) -> None:
    with pytest.raises(config.SettingError, match="is not a valid runtime ID"):
        config.runtime_id(env={"TETHER_RUNTIME_ID": raw})


def test_runtime_id_ok_and_flags() -> None:
    assert config.runtime_id(env={"TETHER_RUNTIME_ID": "4a1f-B_c.9"}) == "4a1f-B_c.9"
    merged = config.env_with_flags(["--queue-size", "7"], {"--queue-size": "TETHER_QUEUE_SIZE",
                                                            "--x": "TETHER_X"},
                                   prog="p", description="d", env={"TETHER_X": "keep"})
    assert merged == {"TETHER_X": "keep", "TETHER_QUEUE_SIZE": "7"}


@pytest.mark.parametrize("raw", ["٣", "1_000", "²", "inf", "nan", "1e3", "0x10", "5 5"])
def test_numbers_are_plain_ascii(raw: str) -> None:
    with pytest.raises(config.SettingError, match="N="):
        config.integer("N", 1, env={"N": raw})
    with pytest.raises(config.SettingError, match="N="):
        config.number("N", 1.0, env={"N": raw})


def test_plain_numbers_still_parse() -> None:
    assert config.integer("N", 1, env={"N": "-3"}) == -3
    assert config.number("N", 1.0, env={"N": "0.25"}) == 0.25
