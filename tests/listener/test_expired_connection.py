"""A keep-alive connection whose client certificate expired after its handshake (found by
tests/deployed/test_certs_expired_deployed.py: the poller, running every 60 s, kept its
connection past the listener's 75 s keep-alive and delivered with an expired certificate).
The listener answers such a request 421 and closes the connection; the senders retry 421 on
a new connection, whose handshake the listener refuses until the certificate is renewed.
Plain data."""

from __future__ import annotations

import ssl

from listener.edge import worker
from tether.runtime import sender

NOT_AFTER = "Dec  5 01:30:00 2026 GMT"  # getpeercert()'s format


def test_a_certificate_past_its_not_after_is_expired_on_an_established_connection() -> None:
    at = ssl.cert_time_to_seconds(NOT_AFTER)
    assert worker.expired(NOT_AFTER, at + 1)
    assert not worker.expired(NOT_AFTER, at - 1)
    assert not worker.expired(None, at + 1)  # no verified certificate: other checks decide
    assert not worker.expired("not a time", at + 1)


def test_the_listeners_answer_makes_the_senders_retry_on_a_new_connection() -> None:
    head = worker._EXPIRED_HEAD
    assert head.startswith(b"HTTP/1.1 421 ") and b"\r\nConnection: close\r\n" in head
    outcome = sender.classify(421, {}, worker._EXPIRED_BODY)
    assert outcome.verdict == "retryable" and outcome.error == "certificate expired", outcome
    assert sender.classify(401, {}, b"{}").verdict == "permanent"  # unchanged


def test_the_not_after_is_read_once_per_connection() -> None:
    class Conn:
        sock = None  # not TLS: no certificate, nothing to refuse
        client_not_after: float | None  # set by the first request

    conn = Conn()
    assert worker._expires_at(conn) is None and conn.client_not_after is None
    conn.client_not_after = float(
        ssl.cert_time_to_seconds(NOT_AFTER)
    )  # as read at the first request
    assert worker._expires_at(conn) == ssl.cert_time_to_seconds(NOT_AFTER)
