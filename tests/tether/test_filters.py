"""The shared ConfigMap filter (pure)."""

from __future__ import annotations

import pytest

from tether.base import config
from tether.wire import filters


def test_defaults_ignore_kube_system_and_tether_namespace() -> None:
    flt = filters.ConfigMapFilter()
    assert filters.rejection(flt, "kube-system", {}) == "ignored-namespace"
    assert filters.rejection(flt, "tether-system", {}) == "ignored-namespace"
    assert filters.rejection(flt, "team-a", {}) is None


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("watch=true", {"watch": "true"}, True),
        ("watch=true", {"watch": "false"}, False),
        ("watch=true", {}, False),
        ("watch==true", {"watch": "true"}, True),
        ("ignore!=true", {}, True),
        ("ignore!=true", {"ignore": "true"}, False),
        ("ignore!=true", {"ignore": "no"}, True),
        ("tier in (a, b)", {"tier": "b"}, True),
        ("tier in (a,b)", {"tier": "c"}, False),
        ("tier notin (a,b)", {}, True),
        ("tier notin (a,b)", {"tier": "a"}, False),
        ("example.com/watch", {"example.com/watch": ""}, True),
        ("!example.com/skip", {"example.com/skip": "x"}, False),
        ("!example.com/skip", {}, True),
        ("a=1,tier in (x,y),!z", {"a": "1", "tier": "y"}, True),
        ("a=1,tier in (x,y),!z", {"a": "1", "tier": "y", "z": ""}, False),
        ("", {"anything": "x"}, True),
    ],
)
def test_selector(selector: str, labels: dict[str, str], expected: bool) -> None:
    assert filters.selector_matches(filters.parse_selector(selector), labels) is expected


@pytest.mark.parametrize(
    "bad", ["a=b=c", "in (x)", "tier in (a", "a,,b", "bad key!", "a=b c", "x)"]
)
def test_bad_selectors_raise(bad: str) -> None:
    with pytest.raises(filters.SelectorError):
        filters.parse_selector(bad)


def test_update_is_watched_when_old_or_new_labels_match() -> None:
    flt = filters.ConfigMapFilter.build(selector_text="watch=true")
    assert filters.watched(flt, "team-a", {"watch": "true"}, {})
    assert filters.watched(flt, "team-a", {}, {"watch": "true"})
    assert filters.rejection(flt, "team-a", {}, None) == "label-selector"
    assert filters.rejection(flt, "team-a") == "label-selector"


def test_from_env() -> None:
    flt = filters.from_env({"TETHER_IGNORED_NAMESPACES": "a, b", "TETHER_LABEL_SELECTOR": "w=1"})
    assert flt.ignored_namespaces == frozenset({"a", "b"})
    assert flt.selector_text == "w=1"
    assert filters.from_env({}).ignored_namespaces == frozenset(filters.DEFAULT_IGNORED_NAMESPACES)
    assert filters.from_env({"TETHER_IGNORED_NAMESPACES": "-"}).ignored_namespaces == frozenset()


def test_from_env_names_the_bad_variable() -> None:
    with pytest.raises(config.SettingError, match="TETHER_LABEL_SELECTOR"):
        filters.from_env({"TETHER_LABEL_SELECTOR": "a in (b"})
