"""Audit lines never block a request (tether.base.auditwriter): a bounded queue and a writer thread.

Plain-data tests of the handler (a pipe nobody reads, a full device, an ordinary file), then a
real listener process whose audit output is (a) a pipe nobody reads (a FIFO with a reader that
never reads, its buffer shrunk to one page) and (b) a full file system (``/dev/full``: every
write fails with ENOSPC). Either way every change request is answered 200 and the loss is
counted in ``tether_listener_audit_lost_total`` and said on stderr.
"""

from __future__ import annotations

import errno
import logging
import os
import pathlib
import time
from collections.abc import Callable

import pytest

from testing.listenerenv import Env, ListenerProcess, Runtime, metric_value
from tether.base import auditwriter, logs

pytestmark = pytest.mark.processes  # starts processes of its own (testing/tiers.py)

_KEPT: list[object] = []  # pipes a blocked writer thread still holds


def _record(name: str) -> logging.LogRecord:
    return logging.makeLogRecord(
        {
            "name": "tether.audit",
            "msg": "change",
            "levelno": logging.INFO,
            "levelname": "INFO",
            "event": "change",
            "key": name,
            "audit": True,
        }
    )


def _handler(dest: str, lost: list[str], capacity: int = 5) -> auditwriter.QueuedHandler:
    h = auditwriter.QueuedHandler(dest, capacity=capacity, on_lost=lost.append)
    h.setFormatter(logs.JSONFormatter())
    return h


def test_a_blocked_pipe_drops_lines_and_never_blocks_the_caller(unread_fifo: pathlib.Path) -> None:
    lost: list[str] = []
    h = _handler(str(unread_fifo), lost)
    t0 = time.monotonic()
    for i in range(500):  # ~150 KB: far more than the page of pipe buffer and the 5 queued
        h.emit(_record(f"k{i}"))
    took = time.monotonic() - t0
    assert took < 10, f"500 emits took {took:.1f}s: the caller waited on the pipe"
    assert lost and set(lost) == {"queue_full"}
    assert len(lost) >= 400  # one page (~14 lines) and 5 queued lines were all it could take


def test_stdout_a_pipe_nobody_reads(
    unread_fifo: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default destination: the process's stdout, here a pipe nobody reads."""
    # never closed here: its close would flush into the full pipe; the fixture's reader
    # closes at teardown, and the blocked writer thread then gets EPIPE
    pipe = open(unread_fifo, "w", encoding="utf-8")  # noqa: SIM115
    _KEPT.append(pipe)
    monkeypatch.setattr("sys.stdout", pipe)
    lost: list[str] = []
    h = _handler("stdout", lost)
    t0 = time.monotonic()
    for i in range(500):
        h.emit(_record(f"k{i}"))
    took = time.monotonic() - t0
    monkeypatch.undo()
    assert took < 10, f"500 emits took {took:.1f}s: the caller waited on stdout"
    assert len(lost) >= 400 and set(lost) == {"queue_full"}


def test_a_full_device_counts_write_errors_and_complains_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    if not os.path.exists("/dev/full"):
        pytest.fail("/dev/full is missing: the full-disk case cannot be shown on this machine")
    lost: list[str] = []
    h = _handler("/dev/full", lost, capacity=100)
    with caplog.at_level(logging.ERROR, logger="tether.base.auditwriter"):
        for i in range(20):
            h.emit(_record(f"k{i}"))
        h.flush()
    assert lost == ["write_error"] * 20
    complaints = [r.getMessage() for r in caplog.records if r.name == "tether.base.auditwriter"]
    assert len(complaints) == 1, complaints  # once a minute, not once a line
    assert "write_error" in complaints[0] and os.strerror(errno.ENOSPC) in complaints[0]
    assert "k1" not in complaints[0]  # the line's content is never repeated


def test_lines_reach_a_file_in_order(tmp_path: pathlib.Path) -> None:
    lost: list[str] = []
    path = tmp_path / "audit.jsonl"
    h = _handler(str(path), lost, capacity=1000)
    for i in range(200):
        h.emit(_record(f"k{i}"))
    h.flush()
    h.close()
    lines = path.read_text().splitlines()
    assert [f'"key":"k{i}"' in line for i, line in enumerate(lines)] == [True] * 200
    assert lost == []


def _post_changes(listener: ListenerProcess, rt: Runtime, rounds: int, per: int) -> list[float]:
    """POST ``rounds`` lists of ``per`` new records; every one must answer 200. The seconds
    each took."""
    s = rt.session()
    took = []
    for r in range(rounds):
        t0 = time.monotonic()
        resp = s.post(
            f"{listener.url}/v1/runtimes/{rt.id}/changes",
            json={
                "apiVersion": "tether.kyma-project.io/v1",
                "kind": "ConfigMapChangeList",
                "items": [rt.record(f"audit-{r}-{i}", 1) for i in range(per)],
            },
            timeout=60,
        )
        took.append(time.monotonic() - t0)
        assert resp.status_code == 200, resp.text[:500]
    return took


def test_listener_with_an_unread_audit_pipe_keeps_answering(
    listener_env: Env, runtime: Callable[..., Runtime], unread_fifo: pathlib.Path
) -> None:
    p = ListenerProcess(
        listener_env,
        "audit-pipe",
        TETHER_LISTENER_AUDIT_LOG=str(unread_fifo),
        TETHER_LISTENER_AUDIT_QUEUE_LINES="20",
    )
    try:
        rt = runtime()
        # 6 x 20 change lines (+ the rest): more than one page of pipe and 20 queued lines
        took = _post_changes(p, rt, 6, 20)
        text = p.metrics()
        assert metric_value(text, "tether_listener_audit_lost_total", reason="queue_full") > 0
        # stored all the same: the part keeps accepting changes
        assert rt.env.stored_one(rt.id, "team-a", "audit-5-19") is not None
        print(f"\nPOST of 20 records with the audit pipe blocked: max {max(took):.2f}s")
    finally:
        p.stop()
    assert "audit lines lost" in p.log_file.read_text()


def test_listener_with_its_audit_on_a_full_disk_keeps_answering(
    listener_env: Env, runtime: Callable[..., Runtime]
) -> None:
    if not os.path.exists("/dev/full"):
        pytest.fail("/dev/full is missing: the full-disk case cannot be shown on this machine")
    p = ListenerProcess(listener_env, "audit-full", TETHER_LISTENER_AUDIT_LOG="/dev/full")
    try:
        rt = runtime()
        _post_changes(p, rt, 2, 5)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            lost = metric_value(
                p.metrics(), "tether_listener_audit_lost_total", reason="write_error"
            )
            if lost >= 10:
                break
            time.sleep(0.2)
        assert lost >= 10  # a line per record at least
        assert rt.env.stored_one(rt.id, "team-a", "audit-1-4") is not None
    finally:
        p.stop()
    log_text = p.log_file.read_text()
    assert "audit lines lost" in log_text and os.strerror(errno.ENOSPC) in log_text
