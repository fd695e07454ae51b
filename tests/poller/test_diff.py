"""The poller's pure decisions: judging listed objects and leftover digest entries."""

from __future__ import annotations

from poller import diff, scan
from tether.wire import changes, filters

T0, T1, T2 = (
    "2026-11-30T10:00:00.000000Z",
    "2026-11-30T10:00:01.000000Z",
    "2026-11-30T10:00:02.000000Z",
)


def entry(rv: str, deleted: bool = False, at: str = T1) -> diff.Entry:
    return diff.Entry(rv, at, deleted, "u-1")


def test_load_builds_a_dict_of_small_entries() -> None:
    items: list[changes.DigestItem] = [
        {
            "namespace": "a",
            "name": "x",
            "uid": "u1",
            "resourceVersion": "5",
            "observedAt": T0,
            "deleted": False,
        },
        {
            "namespace": "b",
            "name": "x",
            "uid": "u2",
            "resourceVersion": "7",
            "observedAt": T1,
            "deleted": True,
        },
    ]
    got = diff.load(items)
    assert got == {
        ("a", "x"): diff.Entry("5", T0, False, "u1"),
        ("b", "x"): diff.Entry("7", T1, True, "u2"),
    }


def test_missing_changed_and_equal() -> None:
    assert diff.judge(None, "10", T2) == "missing"
    assert diff.judge(entry("10"), "10", T2) is None  # equal: costs nothing
    assert diff.judge(entry("9"), "10", T2) == "changed"
    # recreated after a tombstone the listener holds: missing again
    assert diff.judge(entry("12", deleted=True), "15", T2) == "missing"


def test_a_newer_record_held_by_the_listener_is_not_resent() -> None:
    # the webhook persisted rv 12 while the poller listed rv 10
    assert diff.judge(entry("12"), "10", T2) is None
    assert diff.judge(entry("12", deleted=True), "10", T2) is None
    # a tombstone at the same resourceVersion is the deletion of that version
    assert diff.judge(entry("10", deleted=True), "10", T2) is None


def test_non_numeric_resource_versions_compare_timestamps() -> None:
    assert diff.judge(entry("abc", at=T1), "abd", T2) == "changed"
    assert diff.judge(entry("abc", at=T2), "abd", T1) is None  # the listener's is newer


def test_leftover_becomes_a_tombstone_at_the_listing_resource_version() -> None:
    assert diff.leftover(entry("10"), "50", T2) == "50"
    assert diff.leftover(entry("50"), "50", T2) == "50"  # unselected at that very version
    assert diff.leftover(entry("10", deleted=True), "50", T2) is None  # already a tombstone
    # the listener holds a record newer than the snapshot: the listing proves nothing
    assert diff.leftover(entry("60"), "50", T2) is None
    assert diff.leftover(entry("10"), "", T2) is None


def test_leftover_with_non_numeric_versions_uses_the_listing_time() -> None:
    assert diff.leftover(entry("abc", at=T0), "xyz", T1) == "xyz"
    assert diff.leftover(entry("abc", at=T2), "xyz", T1) is None


def test_full_resync_resends_equal_but_never_older() -> None:
    assert diff.resend(entry("10"), "10", T2) is True
    assert diff.resend(None, "10", T2) is True
    assert diff.resend(entry("12"), "10", T2) is False


def test_keys_and_versions_of_served_objects() -> None:
    obj = {"metadata": {"namespace": "ns", "name": "cm", "resourceVersion": "42"}}
    assert diff.key_of(obj) == ("ns", "cm")
    assert diff.resource_version_of(obj) == "42"


def test_field_selector_excludes_ignored_namespaces() -> None:
    flt = filters.ConfigMapFilter.build(("kube-system", "tether-system"), "")
    assert (
        scan.field_selector(flt)
        == "metadata.namespace!=kube-system,metadata.namespace!=tether-system"
    )
    assert scan.field_selector(filters.ConfigMapFilter.build((), "")) == ""
