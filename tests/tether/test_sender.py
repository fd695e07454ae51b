"""Pure decisions of the shared listener client: classification, backoff, batching."""

from __future__ import annotations

import email.utils
import json

import pytest
import requests

from tether.runtime import sender
from tether.wire import changes, conversion, listenerapi


def _rec(name: str, data: str = "v") -> changes.ChangeRecord:
    return conversion.from_configmap(
        {
            "metadata": {"namespace": "ns", "name": name, "uid": "u", "resourceVersion": "7"},
            "data": {"k": data},
        },
        runtime_id="rt",
        source="webhook",
        observed_at="2026-11-30T10:00:00.000000Z",
    )


def test_ok_carries_results() -> None:
    body = json.dumps({"results": [{"name": "a", "outcome": "persisted"}]}).encode()
    out = sender.classify(200, {}, body)
    assert out.verdict == "ok" and out.reason == "ok"
    assert out.results == ({"name": "a", "outcome": "persisted"},)


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504])
def test_retryable_statuses(status: int) -> None:
    out = sender.classify(status, {"Retry-After": "3"}, b'{"error":"busy"}')
    assert out.verdict == "retryable"
    assert out.retry_after == 3.0
    assert out.reason == f"http-{status}"


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 415, 422])
def test_other_4xx_are_permanent_with_listener_error(status: int) -> None:
    body = json.dumps({"error": "schema", "details": [{"path": "$.x", "message": "bad"}]}).encode()
    out = sender.classify(status, {}, body)
    assert out.verdict == "permanent"
    assert out.error == "schema"
    assert "$.x" in out.details


def test_error_text_is_bounded() -> None:
    out = sender.classify(400, {}, b"x" * 10_000)
    assert out.verdict == "permanent" and len(out.details) <= 300


def test_retry_after_forms() -> None:
    assert sender.parse_retry_after("5") == 5.0
    for bad in ("-1", "٣", "inf", "nan", "1e3", " 5 5"):  # delta-seconds is ASCII digits only
        assert sender.parse_retry_after(bad) is None, bad
    assert sender.parse_retry_after("99999") == sender.MAX_RETRY_AFTER
    assert sender.parse_retry_after("soon") is None
    assert sender.parse_retry_after(None) is None
    date = email.utils.formatdate(1_000_010, usegmt=True)
    assert sender.parse_retry_after(date, now=1_000_000) == pytest.approx(10.0)


def test_transport_failures_are_retryable() -> None:
    assert sender.transport_failure(requests.exceptions.ConnectTimeout()).reason == "timeout"
    assert sender.transport_failure(requests.exceptions.ReadTimeout()).reason == "timeout"
    assert sender.transport_failure(requests.exceptions.SSLError()).reason == "tls"
    out = sender.transport_failure(requests.exceptions.ConnectionError())
    assert out.verdict == "retryable" and out.reason == "connection" and out.status == 0


def test_backoff_is_exponential_full_jitter_and_capped() -> None:
    assert sender.backoff(0, base=0.5, cap=10, rand=lambda: 1.0) == 0.5
    assert sender.backoff(3, base=0.5, cap=10, rand=lambda: 1.0) == 4.0
    assert sender.backoff(50, base=0.5, cap=10, rand=lambda: 1.0) == 10.0
    assert sender.backoff(3, base=0.5, cap=10, rand=lambda: 0.0) == 0.0
    assert sender.backoff(3, base=0.5, cap=10, rand=lambda: 0.5) == 2.0


def test_retry_delay_honours_retry_after() -> None:
    out = sender.Outcome("retryable", 429, "http-429", retry_after=7.0)
    assert sender.retry_delay(out, 0, base=0.1, cap=1, rand=lambda: 1.0) == 7.0
    plain = sender.Outcome("retryable", 0, "connection")
    assert sender.retry_delay(plain, 2, base=0.1, cap=1, rand=lambda: 1.0) == pytest.approx(0.4)


def test_split_batches_by_count_and_bytes() -> None:
    recs = [_rec(f"n{i}") for i in range(7)]
    assert [len(b) for b in sender.split_batches(recs, max_items=3)] == [3, 3, 1]
    one = sender.record_size(recs[0]) + 1
    assert [len(b) for b in sender.split_batches(recs, max_bytes=one * 2)] == [2, 2, 2, 1]
    big = _rec("big", "x" * 5000)
    assert [len(b) for b in sender.split_batches([big, recs[0]], max_bytes=100)] == [1, 1]
    assert sender.split_batches([]) == []


def test_encoded_batches_encode_each_record_once_into_the_same_bodies() -> None:
    recs = [_rec(f"n{i}", "ü" * i) for i in range(7)]
    one = len(listenerapi.encoded(recs[:1])[0]) + 1
    for limits in ({"max_items": 3}, {"max_bytes": one * 2}, {}):
        batches = sender.encoded_batches(recs, **limits)  # type: ignore[arg-type]
        assert [b.records for b in batches] == sender.split_batches(recs, **limits)  # type: ignore[arg-type]
        for b in batches:  # the body as encoding the whole batch at once gives it
            assert json.loads(b.body) == json.loads(listenerapi.changes_body(b.records))
            assert b.body == listenerapi.changes_body(b.records)
    assert json.loads(sender.encoded_batches(recs)[0].body)["kind"] == "ConfigMapChangeList"
    assert sender.encoded_batches([]) == []


def test_changes_body_single_or_batch() -> None:
    one = json.loads(listenerapi.changes_body([_rec("a")]))
    assert one["kind"] == "ConfigMapChange" and not changes.validate_record(one)
    two = json.loads(listenerapi.changes_body([_rec("a"), _rec("b")]))
    assert two["kind"] == "ConfigMapChangeList" and not changes.validate_batch(two)
    with pytest.raises(ValueError):
        listenerapi.changes_body([])


def test_paths_quote_the_runtime_id() -> None:
    assert listenerapi.changes_path("rt-1") == "/v1/runtimes/rt-1/changes"
    assert listenerapi.state_path("rt-1", 10, "") == "/v1/runtimes/rt-1/state?limit=10"
    assert (
        listenerapi.state_path("rt-1", 10, "a b") == "/v1/runtimes/rt-1/state?limit=10&continue=a+b"
    )


def test_a_failed_certificate_check_is_named() -> None:
    """As requests raises it: SSLError(MaxRetryError(reason=urllib3 SSLError(ssl error)))."""
    import ssl

    import urllib3

    check = ssl.SSLCertVerificationError(1, "certificate verify failed")
    check.verify_message = "certificate is not yet valid"
    inner = urllib3.exceptions.SSLError(check)
    exc = requests.exceptions.SSLError(urllib3.exceptions.MaxRetryError(None, "/", inner))  # type: ignore[arg-type]
    out = sender.transport_failure(exc)
    assert (out.reason, out.error) == ("tls", "SSLError: certificate is not yet valid")
    assert sender.transport_failure(requests.exceptions.SSLError()).error == "SSLError"


def test_a_refused_client_certificate_is_named() -> None:
    """The listener's alert (TLS 1.3: read after the handshake) names why it refused ours."""
    import ssl

    alert = ssl.SSLError(1, "[SSL: TLSV1_ALERT_CERTIFICATE_EXPIRED] alert")
    alert.reason = "TLSV1_ALERT_CERTIFICATE_EXPIRED"
    out = sender.transport_failure(requests.exceptions.SSLError(alert))
    assert (
        out.error == "SSLError: the peer refused our certificate (tlsv1_alert_certificate_expired)"
    )
