"""Refusals: each with the right status and JSON error, audited and counted, nothing stored.

Refusals before the caller was authenticated are audited in aggregate
(``listener.edge.refusalsummary``): a flood of them is a few lines with counts, the runtime ID
of the path only as claimed, next to a runtime whose request still gets through."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import requests
from kubernetes import client

from listener.edge import refusalsummary
from testing.listenerenv import (
    Env,
    ListenerProcess,
    Runtime,
    create_kyma,
    expired,
    metric_value,
)
from tether.kube import apitypes
from tether.wire import changes

pytestmark = pytest.mark.processes  # starts processes of its own (testing/tiers.py)


def changes_url(listener: ListenerProcess, runtime_id: str) -> str:
    return f"{listener.url}/v1/runtimes/{runtime_id}/changes"


def assert_refused(
    resp: requests.Response, status: int, error: str, reason: str | None = None
) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    assert resp.headers["Content-Type"].startswith("application/json")
    body: dict[str, Any] = resp.json()
    assert set(body) == {"error", "details"}
    assert body["error"] == error
    if reason is not None:
        assert body["details"]["reason"] == reason
    return body


def refusals_for(listener: ListenerProcess, runtime_id: str) -> list[str]:
    """The per-event refusals of an authenticated runtime."""
    return [
        e["reason"]
        for e in listener.audit()
        if e.get("event") == "refused" and e.get("runtime") == runtime_id
    ]


def auth_refusals(listener: ListenerProcess, reason: str) -> float:
    return metric_value(listener.metrics(), "tether_listener_auth_refusals_total", reason=reason)


def test_no_certificate_is_401(listener: ListenerProcess, runtime: Callable[..., Runtime]) -> None:
    rt = runtime()
    s = rt.session(cert=None)
    before = auth_refusals(listener, "no_certificate")
    assert_refused(
        s.post(changes_url(listener, rt.id), json=rt.record("a", 1), timeout=10),
        401,
        "unauthorized",
        "no_certificate",
    )
    assert_refused(
        s.get(f"{listener.url}/v1/runtimes/{rt.id}/state", timeout=10),
        401,
        "unauthorized",
        "no_certificate",
    )
    assert rt.env.stored(rt.id) == []
    assert auth_refusals(listener, "no_certificate") == before + 2
    # an unauthenticated caller's runtime ID is never audited as the runtime
    assert refusals_for(listener, rt.id) == []


@pytest.mark.parametrize("case", ["foreign_ca", "expired"])
def test_invalid_chain_fails_the_handshake(
    listener: ListenerProcess, runtime: Callable[..., Runtime], case: str
) -> None:
    rt = runtime()
    if case == "foreign_ca":
        files, reason = rt.issue(rt.env.foreign_ca), "unknown_ca"
    else:
        files, reason = rt.issue(**expired()), "certificate_expired"
    before = metric_value(
        listener.metrics(), "tether_listener_tls_handshake_refusals_total", reason=reason
    )
    s = rt.session(cert=files)
    with pytest.raises((requests.exceptions.SSLError, requests.exceptions.ConnectionError)):
        s.post(changes_url(listener, rt.id), json=rt.record("a", 1), timeout=10)
    assert rt.env.stored(rt.id) == []
    after = metric_value(
        listener.metrics(), "tether_listener_tls_handshake_refusals_total", reason=reason
    )
    assert after == before + 1
    assert any(e.get("reason") == "tls_" + reason for e in listener.audit())


def test_certificate_of_another_runtime_is_403(
    listener: ListenerProcess, runtime: Callable[..., Runtime]
) -> None:
    rt, other = runtime(), runtime()
    # other's own valid certificate, used on rt's URL
    s = other.session()
    assert_refused(
        s.post(changes_url(listener, rt.id), json=rt.record("a", 1), timeout=10),
        403,
        "forbidden",
        "cn_mismatch",
    )
    assert_refused(
        s.get(f"{listener.url}/v1/runtimes/{rt.id}/state", timeout=10),
        403,
        "forbidden",
        "cn_mismatch",
    )
    assert rt.env.stored(rt.id) == []


def test_san_not_matching_the_kyma_domain_is_403(
    listener: ListenerProcess, runtime: Callable[..., Runtime]
) -> None:
    rt = runtime()
    s = rt.session(cert=rt.issue(dns=["c-other.kyma.example.com"]))
    before = auth_refusals(listener, "san_mismatch")
    assert_refused(
        s.post(changes_url(listener, rt.id), json=rt.record("a", 1), timeout=10),
        403,
        "forbidden",
        "san_mismatch",
    )
    assert rt.env.stored(rt.id) == []
    assert auth_refusals(listener, "san_mismatch") == before + 1
    assert refusals_for(listener, rt.id) == []


def test_unknown_runtime_is_403(listener: ListenerProcess, runtime: Callable[..., Runtime]) -> None:
    rt = runtime(kyma_cr=False)
    assert_refused(
        rt.session().post(changes_url(listener, rt.id), json=rt.record("a", 1), timeout=10),
        403,
        "forbidden",
        "unknown_runtime",
    )
    assert rt.env.stored(rt.id) == []


def test_kyma_being_deleted_or_without_domain_is_403(
    listener: ListenerProcess, runtime: Callable[..., Runtime]
) -> None:
    deleting = runtime(kyma_cr=False)
    env = deleting.env
    obj = create_kyma(
        env.api, env.namespace, deleting.id, deleting.domain, finalizers=["test.tether/hold"]
    )
    objects = client.CustomObjectsApi(env.api)
    name = obj["metadata"]["name"]
    objects.delete_namespaced_custom_object(
        apitypes.KYMAS.group, apitypes.KYMAS.version, env.namespace, apitypes.KYMAS.plural, name
    )
    try:
        assert_refused(
            deleting.session().post(
                changes_url(listener, deleting.id), json=deleting.record("a", 1), timeout=10
            ),
            403,
            "forbidden",
            "runtime_deleting",
        )
    finally:
        objects.patch_namespaced_custom_object(
            apitypes.KYMAS.group,
            apitypes.KYMAS.version,
            env.namespace,
            apitypes.KYMAS.plural,
            name,
            {"metadata": {"finalizers": None}},
            _content_type="application/merge-patch+json",
        )
    no_domain = runtime(kyma_cr=False)
    create_kyma(env.api, env.namespace, no_domain.id, None)
    assert_refused(
        no_domain.session().post(
            changes_url(listener, no_domain.id), json=no_domain.record("a", 1), timeout=10
        ),
        403,
        "forbidden",
        "domain_missing",
    )
    assert env.stored(deleting.id) == [] and env.stored(no_domain.id) == []


def test_payload_refusals(listener: ListenerProcess, runtime: Callable[..., Runtime]) -> None:
    rt = runtime()
    s = rt.session()
    url = changes_url(listener, rt.id)
    good = rt.record("a", 1)
    raw = json.dumps(good).encode()

    assert_refused(
        s.post(url, data=raw, headers={"Content-Type": "text/plain"}, timeout=10),
        415,
        "unsupported media type",
    )
    assert_refused(s.post(url, data=raw, timeout=10), 415, "unsupported media type")
    assert_refused(
        s.post(
            url, data=raw, headers={"Content-Type": "application/json; charset=latin-1"}, timeout=10
        ),
        415,
        "unsupported media type",
    )

    js = {"Content-Type": "application/json"}
    for bad in (
        b"{",
        b"[1,",
        b"\xff\xfe",
        b"NaN",
        b'{"a": Infinity}',
        b'{"a":' * 100 + b"1" + b"}" * 100,
    ):
        body = assert_refused(s.post(url, data=bad, headers=js, timeout=10), 400, "invalid JSON")
        assert body["details"][0]["path"] == "$"
    # structure caps while parsing: arrays (only a batch's items is one), objects, keys
    for bad in (b"[" * 100 + b"]" * 100, b"[" + b"{}," * 3000 + b"{}]"):
        body = assert_refused(
            s.post(url, data=bad, headers=js, timeout=10), 400, "schema violation"
        )
        assert body["details"][0]["path"] == "$"

    violations: list[tuple[dict[str, Any] | list[Any], str]] = [
        ([good], "$"),
        ({**good, "resourceVersion": 5}, "$.resourceVersion"),
        ({k: v for k, v in good.items() if k != "uid"}, "$"),
        ({**good, "namespace": "Not_Valid"}, "$.namespace"),
        ({**good, "data": {"k": 1}}, "$.data.k"),
        ({**good, "extra": True}, "$"),
        ({**good, "observedAt": "yesterday"}, "$.observedAt"),
        ({**good, "deleted": True}, "$.data"),
        (changes.batch([]), "$.items"),
        (changes.batch([{**good, "source": "cron"}]), "$.items[0].source"),  # type: ignore[list-item]
    ]
    for doc, path in violations:
        body = assert_refused(s.post(url, json=doc, timeout=10), 400, "schema violation")
        assert path in [d["path"] for d in body["details"]], (doc, body)
        assert all(set(d) == {"path", "message"} for d in body["details"])

    other = runtime()
    body = assert_refused(
        s.post(
            url,
            json=changes.batch([good, other.record("b", 2)]),  # type: ignore[list-item]
            timeout=10,
        ),
        403,
        "runtimeId mismatch",
    )
    assert body["details"] == [
        {"path": "$.items[1].runtimeId", "message": "must equal the runtime ID of the URL"}
    ]

    big = rt.record("big", 3, data={"k": "x" * (1024 * 1024 + 1)})
    body = assert_refused(s.post(url, json=big, timeout=10), 413, "record too large")
    assert body["details"][0]["path"] == "$"

    huge = b"{" + b" " * (3 * 1024 * 1024) + b"}"
    r = s.post(url, data=huge, headers=js, timeout=30)
    assert_refused(r, 413, "request too large")
    # refused before its body was read: the connection closes, and the answer says so, or
    # the client would send its next request into a connection being discarded (once it
    # said keep-alive: the next request, the chunked one below, broke in one run of ten)
    assert r.headers.get("Connection") == "close", r.headers

    def chunks() -> Any:
        for _ in range(40):
            yield b" " * (100 * 1024)

    assert_refused(s.post(url, data=chunks(), headers=js, timeout=30), 413, "request too large")

    assert rt.env.stored(rt.id) == []
    reasons = refusals_for(listener, rt.id)
    for reason in (
        "media_type",
        "invalid_json",
        "schema",
        "runtime_id_mismatch",
        "record_too_large",
        "too_large",
    ):
        assert reason in reasons
    audit_text = listener.audit_file.read_text()
    assert "x" * 100 not in audit_text and "BEGIN" not in audit_text


def test_refusals_are_counted_by_reason(
    listener: ListenerProcess, runtime: Callable[..., Runtime]
) -> None:
    rt = runtime()
    before = listener.metrics()
    rt.session(cert=rt.issue(dns=["elsewhere.example.com"])).post(
        changes_url(listener, rt.id), json=rt.record("a", 1), timeout=10
    )
    rt.session().post(
        changes_url(listener, rt.id),
        data=b"{",
        timeout=10,
        headers={"Content-Type": "application/json"},
    )
    after = listener.metrics()
    for name, labels in (
        ("tether_listener_auth_refusals_total", {"reason": "san_mismatch"}),
        ("tether_listener_validation_failures_total", {"reason": "invalid_json"}),
    ):
        assert metric_value(after, name, **labels) == metric_value(before, name, **labels) + 1
    assert rt.id not in after  # no per-runtime series


def test_unknown_routes_and_methods_are_json(
    listener: ListenerProcess, runtime: Callable[..., Runtime]
) -> None:
    rt = runtime()
    s = rt.session()
    assert_refused(s.get(f"{listener.url}/v2/nothing", timeout=10), 404, "not found")
    assert_refused(s.delete(changes_url(listener, rt.id), timeout=10), 405, "method not allowed")


def test_refusals_of_large_bodies_reach_the_client(
    listener: ListenerProcess, runtime: Callable[..., Runtime]
) -> None:
    """A refused request whose body was never read is still answered (the listener reads
    the rest of the body first), so a sender sees 401/403/415, not a broken connection."""
    rt = runtime()
    big: Any = changes.batch(
        [
            rt.record(f"big{i}", 1, data={"k": "x" * (900 * 1024)})  # type: ignore[misc]
            for i in range(3)
        ]
    )  # 2.7 MiB: under the cap, over socket buffers
    for _ in range(3):
        assert_refused(
            rt.session(cert=None).post(changes_url(listener, rt.id), json=big, timeout=30),
            401,
            "unauthorized",
        )
        assert_refused(
            rt.session(cert=rt.issue(dns=["elsewhere.example.com"])).post(
                changes_url(listener, rt.id), json=big, timeout=30
            ),
            403,
            "forbidden",
            "san_mismatch",
        )
        assert_refused(
            rt.session().post(
                changes_url(listener, rt.id),
                data=json.dumps(big),
                headers={"Content-Type": "text/plain"},
                timeout=30,
            ),
            415,
            "unsupported media type",
        )
    assert rt.env.stored(rt.id) == []


# -- unauthenticated refusals, audited in aggregate ------------------------------------


def summaries(listener: ListenerProcess) -> list[dict[str, Any]]:
    return [e for e in listener.audit() if e.get("event") == refusalsummary.EVENT]


def test_a_flood_of_unauthenticated_requests_is_a_few_audit_lines_with_counts(
    listener_env: Env, runtime: Callable[..., Runtime]
) -> None:
    """300 refused requests from one source (150 without a certificate, 150 with another
    runtime's valid certificate), each naming a runtime ID of its choosing, on kept-alive
    connections: a bounded number of ``auth_refused_summary`` lines (per reason, source,
    minute and worker; written at the worker's exit here) whose counts add up to 300, the
    IDs only as a bounded ``claimed_runtimes`` sample, never as ``runtime``; a runtime's
    request between them is served and audited as before."""
    workers = 2
    # several workers: /metrics is their aggregate only with a multiprocess folder, as the
    # manifests set it (without it, the answering worker's own counts: 0 or 150 by chance)
    metrics_dir = listener_env.dir / f"metrics-flood-{uuid.uuid4().hex[:8]}"
    flooded = ListenerProcess(
        listener_env,
        "flood",
        TETHER_LISTENER_WORKERS=str(workers),
        PROMETHEUS_MULTIPROC_DIR=str(metrics_dir),
        TETHER_LISTENER_GRACEFUL_TIMEOUT_SECONDS="25",
    )  # exit's flush budget
    try:
        good, other = runtime(), runtime()
        anonymous, foreign = good.session(cert=None), other.session()
        claimed = [f"claimed-{i:03d}" for i in range(300)]
        for i, rid in enumerate(claimed):
            if i % 2 == 0:
                assert_refused(
                    anonymous.post(changes_url(flooded, rid), json=good.record("a", 1), timeout=10),
                    401,
                    "unauthorized",
                    "no_certificate",
                )
            else:
                assert_refused(
                    foreign.get(f"{flooded.url}/v1/runtimes/{rid}/state", timeout=10),
                    403,
                    "forbidden",
                    "cn_mismatch",
                )
            if i == 150:  # a well-behaved runtime in the middle of the flood
                r = good.session().post(
                    changes_url(flooded, good.id), json=good.record("a", 1), timeout=10
                )
                assert r.status_code == 200, r.text
        metrics = flooded.metrics()
        assert (
            metric_value(metrics, "tether_listener_auth_refusals_total", reason="no_certificate")
            == 150
        )
        assert (
            metric_value(metrics, "tether_listener_auth_refusals_total", reason="cn_mismatch")
            == 150
        )
    finally:
        flooded.stop()  # the workers write what they counted when they exit
    lines = summaries(flooded)
    # per worker: two reasons from one source, in at most two minutes (a flood of a few
    # seconds may cross one minute's end)
    assert 2 <= len(lines) <= 2 * 2 * workers, lines
    assert sum(x["count"] for x in lines) == 300
    by_reason = {
        r: sum(x["count"] for x in lines if x["reason"] == r)
        for r in ("no_certificate", "cn_mismatch")
    }
    assert by_reason == {"no_certificate": 150, "cn_mismatch": 150}
    for x in lines:
        assert x["source"] == "127.0.0.1" and x["status"] == (
            401 if x["reason"] == "no_certificate" else 403
        )
        assert "runtime" not in x and "overflow" not in x
        assert 1 <= len(x["claimed_runtimes"]) <= refusalsummary.MAX_CLAIMED
        assert set(x["claimed_runtimes"]) <= set(claimed)
        assert x.get("claimed_runtimes_truncated", False) is (
            x["count"] > len(x["claimed_runtimes"])
        )
        if x["reason"] == "cn_mismatch":  # the certificate passed its chain: its CN is named
            assert x["certificate_cns"] == [other.id]
        assert x["minute"].endswith(":00+00:00") and x["seconds"] == 60
    audit = flooded.audit()
    # no per-request line for them, and no claimed ID in a runtime field
    assert not [e for e in audit if e.get("event") == "refused"]
    assert not [e for e in audit if e.get("runtime") in set(claimed)]
    # the runtime's own change: one line, with its (authenticated) runtime ID
    changed = [e for e in audit if e.get("event") == "change" and e.get("runtime") == good.id]
    assert [(e["object"], e["outcome"]) for e in changed] == [("team-a/a", "persisted")]
    assert len(audit) <= len(lines) + 10  # the log stays small


def test_refusal_summaries_are_written_when_their_window_ends(
    listener_env: Env, runtime: Callable[..., Runtime]
) -> None:
    """The flush thread writes a window's lines once it ends, without another request
    and without the worker exiting (a 2 s window here)."""
    short = ListenerProcess(
        listener_env, "window", TETHER_LISTENER_REFUSAL_AUDIT_INTERVAL_SECONDS="2"
    )
    try:
        rt = runtime()
        s = rt.session(cert=rt.issue(dns=["elsewhere.example.com"]))
        for _ in range(5):
            assert_refused(
                s.post(changes_url(short, rt.id), json=rt.record("a", 1), timeout=10),
                403,
                "forbidden",
                "san_mismatch",
            )
        deadline = time.monotonic() + 15
        while sum(x["count"] for x in summaries(short)) < 5 and time.monotonic() < deadline:
            time.sleep(0.2)
        lines = summaries(short)
        assert sum(x["count"] for x in lines) == 5, lines
        assert {(x["reason"], x["seconds"]) for x in lines} == {("san_mismatch", 2)}
        assert all(x["claimed_runtimes"] == [rt.id] for x in lines)
        assert all(x["certificate_cns"] == [rt.id] for x in lines)
    finally:
        short.stop()
