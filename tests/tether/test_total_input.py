"""Total input handling (issue 9, part 5), with plain data: whole-string ECMA-262 patterns,
ASCII where Kubernetes is ASCII, one number parser, and comparisons that never raise on
what an older version (or a person) stored."""

from __future__ import annotations

import collections
import copy
import datetime
import re
from typing import Any

import hypothesis
import jsonschema_rs
import pytest
from hypothesis import strategies as st

from listener.storage import records
from poller import diff
from tether.base import numbers, times
from tether.wire import changes, schemacheck

V = changes.Version
T0 = "2026-11-30T10:00:00.123456Z"
T1 = "2026-11-30T10:00:01.000000Z"

# Values the issue names and their kin: each was accepted by the old schema or crashed the
# comparison. Kubernetes writes none of them.
TRAILING_NEWLINE = "app-config\n"
NON_ASCII_DIGITS = ["٣", "²", "４２", "1٣", "⁵"]
BAD_TIMES = [
    "2026-13-45T10:00:00Z",
    "2026-02-30T00:00:00Z",
    "2026-11-30T24:00:00Z",
    "2026-11-30T10:00:60Z",
    "0000-01-01T00:00:00Z",
    "2026-11-30T10:00:00Z\n",
    "٢٠٢٦-11-30T10:00:00Z",
    "2026-11-30t10:00:00z",
    "2026-11-30T10:00:00+01:00",
    "",
]


def record(**over: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "apiVersion": "tether.kyma-project.io/v1",
        "kind": "ConfigMapChange",
        "runtimeId": "rt-1",
        "namespace": "team-a",
        "name": "app-config",
        "uid": "9c2e",
        "resourceVersion": "48213",
        "observedAt": T0,
        "deleted": False,
        "source": "webhook",
        "labels": {"app.kubernetes.io/name": "x"},
        "annotations": {"a": "b"},
        "data": {"k": "v"},
        "binaryData": {},
    }
    rec.update(over)
    return rec


def paths(doc: dict[str, Any]) -> list[str]:
    return [v.path for v in changes.validate_record(doc)]


class TestWholeStringPatterns:
    @pytest.mark.parametrize(
        "field", ["namespace", "name", "runtimeId", "resourceVersion", "observedAt", "uid"]
    )
    def test_a_trailing_newline_never_matches(self, field: str) -> None:
        value = record()[field] + "\n"
        assert paths(record(**{field: value})) == [f"$.{field}"]

    @pytest.mark.parametrize("field", ["data", "binaryData", "labels", "annotations"])
    def test_map_keys_are_whole_kubernetes_keys(self, field: str) -> None:
        for key in ("k\n", "k y", "ключ", "", "k" * 400):
            errs = changes.validate_record(record(**{field: {key: "aGk="}}))
            assert errs and all(e.path.startswith(f"$.{field}") for e in errs), (field, key)
        assert changes.validate_record(record(**{field: {"a.b-c_D9": "aGk="}})) == []

    def test_label_keys_may_carry_a_prefix(self) -> None:
        assert changes.validate_record(record(labels={"kyma-project.io/runtime-id": "x"})) == []
        assert paths(record(labels={"Kyma.io/x": "y"})) == ["$.labels"]

    def test_binary_data_values_end_where_they_end(self) -> None:
        assert paths(record(binaryData={"b": "aGk=\n"})) == ["$.binaryData.b"]

    def test_patterns_are_translated_not_rewritten(self) -> None:
        rx = schemacheck.ecma_regex("^[a-z]+$")
        assert rx.search("abc") and not rx.search("abc\n") and not rx.search("a\nb")
        assert schemacheck.ecma_regex(r"^a\$[$]$").search("a$$")
        for differs in (r"^\d+$", r"^\s$", r"^\w$", "^a.b$", "^(?<n>a)$", r"\bx"):
            with pytest.raises(ValueError):
                schemacheck.ecma_regex(differs)

    def test_the_schema_documents_keep_ecma_anchors(self) -> None:
        for name in ("change-record.v1.json", "change-batch.v1.json"):
            text = str(changes.load_schema(name))
            assert "\\Z" not in text and "\\d" not in text and "\\s" not in text


