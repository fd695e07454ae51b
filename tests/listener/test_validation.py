"""Body validation, records mapping, pagination and rate limiting (pure)."""

from __future__ import annotations

import base64
import datetime

import pytest

from listener.edge import ratelimit, validation
from listener.fleet import heartbeat
from listener.storage import records
from tether.kube import apitypes
from tether.wire import changes, conversion


def rec(name: str = "a", rv: str = "1", **kw: object) -> dict[str, object]:
    r = dict(
        conversion.from_configmap(
            {
                "metadata": {"namespace": "ns", "name": name, "uid": "u", "resourceVersion": rv},
                "data": {"k": "v"},
            },
            runtime_id="rt-1",
            source="poller",
        )
    )
    r.update(kw)
    return r


@pytest.mark.parametrize(
    ("ct", "ok"),
    [
        ("application/json", True),
        ("Application/JSON; charset=UTF-8", True),
        ("application/merge-patch+json", True),
        ('application/json; charset="utf-8"', True),
        ("application/json; charset=latin-1", False),
        ("text/json", False),
        ("", False),
        (None, False),
        ("application/jsonx", False),
        ("multipart/form-data", False),
    ],
)
def test_media_type(ct: str | None, ok: bool) -> None:
    assert validation.media_type_ok(ct) is ok


def test_parse_json() -> None:
    assert validation.parse_json(b'{"a": [1, 2]}') == {"a": [1, 2]}
    for bad in (
        b"",
        b"{",
        b"\xff",
        b"NaN",
        b"[-Infinity]",
        b'{"a":' * 40 + b"1" + b"}" * 40,
        b'{"a":' * 5000 + b"1" + b"}" * 5000,
    ):
        p = validation.parse_json(bad)
        assert isinstance(p, validation.Problem) and p.status == 400 and p.reason == "invalid_json"
    # structure caps, checked before or while parsing (bounded memory whatever the shape)
    for bad, needle in (
        (b"[" * 5000 + b"]" * 5000, "arrays"),
        (b"[" + b"[]," * 100 + b"[]]", "arrays"),
        (b"[" + b"{}," * 3000 + b"{}]", "objects"),
        (b"{" + b",".join(b'"k%d":""' % i for i in range(10_001)) + b"}", "keys"),
    ):
        p = validation.parse_json(bad)
        assert isinstance(p, validation.Problem) and (p.status, p.reason) == (400, "schema")
        assert needle in p.details[0]["message"]
    # brackets inside strings are not arrays
    assert validation.parse_json(b'{"data": {"k": "' + b"[" * 100_000 + b'"}}') == {
        "data": {"k": "[" * 100_000}
    }


def test_records_checks_in_order() -> None:
    one = rec()
    assert validation.records(one, "rt-1") == [one]
    p = validation.records([rec()], "rt-1")
    assert isinstance(p, validation.Problem) and p.status == 400
    p = validation.records(rec(resourceVersion=1), "rt-1")
    assert isinstance(p, validation.Problem) and p.details[0]["path"] == "$.resourceVersion"
    p = validation.records(changes.batch([rec(), rec(runtimeId="rt-2")]), "rt-1")  # type: ignore[list-item]
    assert isinstance(p, validation.Problem) and p.status == 403
    assert p.details == [
        {"path": "$.items[1].runtimeId", "message": "must equal the runtime ID of the URL"}
    ]
    p = validation.records(rec(data={"k": "x" * validation.MAX_CONFIGMAP_BYTES}), "rt-1")
    assert isinstance(p, validation.Problem) and p.status == 413


def test_content_bytes_counts_decoded_binary() -> None:
    blob = base64.b64encode(b"\x00" * 300).decode()
    assert (
        validation.content_bytes({"data": {"ab": "é"}, "binaryData": {"b": blob}})
        == 2 + 2 + 1 + 300
    )


def test_object_name_and_body() -> None:
    key = records.Key("rt-1", "", "ns", "a" * 253)
    name = records.object_name(key)
    assert name.startswith("rcm-") and len(name) == 44
    assert name != records.object_name(records.Key("rt-1", "", "ns2", "a" * 253))
    b = records.body(rec(), "kcp-system")
    assert b["metadata"]["name"] == records.object_name(records.Key("rt-1", "", "ns", "a"))
    assert b["metadata"]["labels"][apitypes.RUNTIME_ID_LABEL] == "rt-1"
    assert b["spec"]["data"] == {"k": "v"} and "apiVersion" not in b["spec"]
    item = records.digest_item(b["metadata"])
    assert item == {
        "namespace": "ns",
        "name": "a",
        "uid": "u",
        "resourceVersion": "1",
        "observedAt": b["spec"]["observedAt"],
        "deleted": False,
        "epoch": 0,
    }
    assert records.digest_item({"annotations": {}}) is None


