"""testing.history's decision on plain data: what counts as a record going back."""

from __future__ import annotations

from testing.history import regressions, versions
from tether.changes import Version

T1, T2 = "2026-01-01T00:00:01.000000Z", "2026-01-01T00:00:02.000000Z"
K = ("ns", "a")


def test_forward_and_duplicates_are_no_regression() -> None:
    seen: dict[tuple[str, str], Version] = {}
    assert regressions(seen, {K: Version("10", T1, False)}) == []
    assert regressions(seen, {K: Version("10", T1, False)}) == []  # the same again
    assert regressions(seen, {K: Version("12", T2, False)}) == []
    assert regressions(seen, {K: Version("12", T2, True)}) == []  # deleted at that version
    assert seen[K] == Version("12", T2, True)
    assert regressions(seen, {K: Version("15", T2, False)}) == []  # created again, later


def test_an_older_resource_version_is_a_regression_and_not_remembered() -> None:
    seen = {K: Version("12", T2, False)}
    found = regressions(seen, {K: Version("10", T1, False)})
    assert len(found) == 1 and "rv 12" in found[0] and "rv 10" in found[0]
    assert seen[K] == Version("12", T2, False)


def test_a_tombstone_back_to_its_live_object_is_a_regression() -> None:
    seen = {K: Version("12", T2, True)}
    assert regressions(seen, {K: Version("12", T2, False)})


def test_an_older_epoch_is_a_regression_a_newer_one_is_not() -> None:
    seen = {K: Version("5", T1, False, epoch=2)}
    assert regressions(seen, {K: Version("900", T2, False, epoch=1)})
    assert regressions(seen, {K: Version("3", T1, False, epoch=3)}) == []


def test_a_key_that_vanished_may_not_come_back_older() -> None:
    seen: dict[tuple[str, str], Version] = {}
    regressions(seen, {K: Version("12", T2, True)})
    assert regressions(seen, {}) == []  # the tombstone pruned
    assert regressions(seen, {K: Version("11", T1, False)})


def test_versions_reads_the_spec_of_one_namespace() -> None:
    items = [{"spec": {"namespace": "ns", "name": "a", "resourceVersion": "7",
                       "observedAt": T1, "deleted": False, "epoch": 1}},
             {"spec": {"namespace": "other", "name": "b", "resourceVersion": "8",
                       "observedAt": T1, "deleted": False}}]
    assert versions(items, "ns") == {K: Version("7", T1, False, 1)}