class TestAsciiWhereKubernetesIsAscii:
    @pytest.mark.parametrize("rv", NON_ASCII_DIGITS + [" 1", "1 ", "\u00a0", "a\tb", "é"])
    def test_resource_version_is_printable_ascii(self, rv: str) -> None:
        assert paths(record(resourceVersion=rv)) == ["$.resourceVersion"]

    def test_resource_version_may_be_opaque_ascii(self) -> None:
        assert changes.validate_record(record(resourceVersion="abc/-_=1")) == []

    @pytest.mark.parametrize("ts", BAD_TIMES)
    def test_observed_at_is_a_real_utc_time(self, ts: str) -> None:
        assert paths(record(observedAt=ts)) == ["$.observedAt"]
        assert times.parse_time(ts) is None

    def test_observed_at_parses_leap_days_and_nanoseconds(self) -> None:
        assert changes.validate_record(record(observedAt="2028-02-29T23:59:59.123456789Z")) == []
        assert times.parse_time("2028-02-29T23:59:59.123456789Z") == datetime.datetime(
            2028, 2, 29, 23, 59, 59, 123456, tzinfo=datetime.UTC
        )
        assert times.parse_time("2027-02-29T00:00:00Z") is None

    @pytest.mark.parametrize("name", ["Team-A", "team_a", "tëam", "team-a-", "٣"])
    def test_names_and_namespaces(self, name: str) -> None:
        assert paths(record(namespace=name)) == ["$.namespace"]
        assert paths(record(name=name)) == ["$.name"]

    def test_uid_is_printable_ascii(self) -> None:
        assert changes.validate_record(record(uid="")) == []
        assert paths(record(uid="ü")) == ["$.uid"]

    @pytest.mark.parametrize("text", NON_ASCII_DIGITS + ["+1", "-1", " 1", "1_0", "", "1" * 21])
    def test_one_number_parser(self, text: str) -> None:
        assert numbers.ascii_int(text) is None
        assert numbers.ascii_int("0042") == 42


# An independent implementation whose regexes anchor like ECMA-262 (Rust's regex crate: '$'
# is the end of the text) and that checks date-time formats: ours must agree with it.
_ORACLE = jsonschema_rs.Draft202012Validator(
    changes.load_schema("change-record.v1.json"), validate_formats=True
)
_TRICKY = st.sampled_from(
    [
        "\n",
        "٣",
        "²",
        " ",
        "\u00a0",
        "é",
        "A",
        "_",
        ".",
        "-",
        "/",
        "0",
        "1",
        "9",
        "a",
        "z",
        "T",
        "Z",
        ":",
        "=",
    ]
)


@st.composite
def near_valid(draw: st.DrawFn) -> dict[str, Any]:
    rec = record()
    field = draw(
        st.sampled_from(["namespace", "name", "runtimeId", "resourceVersion", "observedAt", "uid"])
    )
    value = list(rec[field])
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["insert", "replace", "append"]))
        ch = draw(_TRICKY)
        i = draw(st.integers(0, max(0, len(value) - 1)))
        if op == "insert":
            value.insert(i, ch)
        elif op == "replace" and value:
            value[i] = ch
        else:
            value.append(ch)
    rec[field] = "".join(value)
    if draw(st.booleans()):
        rec["data"] = {"".join(draw(st.lists(_TRICKY, min_size=1, max_size=4))): "v"}
    return rec


@hypothesis.settings(max_examples=400, deadline=None, database=None)
@hypothesis.given(rec=near_valid())
def test_validation_agrees_with_an_ecma_262_implementation(rec: dict[str, Any]) -> None:
    assert (changes.validate_record(rec) == []) == _ORACLE.is_valid(rec), rec


