"""testing.history: its decision on plain data (what counts as a record going back), and
the sampler on the fault suite's KCP catching a record written back."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kubernetes import client

from listener.storage import records
from testing import listenerenv
from testing.history import History, regressions, versions
from tether.kube import apitypes
from tether.wire.changes import Version

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
    items = [
        {
            "spec": {
                "namespace": "ns",
                "name": "a",
                "resourceVersion": "7",
                "observedAt": T1,
                "deleted": False,
                "epoch": 1,
            }
        },
        {
            "spec": {
                "namespace": "other",
                "name": "b",
                "resourceVersion": "8",
                "observedAt": T1,
                "deleted": False,
            }
        },
    ]
    assert versions(items, "ns") == {K: Version("7", T1, False, 1)}


def test_the_sampler_catches_a_record_written_back_on_a_real_kcp(
    fault_env: listenerenv.Env,
) -> None:
    """A record stored in the KCP, then overwritten with an older resourceVersion (what a
    listener without the ordering rule would do): the next sample fails the check."""
    rid, ns = f"rt-hist-{uuid.uuid4().hex[:8]}", f"h-{uuid.uuid4().hex[:6]}"
    record = {
        "runtimeId": rid,
        "watch": listenerenv.COMPAT_WATCH,
        "namespace": ns,
        "name": "a",
        "uid": "u-1",
        "resourceVersion": "12",
        "observedAt": T2,
        "deleted": False,
        "source": "poller",
        "data": {"k": "v"},
    }
    res, api = apitypes.RUNTIME_CONFIGMAPS, client.CustomObjectsApi(fault_env.api)
    obj: Any = api.create_namespaced_custom_object(
        res.group,
        res.version,
        fault_env.namespace,
        res.plural,
        records.body(record, fault_env.namespace),
    )
    hist = History(fault_env.api, fault_env.namespace, rid, ns)
    try:
        hist.sample()
        assert hist.found == [] and hist.seen == {(ns, "a"): Version("12", T2, False)}
        older = records.updated(obj, {**record, "resourceVersion": "10", "observedAt": T1})
        api.replace_namespaced_custom_object(
            res.group, res.version, fault_env.namespace, res.plural, obj["metadata"]["name"], older
        )
        with pytest.raises(AssertionError, match="went back to an older state"):
            hist.stop()
        assert len(hist.found) == 1 and "rv 12" in hist.found[0], hist.found
    finally:
        api.delete_namespaced_custom_object(
            res.group, res.version, fault_env.namespace, res.plural, obj["metadata"]["name"]
        )
