"""Refusals: each with the right status and JSON error, audited and counted, nothing stored."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import requests
from kubernetes import client

from common import changes, kyma
from testing.listenerenv import ListenerProcess, Runtime, create_kyma, expired, metric_value


def changes_url(listener: ListenerProcess, runtime_id: str) -> str:
    return f"{listener.url}/v1/runtimes/{runtime_id}/changes"


def assert_refused(resp: requests.Response, status: int, error: str,
                   reason: str | None = None) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    assert resp.headers["Content-Type"].startswith("application/json")
    body: dict[str, Any] = resp.json()
    assert set(body) == {"error", "details"}
    assert body["error"] == error
    if reason is not None:
        assert body["details"]["reason"] == reason
    return body


def refusals_for(listener: ListenerProcess, runtime_id: str) -> list[str]:
    return [e["reason"] for e in listener.audit()
            if e.get("event") == "refused" and e.get("runtime") == runtime_id]


def test_no_certificate_is_401(listener: ListenerProcess, runtime: Callable[..., Runtime]) -> None:
    rt = runtime()
    s = rt.session(cert=None)
    assert_refused(s.post(changes_url(listener, rt.id), json=rt.record("a", 1), timeout=10),
                   401, "unauthorized", "no_certificate")
    assert_refused(s.get(f"{listener.url}/v1/runtimes/{rt.id}/state", timeout=10),
                   401, "unauthorized", "no_certificate")
    assert rt.env.stored(rt.id) == []
    assert refusals_for(listener, rt.id) == ["no_certificate", "no_certificate"]


@pytest.mark.parametrize("case", ["foreign_ca", "expired"])
def test_invalid_chain_fails_the_handshake(
    listener: ListenerProcess, runtime: Callable[..., Runtime], case: str
) -> None:
    rt = runtime()
    if case == "foreign_ca":
        files, reason = rt.issue(rt.env.foreign_ca), "unknown_ca"
    else:
        files, reason = rt.issue(**expired()), "certificate_expired"
    before = metric_value(listener.metrics(), "tether_listener_tls_handshake_refusals_total",
                          reason=reason)
    s = rt.session(cert=files)
    with pytest.raises((requests.exceptions.SSLError, requests.exceptions.ConnectionError)):
        s.post(changes_url(listener, rt.id), json=rt.record("a", 1), timeout=10)
    assert rt.env.stored(rt.id) == []
    after = metric_value(listener.metrics(), "tether_listener_tls_handshake_refusals_total",
                         reason=reason)
    assert after == before + 1
    assert any(e.get("reason") == "tls_" + reason for e in listener.audit())


def test_certificate_of_another_runtime_is_403(
    listener: ListenerProcess, runtime: Callable[..., Runtime]
) -> None:
    rt, other = runtime(), runtime()
    # other's own valid certificate, used on rt's URL
    s = other.session()
    assert_refused(s.post(changes_url(listener, rt.id), json=rt.record("a", 1), timeout=10),
                   403, "forbidden", "cn_mismatch")
    assert_refused(s.get(f"{listener.url}/v1/runtimes/{rt.id}/state", timeout=10),
                   403, "forbidden", "cn_mismatch")
    assert rt.env.stored(rt.id) == []


def test_san_not_matching_the_kyma_domain_is_403(
    listener: ListenerProcess, runtime: Callable[..., Runtime]
) -> None:
    rt = runtime()
    s = rt.session(cert=rt.issue(dns=["c-other.kyma.example.com"]))
    assert_refused(s.post(changes_url(listener, rt.id), json=rt.record("a", 1), timeout=10),
                   403, "forbidden", "san_mismatch")
    assert rt.env.stored(rt.id) == []
    assert refusals_for(listener, rt.id) == ["san_mismatch"]


def test_unknown_runtime_is_403(listener: ListenerProcess, runtime: Callable[..., Runtime]) -> None:
    rt = runtime(kyma_cr=False)
    assert_refused(rt.session().post(changes_url(listener, rt.id), json=rt.record("a", 1),
                                     timeout=10), 403, "forbidden", "unknown_runtime")
    assert rt.env.stored(rt.id) == []


def test_kyma_being_deleted_or_without_domain_is_403(
    listener: ListenerProcess, runtime: Callable[..., Runtime]
) -> None:
    deleting = runtime(kyma_cr=False)
    env = deleting.env
    obj = create_kyma(env.api, env.namespace, deleting.id, deleting.domain,
                      finalizers=["test.tether/hold"])
    objects = client.CustomObjectsApi(env.api)
    name = obj["metadata"]["name"]
    objects.delete_namespaced_custom_object(kyma.GROUP, kyma.VERSION, env.namespace, kyma.PLURAL,
                                            name)
    try:
        assert_refused(deleting.session().post(changes_url(listener, deleting.id),
                                               json=deleting.record("a", 1), timeout=10),
                       403, "forbidden", "runtime_deleting")
    finally:
        objects.patch_namespaced_custom_object(kyma.GROUP, kyma.VERSION, env.namespace,
                                               kyma.PLURAL, name, {"metadata": {"finalizers": None}},
                                               _content_type="application/merge-patch+json")
    no_domain = runtime(kyma_cr=False)
    create_kyma(env.api, env.namespace, no_domain.id, None)
    assert_refused(no_domain.session().post(changes_url(listener, no_domain.id),
                                            json=no_domain.record("a", 1), timeout=10),
                   403, "forbidden", "domain_missing")
    assert env.stored(deleting.id) == [] and env.stored(no_domain.id) == []


def test_payload_refusals(listener: ListenerProcess, runtime: Callable[..., Runtime]) -> None:
    rt = runtime()
    s = rt.session()
    url = changes_url(listener, rt.id)
    good = rt.record("a", 1)
    raw = json.dumps(good).encode()

    assert_refused(s.post(url, data=raw, headers={"Content-Type": "text/plain"}, timeout=10),
                   415, "unsupported media type")
    assert_refused(s.post(url, data=raw, timeout=10), 415, "unsupported media type")
    assert_refused(s.post(url, data=raw, headers={"Content-Type": "application/json; charset=latin-1"},
                          timeout=10), 415, "unsupported media type")

    js = {"Content-Type": "application/json"}
    for bad in (b"{", b"[1,", b"\xff\xfe", b"NaN", b'{"a": Infinity}',
                b'{"a":' * 100 + b"1" + b"}" * 100):
        body = assert_refused(s.post(url, data=bad, headers=js, timeout=10), 400, "invalid JSON")
        assert body["details"][0]["path"] == "$"
    # structure caps while parsing: arrays (only a batch's items is one), objects, keys
    for bad in (b"[" * 100 + b"]" * 100, b"[" + b"{}," * 3000 + b"{}]"):
        body = assert_refused(s.post(url, data=bad, headers=js, timeout=10), 400, "schema violation")
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
    body = assert_refused(s.post(url, json=changes.batch([good, other.record("b", 2)]),  # type: ignore[list-item]
                                 timeout=10), 403, "runtimeId mismatch")
    assert body["details"] == [{"path": "$.items[1].runtimeId",
                                "message": "must equal the runtime ID of the URL"}]

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
    for reason in ("media_type", "invalid_json", "schema", "runtime_id_mismatch",
                   "record_too_large", "too_large"):
        assert reason in reasons
    audit_text = listener.audit_file.read_text()
    assert "x" * 100 not in audit_text and "BEGIN" not in audit_text


def test_refusals_are_counted_by_reason(
    listener: ListenerProcess, runtime: Callable[..., Runtime]
) -> None:
    rt = runtime()
    before = listener.metrics()
    rt.session(cert=rt.issue(dns=["elsewhere.example.com"])).post(
        changes_url(listener, rt.id), json=rt.record("a", 1), timeout=10)
    rt.session().post(changes_url(listener, rt.id), data=b"{", timeout=10,
                      headers={"Content-Type": "application/json"})
    after = listener.metrics()
    for name, labels in (("tether_listener_auth_refusals_total", {"reason": "san_mismatch"}),
                         ("tether_listener_validation_failures_total", {"reason": "invalid_json"})):
        assert metric_value(after, name, **labels) == metric_value(before, name, **labels) + 1
    assert rt.id not in after  # no per-runtime series


def test_unknown_routes_and_methods_are_json(listener: ListenerProcess,
                                             runtime: Callable[..., Runtime]) -> None:
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
    big: Any = changes.batch([rt.record(f"big{i}", 1, data={"k": "x" * (900 * 1024)})  # type: ignore[misc]
                              for i in range(3)])  # 2.7 MiB: under the cap, over socket buffers
    for _ in range(3):
        assert_refused(rt.session(cert=None).post(changes_url(listener, rt.id), json=big,
                                                  timeout=30), 401, "unauthorized")
        assert_refused(rt.session(cert=rt.issue(dns=["elsewhere.example.com"])).post(
            changes_url(listener, rt.id), json=big, timeout=30), 403, "forbidden", "san_mismatch")
        assert_refused(rt.session().post(changes_url(listener, rt.id), data=json.dumps(big),
                                         headers={"Content-Type": "text/plain"}, timeout=30),
                       415, "unsupported media type")
    assert rt.env.stored(rt.id) == []