class TestTotalComparison:
    @pytest.mark.parametrize(
        "poison",
        [V(rv, T0, False) for rv in NON_ASCII_DIGITS + ["", " "]]
        + [V("5", ts, False) for ts in BAD_TIMES]
        + [V("٣", "x", True)],
    )
    def test_a_poison_stored_version_is_replaced_by_any_valid_record(self, poison: V) -> None:
        assert changes.uninterpretable(poison) in ("resourceVersion", "observedAt")
        for incoming in (V("1", T0, False), V("99999", T1, True), V("abc", T0, False)):
            assert changes.compare(poison, incoming) == "newer"
        assert changes.compare(V("7", T0, False), poison) == "stale"  # never written over

    def test_old_rules_still_hold_between_valid_versions(self) -> None:
        assert changes.compare(V("9", T1, False), V("10", T0, False)) == "newer"
        assert changes.compare(V("10", T0, False), V("9", T1, False)) == "stale"
        assert changes.compare(V("a", T0, False), V("b", T1, False)) == "newer"
        assert changes.compare(V("7", T0, False), V("7", T1, True)) == "newer"
        assert changes.compare(V("7", T0, True), V("7", T1, False)) == "stale"
        # 64 digits (the schema's cap), beyond a 64-bit integer: still compared as numbers
        assert changes.compare(V("9" * 63, T1, False), V("1" + "0" * 63, T0, False)) == "newer"

    @hypothesis.settings(max_examples=500, deadline=None, database=None)
    @hypothesis.given(
        rv=st.text(max_size=70), ts=st.text(max_size=45), deleted=st.booleans(), good=st.booleans()
    )
    def test_compare_never_raises(self, rv: str, ts: str, deleted: bool, good: bool) -> None:
        odd = V(rv, ts, deleted)
        valid = V("12", T0, False)
        a = changes.compare(odd, valid)
        b = changes.compare(valid, odd)
        assert a in ("newer", "stale", "duplicate") and b in ("newer", "stale", "duplicate")
        if changes.uninterpretable(odd) is not None:
            assert (a, b) == ("newer", "stale")


class TestStoredObjects:
    def poison(self, **spec: Any) -> dict[str, Any]:
        obj = records.body(record(), "kcp-system")
        obj["spec"].update(spec)
        for k, v in spec.items():
            if k == "resourceVersion":
                obj["metadata"]["annotations"][records.ANN_RV] = v
            if k == "observedAt":
                obj["metadata"]["annotations"][records.ANN_OBSERVED] = v
        return obj

    @pytest.mark.parametrize(
        "spec",
        [
            {"resourceVersion": "²"},
            {"resourceVersion": "٣"},
            {"observedAt": "2026-13-45T10:00:00Z"},
            {"observedAt": "not a time"},
        ],
    )
    def test_stored_version_and_digest_item_never_raise(
        self, spec: dict[str, Any], caplog: pytest.LogCaptureFixture
    ) -> None:
        obj = self.poison(**spec)
        with caplog.at_level("WARNING", logger="listener.storage.records"):
            v = records.stored_version(obj)
        assert changes.compare(v, changes.version_of(record(resourceVersion="1"))) == "newer"
        assert obj["metadata"]["name"] in caplog.text and next(iter(spec)) in caplog.text
        item = records.digest_item(obj["metadata"])
        assert item is not None and item[next(iter(spec))] == next(iter(spec.values()))  # type: ignore[literal-required]

    def test_missing_or_mistyped_fields(self) -> None:
        for spec in ({}, {"resourceVersion": 5, "observedAt": None, "deleted": "yes"}, None, []):
            v = records.stored_version({"metadata": {"name": "rcm-x"}, "spec": spec})
            assert changes.uninterpretable(v) is not None
        assert records.digest_item(
            {"annotations": {records.ANN_NAMESPACE: "a", records.ANN_NAME: "b"}}
        ) == {
            "namespace": "a",
            "name": "b",
            "uid": "",
            "resourceVersion": "",
            "observedAt": "",
            "deleted": False,
            "epoch": 0,
        }
        assert records.digest_item({"annotations": "x"}) is None


