"""Slow, stalled and greedy clients against a real listener (gunicorn, mTLS, the KCP plane).

Each test mounts one attack from issue 9, then shows that a legitimate runtime's request
still succeeds promptly, that the attack's connections are closed by their bound, and that
the refusals are counted (and audited in aggregate, not a line each). The listeners run
under the Deployment's memory limit (a cgroup, as a kubelet runs them) and are never
OOM-killed (checked when each stops).
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from testing import cgroups
from testing.listenerenv import ConfinedListenerProcess, Env, ListenerProcess, Runtime, metric_value
from testing.sockets import closed_by_server

pytestmark = pytest.mark.processes  # starts processes of its own (testing/tiers.py)

THREADS = 4
STALLED = 200


@pytest.fixture(scope="module")
def bounded(listener_env: Env) -> Iterator[ListenerProcess]:
    p = ConfinedListenerProcess(
        listener_env,
        "bounded",
        TETHER_LISTENER_THREADS=str(THREADS),
        TETHER_LISTENER_MAX_IN_FLIGHT_PER_RUNTIME="2",
        TETHER_LISTENER_HANDSHAKE_TIMEOUT_SECONDS="2",
        TETHER_LISTENER_HEAD_TIMEOUT_SECONDS="2",
        TETHER_LISTENER_BODY_TIMEOUT_SECONDS="3",
        TETHER_LISTENER_IDLE_TIMEOUT_SECONDS="2",
        TETHER_LISTENER_MAX_CONNECTIONS_PER_RUNTIME="6",
        TETHER_LISTENER_REFUSAL_AUDIT_INTERVAL_SECONDS="3600",
    )
    yield p
    p.stop()
    cgroups.held(p.usage, "bounded listener")


def tls_connect(listener: ListenerProcess, rt: Runtime | None) -> ssl.SSLSocket:
    ctx = ssl.create_default_context(cafile=str(listener.env.server_ca_file))
    if rt is not None:
        ctx.load_cert_chain(str(rt.cert_file), str(rt.key_file))
    raw = socket.create_connection(("127.0.0.1", listener.port), timeout=10)
    return ctx.wrap_socket(raw, server_hostname="127.0.0.1")


def legit_post(listener: ListenerProcess, rt: Runtime, name: str, rv: int) -> None:
    s = rt.session()
    r = s.post(f"{listener.url}/v1/runtimes/{rt.id}/changes", json=rt.record(name, rv), timeout=10)
    assert r.status_code == 200, r.text
    assert r.json()["results"][0]["outcome"] == "persisted"
    assert rt.env.stored_one(rt.id, "team-a", name) is not None  # acknowledged = stored


def wait_metric(listener: ListenerProcess, name: str, at_least: float, **labels: str) -> float:
    deadline = time.monotonic() + 20
    value = 0.0
    while time.monotonic() < deadline:
        value = metric_value(listener.metrics(), name, **labels)
        if value >= at_least:
            return value
        time.sleep(0.2)
    return value


def test_stalled_tls_handshakes_hold_no_thread(
    bounded: ListenerProcess, runtime: Callable[..., Runtime]
) -> None:
    """200 connections send the first bytes of a ClientHello (no certificate) and wait."""
    before = metric_value(
        bounded.metrics(), "tether_listener_connection_refusals_total", reason="handshake_timeout"
    )
    stalled = []
    for _ in range(STALLED):
        s = socket.create_connection(("127.0.0.1", bounded.port), timeout=10)
        s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # a TLS record, cut short
        stalled.append(s)
    try:
        rt = runtime()
        t0 = time.monotonic()
        legit_post(bounded, rt, "during-handshakes", 1)
        assert time.monotonic() - t0 < 5, "a legitimate request waited behind stalled handshakes"
        # each stalled connection is closed by the handshake deadline (2 s)
        assert all(closed_by_server(s, 10) for s in stalled)
    finally:
        for s in stalled:
            s.close()
    after = wait_metric(
        bounded,
        "tether_listener_connection_refusals_total",
        before + STALLED,
        reason="handshake_timeout",
    )
    assert after >= before + STALLED
    # the audit log aggregates them: at most a few lines, not one per connection
    lines = [e for e in bounded.audit() if str(e.get("reason")) == "handshake_timeout"]
    assert 1 <= len(lines) <= 3, len(lines)


def test_half_sent_heads_with_valid_certificates(
    bounded: ListenerProcess, runtime: Callable[..., Runtime]
) -> None:
    """Many authenticated connections (more than the threads) send half a request head."""
    attackers = [runtime() for _ in range(6)]
    held = []
    for rt in attackers:
        for _ in range(5):  # 30 connections, 4 threads
            s = tls_connect(bounded, rt)
            s.sendall(f"POST /v1/runtimes/{rt.id}/changes HTTP/1.1\r\nHost: x\r\n".encode())
            held.append(s)
    try:
        legit_post(bounded, runtime(), "during-heads", 1)
        assert all(closed_by_server(s, 10) for s in held)  # head deadline: 2 s
    finally:
        for s in held:
            s.close()
    assert (
        wait_metric(bounded, "tether_listener_connection_refusals_total", 30, reason="head_timeout")
        >= 30
    )


def test_half_sent_bodies_hold_at_most_the_runtimes_share(
    bounded: ListenerProcess, runtime: Callable[..., Runtime]
) -> None:
    """One runtime opens as many connections as it may and sends half a body on each. Small
    bodies (up to 64 KiB) are read in the worker's main loop: they hold no thread and are
    closed at the head deadline. Large ones hold at most the runtime's in-flight share of
    the threads, for at most the body deadline, and are answered 408. Another runtime is
    served meanwhile, and never gets a 429."""
    greedy, other = runtime(), runtime()
    held = []
    for length in (1000, 1000, 2 * 1024 * 1024, 2 * 1024 * 1024, 2 * 1024 * 1024, 2 * 1024 * 1024):
        s = tls_connect(bounded, greedy)
        s.sendall(
            f"POST /v1/runtimes/{greedy.id}/changes HTTP/1.1\r\nHost: x\r\n"
            f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
            '{"a"'.encode()
        )
        held.append(s)
    try:
        for i in range(5):
            legit_post(bounded, other, f"during-bodies-{i}", 1)
        answers = []
        for s in held:
            s.settimeout(15)
            data = b""
            try:
                while b"\r\n\r\n" not in data:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    data += chunk
            except (TimeoutError, ConnectionResetError, ssl.SSLError):
                pass
            answers.append(data.split(b"\r\n", 1)[0])
        # the small ones were closed unanswered (head deadline, no thread); the large ones
        # that got a thread are answered 408 at the body deadline, the rest queued until
        # then (each gets its turn; none is lost silently)
        assert answers[:2] == [b"", b""], answers
        assert any(a.startswith(b"HTTP/1.1 408") for a in answers[2:]), answers
    finally:
        for s in held:
            s.close()
    text = bounded.metrics()
    assert (
        metric_value(text, "tether_listener_validation_failures_total", reason="body_timeout") >= 1
    )


def test_connections_per_runtime_are_capped(
    bounded: ListenerProcess, runtime: Callable[..., Runtime]
) -> None:
    rt, other = runtime(), runtime()
    before = metric_value(
        bounded.metrics(), "tether_listener_connection_refusals_total", reason="peer_connection_cap"
    )
    conns = [tls_connect(bounded, rt) for _ in range(10)]  # the cap is 6
    try:
        answered = []
        for s in conns:  # the connections over the cap were closed after their handshake
            try:
                s.sendall(f"GET /v1/runtimes/{rt.id}/state HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                s.settimeout(10)
                answered.append(s.recv(12) == b"HTTP/1.1 200")
            except (OSError, ssl.SSLError):
                answered.append(False)
        assert answered.count(True) == 6, answered
        legit_post(bounded, other, "beside-capped", 1)
    finally:
        for s in conns:
            s.close()
    assert (
        wait_metric(
            bounded,
            "tether_listener_connection_refusals_total",
            before + 4,
            reason="peer_connection_cap",
        )
        >= before + 4
    )


def test_oversized_head_is_refused_431(
    bounded: ListenerProcess, runtime: Callable[..., Runtime]
) -> None:
    rt = runtime()
    s = tls_connect(bounded, rt)
    try:
        s.sendall(f"GET /v1/runtimes/{rt.id}/state HTTP/1.1\r\nHost: x\r\n".encode())
        for _ in range(70):
            s.sendall(b"X-Pad: " + b"a" * 1010 + b"\r\n")  # 70 KiB, never ends
        s.settimeout(10)
        assert s.recv(100).startswith(b"HTTP/1.1 431")
    finally:
        s.close()


@pytest.fixture(scope="module")
def capped(listener_env: Env) -> Iterator[ListenerProcess]:
    p = ConfinedListenerProcess(
        listener_env,
        "capped",
        TETHER_LISTENER_THREADS=str(THREADS),
        TETHER_LISTENER_MAX_CONNECTIONS="20",
        TETHER_LISTENER_MAX_CONNECTIONS_PER_RUNTIME="20",
        TETHER_LISTENER_HANDSHAKE_TIMEOUT_SECONDS="60",
    )
    yield p
    p.stop()
    cgroups.held(p.usage, "capped listener")


def test_connection_cap_makes_room_by_closing_anonymous_connections(
    capped: ListenerProcess, runtime: Callable[..., Runtime]
) -> None:
    """With the worker full of anonymous connections, a runtime still gets in: the oldest
    connection without a verified certificate is closed to make room."""
    idle = [socket.create_connection(("127.0.0.1", capped.port), timeout=10) for _ in range(40)]
    try:
        legit_post(capped, runtime(), "beside-full", 1)
        closed = sum(closed_by_server(s, 0.5) for s in idle)
        assert closed >= 20, closed  # at most the cap stays open
    finally:
        for s in idle:
            s.close()
    assert (
        wait_metric(
            capped, "tether_listener_connection_refusals_total", 20, reason="connection_cap"
        )
        >= 20
    )


def test_many_slow_attackers_at_once_leave_a_runtime_served(
    bounded: ListenerProcess, runtime: Callable[..., Runtime]
) -> None:
    """All attacks together from threads, while a runtime posts in a loop: every one of its
    requests is answered 200 and stored."""
    stop = threading.Event()

    def stall_handshakes() -> None:
        while not stop.is_set():
            socks = []
            for _ in range(20):
                try:
                    s = socket.create_connection(("127.0.0.1", bounded.port), timeout=5)
                    s.sendall(b"\x16\x03\x01")
                    socks.append(s)
                except OSError:
                    pass
            stop.wait(0.5)
            for s in socks:
                s.close()

    attacker = threading.Thread(target=stall_handshakes, daemon=True)
    attacker.start()
    try:
        rt = runtime()
        for i in range(20):
            legit_post(bounded, rt, f"under-attack-{i}", 1)
    finally:
        stop.set()
        attacker.join(timeout=10)
