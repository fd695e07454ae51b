"""Property-based fuzzing of the running listener: thousands of generated requests
(mutated records and batches, arbitrary JSON and bytes, odd media types, paths, methods
and query strings) with a valid runtime certificate: never a 5xx, always a JSON answer.

The mutations include the values the issue found (issue 9) that the schema accepted and the
code could not handle: non-ASCII digits as resourceVersion or limit, impossible dates, a
name ending in a newline; afterwards nothing stored holds a key the schema refuses."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator
from typing import Any

import hypothesis
import pytest
import requests
from hypothesis import strategies as st

from listener.storage import records
from testing.listenerenv import Env, ListenerProcess, Runtime, create_kyma
from tether.wire import changes

EXAMPLES = 2000

json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20)
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
# values that once got through: '²'.isdigit() but int('²') raises; '$' accepts a trailing
# newline; the old observedAt pattern took month 13
POISON = [
    "٣",
    "²",
    "４２",
    "1 2",
    "1\n",
    "a\n",
    "team-a\n",
    "2026-13-45T10:00:00Z",
    "2026-02-30T00:00:00Z",
    "2026-11-30T10:00:00Z\n",
    "\u00a0",
    "ü",
    "",
    "0",
    "-1",
    "1e3",
    "9" * 70,
    "1" * 64,
]
poison = st.sampled_from(POISON)
FIELDS = [
    "apiVersion",
    "kind",
    "runtimeId",
    "namespace",
    "name",
    "uid",
    "resourceVersion",
    "observedAt",
    "deleted",
    "source",
    "labels",
    "annotations",
    "data",
    "binaryData",
    "items",
]


@pytest.fixture(scope="module")
def fuzz_runtime(listener_env: Env) -> Runtime:
    rid = "rt-fuzz"
    dom = "c-fuzz.kyma.example.com"
    create_kyma(listener_env.api, listener_env.namespace, rid, dom)
    pair = listener_env.runtime_ca.issue(rid, dns_names=[dom], client=True)
    c, k = listener_env.dir / "fuzz.crt", listener_env.dir / "fuzz.key"
    pair.write(c, k)
    return Runtime(rid, dom, c, k, listener_env)


@pytest.fixture(scope="module")
def fuzz_session(fuzz_runtime: Runtime) -> Iterator[requests.Session]:
    s = fuzz_runtime.session()
    yield s
    s.close()


@st.composite
def mutated_record(draw: st.DrawFn, rt: Runtime) -> dict[str, Any]:
    rec = rt.record(
        draw(st.sampled_from(["a", "b", "c"])),
        draw(st.integers(1, 50)),
        deleted=draw(st.booleans()),
        data=draw(
            st.dictionaries(
                st.one_of(st.text("abcXYZ-_.", min_size=1, max_size=5), poison),
                st.text(max_size=10),
                max_size=3,
            )
        ),
    )
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.sampled_from(["set", "drop", "add"]))
        field = draw(st.sampled_from(FIELDS))
        if op == "set":
            rec[field] = draw(
                st.one_of(json_value, poison, poison, st.just(str(rec.get(field, "")) + "\n"))
            )
        elif op == "drop":
            rec.pop(field, None)
        else:
            rec[draw(st.text(max_size=8))] = draw(json_value)
    return rec


@st.composite
def request_spec(draw: st.DrawFn, rt: Runtime) -> dict[str, Any]:
    kind = draw(st.sampled_from(["record", "batch", "json", "bytes", "state", "other"]))
    runtime_id = draw(
        st.one_of(st.just(rt.id), st.just(rt.id), st.just(rt.id), st.text(min_size=1, max_size=70))
    )
    path_id = urllib.parse.quote(runtime_id, safe="")
    ctype = draw(
        st.one_of(
            st.just("application/json"),
            st.just("application/json; charset=utf-8"),
            st.sampled_from(
                [
                    "text/plain",
                    "application/x-www-form-urlencoded",
                    "application/json; charset=utf-16",
                    "",
                ]
            ),
            st.text(st.characters(min_codepoint=33, max_codepoint=126), max_size=30),
        )
    )
    spec: dict[str, Any] = {
        "method": "POST",
        "path": f"/v1/runtimes/{path_id}/changes",
        "headers": {"Content-Type": ctype} if ctype else {},
        "data": b"",
        "params": None,
    }
    if kind == "record":
        spec["data"] = json.dumps(draw(mutated_record(rt))).encode()
    elif kind == "batch":
        items = draw(st.lists(mutated_record(rt), min_size=0, max_size=4))
        doc = {
            "apiVersion": "tether.kyma-project.io/v1",
            "kind": "ConfigMapChangeList",
            "items": items,
        }
        if draw(st.booleans()):
            doc[draw(st.sampled_from(["apiVersion", "kind", "items", "x"]))] = draw(json_value)
        spec["data"] = json.dumps(doc).encode()
    elif kind == "json":
        spec["data"] = json.dumps(draw(json_value)).encode()
    elif kind == "bytes":
        spec["data"] = draw(st.binary(max_size=200))
    elif kind == "state":
        spec["method"] = "GET"
        spec["path"] = f"/v1/runtimes/{path_id}/state"
        spec["params"] = {
            k: draw(st.one_of(st.text(max_size=12), poison))
            for k in draw(st.lists(st.sampled_from(["limit", "continue", "x"]), max_size=2))
        }
    else:
        spec["method"] = draw(st.sampled_from(["GET", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]))
        spec["path"] = draw(
            st.sampled_from(
                [
                    spec["path"],
                    "/",
                    "/v1/runtimes/",
                    "/readyz",
                    "/v1/runtimes//changes",
                    "/openapi.json",
                ]
            )
        )
    return spec


def test_fuzz_never_5xx(
    listener: ListenerProcess, fuzz_runtime: Runtime, fuzz_session: requests.Session
) -> None:
    statuses: dict[int, int] = {}

    @hypothesis.settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(hypothesis.HealthCheck),
    )
    @hypothesis.given(spec=request_spec(fuzz_runtime))
    def run(spec: dict[str, Any]) -> None:
        for _attempt in range(5):
            r = fuzz_session.request(
                spec["method"],
                listener.url + spec["path"],
                data=spec["data"],
                headers=spec["headers"],
                params=spec["params"],
                timeout=60,
            )
            # the KCP itself timing out on this overloaded machine is not the client's
            # doing: retried like a sender would, and counted
            if not (
                r.status_code == 503
                and spec["method"] != "HEAD"
                and r.json()["error"] == "KCP API unavailable"
            ):
                break
            statuses[-503] = statuses.get(-503, 0) + 1
        statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
        assert r.status_code < 500, (spec, r.status_code, r.text[:300])
        if r.status_code >= 400 and spec["method"] != "HEAD":
            body = r.json()
            assert set(body) == {"error", "details"}, body

    run()
    assert sum(n for s, n in statuses.items() if s > 0) >= EXAMPLES
    assert statuses.get(-503, 0) <= EXAMPLES // 100  # KCP overload retries stay rare
    assert statuses.get(200, 0) > 0 and statuses.get(400, 0) > 0  # both paths were exercised
    assert "unexpected error" not in listener.log_file.read_text()
    stored = fuzz_runtime.env.stored(fuzz_runtime.id)
    assert stored  # some records got through
    for obj in stored:  # none under a key or version the schema refuses
        spec = obj["spec"]
        assert changes.field_ok("namespace", spec["namespace"]), spec["namespace"]
        assert changes.field_ok("name", spec["name"]), spec["name"]
        assert changes.uninterpretable(records.stored_version(obj)) is None, spec
    print("fuzz statuses:", dict(sorted(statuses.items())))