class TestPollerDigest:
    def test_poison_entries_are_differences_to_repair(self) -> None:
        items: list[object] = [
            {
                "namespace": "a",
                "name": "two",
                "uid": "u",
                "resourceVersion": "²",
                "observedAt": T0,
                "deleted": False,
            },
            {
                "namespace": "a",
                "name": "date",
                "uid": "u",
                "resourceVersion": "5",
                "observedAt": "2026-13-45T00:00:00Z",
                "deleted": False,
            },
            {
                "namespace": "a",
                "name": "gone",
                "uid": "u",
                "resourceVersion": "٣",
                "observedAt": T0,
                "deleted": False,
            },
            {
                "namespace": "a",
                "name": "ok",
                "uid": "u",
                "resourceVersion": "5",
                "observedAt": T0,
                "deleted": False,
            },
            {"namespace": "a", "name": TRAILING_NEWLINE, "resourceVersion": "5"},
            {"name": "no-namespace"},
            "not an object",
            None,
            {"namespace": 1, "name": []},
        ]
        problems: collections.Counter[str] = collections.Counter()
        bad: list[str] = []
        digest = diff.load(items, problems, bad)
        assert problems == {"resourceVersion": 2, "observedAt": 1, "key": 5}
        assert set(digest) == {("a", "two"), ("a", "date"), ("a", "gone"), ("a", "ok")}
        assert len(bad) == 5
        # the live objects are resent; the one the runtime no longer has gets a tombstone
        assert diff.judge(digest[("a", "two")], "3", T1) == "changed"
        assert diff.judge(digest[("a", "date")], "3", T1) == "changed"
        assert diff.judge(digest[("a", "ok")], "5", T1) is None
        assert diff.leftover(digest[("a", "gone")], "100", T1) == "100"
        assert diff.resend(digest[("a", "two")], "3", T1)


class TestQueryLimit:
    def test_limit_is_ascii_digits_only(self) -> None:
        from listener.edge import api

        assert api._query_limit("٣") is None and api._query_limit("²") is None
        assert api._query_limit("3") == 3 and api._query_limit(None) == api.DEFAULT_LIMIT
        assert api._query_limit("0") is None and api._query_limit("5001") is None
        assert api._query_limit("1" * 7) is None and api._query_limit(" 3") is None


def test_batches_are_checked_item_by_item() -> None:
    good = record()
    bad = copy.deepcopy(good)
    bad["namespace"] = "Bad\n"
    doc = changes.batch([good, bad, {}, bad])  # type: ignore[list-item]
    got = [v.path for v in changes.validate_batch(doc)]
    assert got[0] == "$.items[1].namespace" and "$.items[3].namespace" in got
    assert sum(p == "$.items[2]" for p in got) == changes.MAX_ITEM_VIOLATIONS
    assert all(re.fullmatch(r"\$\.items\[[123]\](\.namespace)?", p) for p in got)


def test_tombstone_version_and_poller_port_read_ascii_digits_only() -> None:
    from poller import settings as poller_settings
    from tether.base import config
    from webhook import forwarder

    assert forwarder._not_below("12", "9") == "12" and forwarder._not_below("9", "12") == "9"
    assert forwarder._not_below("", "12") == "12"  # the review's own only without a list's
    assert forwarder._not_below("²", "5") == "²"  # not a number: the collection's, no crash
    assert poller_settings._bind("TETHER_POLLER_BIND", "0.0.0.0:8080") == "0.0.0.0:8080"
    for port in ("²", "٣٣", "+80", "99999"):
        with pytest.raises(config.SettingError):
            poller_settings._bind("TETHER_POLLER_BIND", f"0.0.0.0:{port}")
