"""The storage rule's decisions (``listener.storage.rules``: ordering, quota, tombstone
retention, orphans; pure, plain data), the per-worker usage view with a fake list, and the
storage and janitor settings."""

from __future__ import annotations

import datetime
import pathlib
import threading

import pytest

from listener import settings
from listener.janitor import settings as janitor_settings
from listener.storage import quota, records, rules
from tether.base import config
from tether.wire import changes, storagebudget

T0 = datetime.datetime(2026, 11, 30, 10, 0, 0, tzinfo=datetime.UTC)
DAY = 86400.0
LIMITS = rules.Limits(records=3, bytes=1000)


def ts(seconds_before: float) -> str:
    return (T0 - datetime.timedelta(seconds=seconds_before)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# -- ordering ----------------------------------------------------------------------------


def version(rv: str, seconds_before: float = 0.0, deleted: bool = False) -> changes.Version:
    return changes.version_of(
        {"resourceVersion": rv, "observedAt": ts(seconds_before), "deleted": deleted}
    )


def test_a_record_is_written_only_when_newer_than_the_stored_one() -> None:
    assert rules.verdict(version("5"), version("6"), T0, DAY) == "newer"
    assert rules.verdict(version("5"), version("5"), T0, DAY) == "duplicate"
    assert rules.verdict(version("6"), version("5"), T0, DAY) == "stale"
    # a tombstone with the stored live record's resourceVersion replaces it, not the reverse
    assert rules.verdict(version("5"), version("5", deleted=True), T0, DAY) == "newer"
    assert rules.verdict(version("5", deleted=True), version("5"), T0, DAY) == "stale"
    # what the ordering rule alone says, wherever a key is stored
    for stored, incoming in ((version("5"), version("6")), (version("6"), version("5"))):
        assert rules.verdict(stored, incoming, T0, DAY) == changes.compare(stored, incoming)


def test_a_record_for_a_key_not_stored_is_newer_unless_too_old_for_the_retention() -> None:
    assert rules.verdict(None, version("1", DAY - 1), T0, DAY) == "newer"
    assert rules.verdict(None, version("1", DAY + 1), T0, DAY) == "stale"
    bad = changes.version_of({"resourceVersion": "1", "observedAt": "yesterday"})
    assert rules.verdict(None, bad, T0, DAY) == "stale"  # unreadable: refusing is safe
    # a stored key decides by the ordering rule alone, however old the record
    assert rules.verdict(version("1", 10 * DAY), version("2", 10 * DAY), T0, DAY) == "newer"


def test_a_create_without_a_read_is_tried_only_for_what_a_new_key_would_accept() -> None:
    assert rules.may_create_unread(version("1", 60), T0, DAY)
    assert not rules.may_create_unread(version("1", DAY + 1), T0, DAY)
    for seconds in (0, 60, DAY - 1, DAY + 1, 30 * DAY):
        v = version("7", seconds)
        assert rules.may_create_unread(v, T0, DAY) == (rules.verdict(None, v, T0, DAY) == "newer")


def test_the_rules_module_imports_no_io() -> None:
    import ast

    tree = ast.parse(pathlib.Path(rules.__file__).read_text())
    imported = {
        a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    imported |= {
        str(n.module).split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
    }
    assert imported <= {"__future__", "datetime", "json", "collections", "typing", "tether"}


def test_delta_and_add_count_a_write() -> None:
    assert rules.delta(None, 50) == rules.Used(1, 50)
    assert rules.delta(80, 50) == rules.Used(0, -30)
    assert rules.add(rules.Used(2, 100), rules.delta(None, 50)) == rules.Used(3, 150)
    assert rules.add(rules.Used(3, 150), rules.Used(1, 50), -1) == rules.Used(2, 100)


# -- quota: pure -------------------------------------------------------------------------


def test_a_new_key_needs_a_free_record_and_its_bytes() -> None:
    assert rules.admit(rules.Used(2, 100), LIMITS, None, 50) is None
    refused = rules.admit(rules.Used(3, 100), LIMITS, None, 50)
    assert refused is not None and refused.limit == "records"
    assert "exceeded quota" in refused.message() and "3" in refused.message()
    refused = rules.admit(rules.Used(1, 990), LIMITS, None, 50)
    assert refused is not None and refused.limit == "bytes"


def test_an_update_of_a_stored_key_fits_when_it_does_not_grow_past_the_byte_cap() -> None:
    full = rules.Used(3, 1000)
    assert rules.admit(full, LIMITS, 200, 200) is None  # the record cap never stops an update
    assert rules.admit(full, LIMITS, 200, 10) is None  # shrinking always fits
    refused = rules.admit(full, LIMITS, 200, 201)
    assert refused is not None and refused.limit == "bytes"
    assert rules.admit(rules.Used(3, 900), LIMITS, 200, 300) is None


def test_size_annotation_is_the_json_size_and_tolerates_garbage() -> None:
    obj = {
        "metadata": {
            "name": "x",
            "annotations": {"a": "b"},
            "resourceVersion": "5",
            "managedFields": [{"big": "x" * 1000}],
        },
        "spec": {"data": {"k": "v"}},
    }
    size = rules.annotate(obj)
    assert obj["metadata"]["annotations"][rules.SIZE_ANNOTATION] == str(size)
    assert 40 < size < 200  # managedFields and resourceVersion are not counted
    assert rules.size_of(obj) == size  # the annotation itself is left out
    assert rules.stored_size(obj["metadata"]) == size
    for bad in ("", "-1", "12a", "²", "1" * 13, None, 5):
        assert rules.stored_size({"annotations": {rules.SIZE_ANNOTATION: bad}}) == 0
    assert rules.usage_of([obj["metadata"], {}, {"annotations": None}]) == rules.Used(3, size)


# -- quota: one worker's view ------------------------------------------------------------


class FakeKcp:
    def __init__(self) -> None:
        self.stored = rules.Used(0, 0)
        self.lists = 0

    def load(self, runtime_id: str) -> rules.Used:
        self.lists += 1
        return self.stored


def test_usage_lists_once_per_ttl_and_counts_its_own_writes() -> None:
    kcp, now = FakeKcp(), [0.0]
    usage = quota.Usage(LIMITS, ttl=10, load=kcp.load, clock=lambda: now[0])
    for _ in range(3):
        usage.reserve("rt", None, 10).commit()
    assert kcp.lists == 1 and usage.current("rt") == rules.Used(3, 30)
    with pytest.raises(quota.Exceeded) as e:
        usage.reserve("rt", None, 10)
    assert e.value.refusal.limit == "records"
    usage.reserve("rt", 10, 10).commit()  # an update still fits
    kcp.stored = rules.Used(1, 10)  # the janitor pruned two
    now[0] = 11.0
    usage.reserve("rt", None, 10).commit()  # the view is stale: listed again
    assert kcp.lists == 2 and usage.current("rt") == rules.Used(2, 20)


def test_a_cancelled_write_gives_its_reservation_back() -> None:
    usage = quota.Usage(LIMITS, ttl=60, load=FakeKcp().load)
    held = [usage.reserve("rt", None, 10) for _ in range(3)]
    with pytest.raises(quota.Exceeded):
        usage.reserve("rt", None, 10)
    held[0].cancel()
    held[0].cancel()  # twice is once
    usage.reserve("rt", None, 10).commit()
    assert usage.current("rt") == rules.Used(3, 30)


def test_writes_finished_while_a_list_ran_are_not_lost() -> None:
    kcp = FakeKcp()
    usage = quota.Usage(LIMITS, ttl=60, load=kcp.load)
    snap = usage.begin("rt")  # a digest list begins
    usage.reserve("rt", None, 10).commit()  # ... a write finishes meanwhile ...
    usage.observe("rt", rules.Used(0, 0), snap)  # ... the list did not see it
    assert usage.current("rt") == rules.Used(1, 10)
    older = quota.Snapshot(-1.0, rules.Used(0, 0))
    usage.observe("rt", rules.Used(0, 0), older)  # an older list never replaces a newer one
    assert usage.current("rt") == rules.Used(1, 10)


def test_threads_of_one_worker_never_admit_more_than_the_cap() -> None:
    usage = quota.Usage(rules.Limits(50, 10**9), ttl=60, load=FakeKcp().load)
    admitted: list[int] = []
    barrier = threading.Barrier(8)

    def send() -> None:
        barrier.wait()
        for _ in range(20):
            try:
                usage.reserve("rt", None, 1).commit()
                admitted.append(1)
            except quota.Exceeded:
                pass

    threads = [threading.Thread(target=send) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(admitted) == 50


def test_two_workers_overshoot_by_at_most_what_the_other_admitted_within_the_ttl() -> None:
    kcp, now = FakeKcp(), [0.0]
    a = quota.Usage(LIMITS, ttl=10, load=kcp.load, clock=lambda: now[0])
    b = quota.Usage(LIMITS, ttl=10, load=kcp.load, clock=lambda: now[0])

    def write(u: quota.Usage) -> bool:
        try:
            u.reserve("rt", None, 1).commit()
        except quota.Exceeded:
            return False
        kcp.stored = rules.Used(kcp.stored.records + 1, kcp.stored.bytes + 1)
        return True

    assert write(a)  # a lists (0) and writes
    assert write(b) and write(b)  # b lists (1), writes 2: stored 3, the cap
    assert write(a) and write(a)  # a still believes 1: overshoot of b's 2 admissions
    assert not write(a) and not write(b)
    assert kcp.stored.records == LIMITS.records + 2
    now[0] = 10.0  # after the ttl both see the truth
    assert not write(a) and not write(b)


# -- retention ---------------------------------------------------------------------------


def test_an_old_record_for_a_key_that_is_not_stored_is_stale() -> None:
    assert rules.too_old_for_new_key(ts(DAY + 1), T0, DAY)
    assert not rules.too_old_for_new_key(ts(DAY - 1), T0, DAY)
    assert not rules.too_old_for_new_key(ts(-60), T0, DAY)  # a sender's clock ahead
    for bad in ("yesterday", "2026-11-30T10:00:00", "2026-13-01T00:00:00Z", "", " " * 25):
        assert rules.too_old_for_new_key(bad, T0, DAY)  # unreadable: refused (safe)
    assert not rules.too_old_for_new_key("2026-11-30T09:00:00.123456789Z", T0, DAY)


def tomb_meta(observed: str, deleted: str = "true", name: str = "rcm-1") -> dict[str, object]:
    return {
        "name": name,
        "resourceVersion": "7",
        "uid": "u1",
        "annotations": {records.ANN_DELETED: deleted, records.ANN_OBSERVED: observed},
    }


def due(meta: dict[str, object], retain: float = DAY) -> rules.Tombstone | None:
    return rules.tombstone_due(meta, T0, retain, records.ANN_DELETED, records.ANN_OBSERVED)


def test_a_tombstone_is_due_after_the_retention_and_the_skew_allowance() -> None:
    allowance = rules.allowance(DAY)
    assert allowance == 600  # a tenth of the retention, at most 10 minutes
    assert rules.allowance(10) == 1
    assert due(tomb_meta(ts(DAY + allowance + 1))) == rules.Tombstone("rcm-1", "7", "u1")
    assert due(tomb_meta(ts(DAY + allowance - 1))) is None
    assert due(tomb_meta(ts(DAY * 30), deleted="false")) is None  # live records stay
    assert due(tomb_meta("garbage")) is None  # unreadable: kept
    assert (
        due({"annotations": {records.ANN_DELETED: "true", records.ANN_OBSERVED: ts(DAY * 30)}})
        is None
    )  # no name


@pytest.mark.parametrize("retain", [5.0, 3600.0, DAY, 7 * DAY])
def test_no_record_older_than_a_pruned_tombstone_is_ever_admitted(retain: float) -> None:
    """The safety argument of listener.storage.rules with numbers: whenever a tombstone was due,
    any record read before it (older observedAt) is refused at any later time."""
    for tomb_age in (retain + rules.allowance(retain) + 0.001, retain * 3, retain * 100):
        assert due(tomb_meta(ts(tomb_age)), retain) is not None
        for earlier in (0.001, 1.0, retain):
            for later in (0.0, 1.0, retain):
                now = T0 + datetime.timedelta(seconds=later)
                assert rules.too_old_for_new_key(ts(tomb_age + earlier), now, retain)


def test_orphans_are_marked_then_removed_after_the_grace_and_unmarked_when_back() -> None:
    grace = 3600.0
    steps = rules.orphan_actions(
        runtimes=["new", "waiting", "due", "back", "fine", "badmark"],
        marks={
            "waiting": ts(grace - 1),
            "due": ts(grace),
            "back": ts(10 * grace),
            "badmark": "not a time",
        },
        with_kyma={"back", "fine"},
        now=T0,
        grace=grace,
    )
    by = {o.runtime_id: o for o in steps}
    assert by["new"] == rules.Orphan("new", "mark", T0)
    assert by["waiting"].step == "wait"
    assert by["due"].step == "delete" and by["due"].since == T0 - datetime.timedelta(seconds=grace)
    assert by["back"].step == "unmark"
    assert "fine" not in by  # a runtime with a Kyma CR and no mark: nothing to do
    assert by["badmark"].step == "mark"  # an unreadable mark starts the grace over


# -- settings ----------------------------------------------------------------------------


def test_storage_and_janitor_defaults() -> None:
    s = janitor_settings.from_env({})
    # the KCP budget's share: 4 GiB of etcd for 5,000 runtimes at ~4.1 KiB a record
    assert s.storage == settings.Storage(200, 2 * 1024 * 1024, 10.0, 7 * DAY)
    assert (s.orphan_grace, s.interval, s.lease_name, s.http_port) == (
        DAY,
        600.0,
        "tether-janitor",
        9091,
    )
    assert s.heartbeat_namespace == s.lease_namespace == s.namespace == "kcp-system"
    s = janitor_settings.from_env(
        {"TETHER_HEARTBEAT_NAMESPACE": "hb", "TETHER_LISTENER_JANITOR_LEASE_NAMESPACE": "ts"}
    )
    assert (s.namespace, s.heartbeat_namespace, s.lease_namespace) == ("kcp-system", "hb", "ts")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("TETHER_LISTENER_QUOTA_RECORDS", "0"),
        ("TETHER_LISTENER_QUOTA_RECORDS", "many"),
        ("TETHER_LISTENER_QUOTA_BYTES", "1024"),
        ("TETHER_LISTENER_QUOTA_CACHE_SECONDS", "-1"),
        ("TETHER_LISTENER_TOMBSTONE_RETENTION_SECONDS", "0"),
        ("TETHER_LISTENER_ORPHAN_GRACE_SECONDS", "soon"),
        ("TETHER_LISTENER_JANITOR_INTERVAL_SECONDS", "0"),
        ("TETHER_LISTENER_JANITOR_LEASE", "Not_A_Name"),
        ("TETHER_LISTENER_JANITOR_BIND", "9091"),
    ],
)
def test_a_bad_setting_is_one_line_naming_the_variable(name: str, value: str) -> None:
    with pytest.raises(config.SettingError) as e:
        janitor_settings.from_env({name: value})
    assert name in str(e.value) and "\n" not in str(e.value)


def test_the_listener_validates_the_same_storage_settings(tmp_path: pathlib.Path) -> None:
    for n in ("ca.crt", "tls.crt", "tls.key"):
        (tmp_path / n).write_text("x")
    env = {
        "TETHER_LISTENER_CLIENT_CA_FILE": str(tmp_path / "ca.crt"),
        "TETHER_LISTENER_TLS_CERT_FILE": str(tmp_path / "tls.crt"),
        "TETHER_LISTENER_TLS_KEY_FILE": str(tmp_path / "tls.key"),
    }
    s = settings.from_env(
        {
            **env,
            "TETHER_LISTENER_QUOTA_RECORDS": "7",
            "TETHER_LISTENER_TOMBSTONE_RETENTION_SECONDS": "60",
        }
    )
    assert (s.storage.quota_records, s.storage.tombstone_retention) == (7, 60.0)
    assert settings.from_env(env).storage == settings.Storage()
    with pytest.raises(config.SettingError, match="TETHER_LISTENER_QUOTA_BYTES"):
        settings.from_env({**env, "TETHER_LISTENER_QUOTA_BYTES": "lots"})


def test_the_quota_defaults_keep_a_fleet_within_the_kcp_budget() -> None:
    s = settings.Storage()
    fleet = s.quota_records * storagebudget.RUNTIMES * storagebudget.ETCD_BYTES_PER_RECORD
    assert fleet <= storagebudget.records_bytes() <= storagebudget.ETCD_QUOTA_BYTES
    assert fleet > storagebudget.records_bytes() * 0.9  # and does not leave most of it unused
    assert s.quota_bytes >= 1024 * 1024 * 4 // 3 + 64 * 1024  # a 1 MiB binaryData record fits