def test_updated_keeps_foreign_metadata() -> None:
    stored = records.body(rec(rv="1"), "kcp-system")
    stored["metadata"].update(resourceVersion="77", finalizers=["x/y"], managedFields=[{}])
    stored["metadata"]["labels"]["team"] = "a"
    new = records.updated(stored, rec(rv="2", deleted=True, data={}))
    assert new["metadata"]["resourceVersion"] == "77"
    assert new["metadata"]["finalizers"] == ["x/y"] and "managedFields" not in new["metadata"]
    assert new["metadata"]["labels"]["team"] == "a"
    assert new["metadata"]["annotations"][records.ANN_DELETED] == "true"
    assert new["spec"]["resourceVersion"] == "2"
    assert records.matches(new, records.Key("rt-1", "", "ns", "a"))
    assert not records.matches(new, records.Key("rt-1", "", "ns", "b"))


def test_page_and_continue_tokens() -> None:
    items = [
        changes.DigestItem(
            namespace=ns, name=n, uid="", resourceVersion="1", observedAt="t", deleted=False
        )
        for ns in ("b", "a")
        for n in ("y", "x", "z")
    ]
    seen, pos = [], None
    for _ in range(4):
        chunk, pos = records.page(items, pos, 4)
        seen += [(i["namespace"], i["name"]) for i in chunk]
        token = records.encode_continue(pos)
        pos = records.decode_continue(token)
        if pos is None:
            break
    assert seen == sorted(seen) and len(seen) == 6
    assert records.page(items, None, 6)[1] is None
    for bad in ("%%", "e30", "WzFd", "x" * 2000, "WyJhIiwxXQ"):
        with pytest.raises(ValueError):
            records.decode_continue(bad)


def test_token_bucket() -> None:
    now = [0.0]
    b = ratelimit.TokenBuckets(rate=10, burst=500, clock=lambda: now[0])
    assert b.take("rt", 500) == 0.0
    wait = b.take("rt", 20)
    assert wait == pytest.approx(2.0)
    assert ratelimit.retry_after(wait) == 2 and ratelimit.retry_after(0.01) == 1
    assert b.take("other", 1) == 0.0  # buckets are per runtime
    now[0] = 2.0
    assert b.take("rt", 20) == 0.0
    assert b.take("rt", 10_000) > 0  # capped at the burst, never impossible
    cap = ratelimit.InFlight(1)
    assert cap.acquire("rt") and not cap.acquire("rt")
    cap.release("rt")
    assert cap.acquire("rt")


def test_silent_counts() -> None:
    now = datetime.datetime(2026, 11, 30, 12, tzinfo=datetime.UTC)
    times = [now - datetime.timedelta(seconds=s) for s in (5, 70, 400, 4000)]
    assert heartbeat.silent_counts(times, now, (60, 300, 3600)) == {60: 3, 300: 2, 3600: 1}
    assert heartbeat.lease_name("Rt_1.x") != heartbeat.lease_name("rt_1.x")


def test_write_cache_keeps_metadata_and_version_bounded() -> None:
    from listener.storage import writecache

    cache = writecache.WriteCache(2)
    objs = []
    for i in range(3):
        b = records.body(rec(name=f"o{i}", rv=str(10 + i)), "kcp-system")
        b["metadata"].update(resourceVersion=str(500 + i), managedFields=[{"x": 1}])
        objs.append(b)
        cache.remember(b)
    first = records.object_name(records.Key("rt-1", "", "ns", "o0"))
    last = records.object_name(records.Key("rt-1", "", "ns", "o2"))
    assert cache.get(first) is None  # least recently used dropped
    entry = cache.get(last)
    assert entry is not None and entry.version.resource_version == "12"
    assert entry.metadata["resourceVersion"] == "502" and "managedFields" not in entry.metadata
    cache.drop(last)
    assert cache.get(last) is None
    off = writecache.WriteCache(0)
    off.remember(objs[0])
    assert off.get(objs[0]["metadata"]["name"]) is None
