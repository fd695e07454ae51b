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
