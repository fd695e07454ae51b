"""The admin's audit never holds up a page (``tether.base.auditwriter``): a real ``tether admin``
with its audit file on a full file system (``/dev/full``: every write fails with ENOSPC)
still signs operators in and out and answers its pages; every audit line it could not write
is counted in ``tether_admin_audit_lost_total{reason="write_error"}`` (both reasons exported
at 0 from the start) and said on its stderr, without the line's content. With its audit
output a pipe nobody reads (a FIFO whose reader never reads, one page of buffer) every
sign-in and sign-out is still answered, the lines that do not fit are dropped and counted
(``reason="queue_full"``)."""

from __future__ import annotations

import errno
import os
import pathlib
import time

import pytest

from testing import adminenv
from testing.listenerenv import metric_value
from tether.base import auditwriter

pytestmark = pytest.mark.processes  # starts processes of its own (testing/tiers.py)

LOST = "tether_admin_audit_lost_total"


def sign_in_and_out(p: adminenv.AdminProcess, token: str, times: int) -> None:
    """Each sign-in and sign-out is an audit line; every one must be answered."""
    s = p.session()
    for _ in range(times):
        r = s.post(
            p.url + "/login",
            data={"token": token, "next": "/parts"},
            allow_redirects=False,
            timeout=30,
        )
        assert r.status_code == 303, r.text[:500]
        assert s.get(p.url + "/parts", allow_redirects=False, timeout=30).status_code == 200
        assert s.post(p.url + "/logout", allow_redirects=False, timeout=30).status_code == 303


def test_the_admin_with_its_audit_on_a_full_disk_keeps_answering(admin_env: adminenv.Env) -> None:
    if not os.path.exists("/dev/full"):
        pytest.fail("/dev/full is missing: the full-disk case cannot be shown on this machine")
    token = admin_env.operator("audit-lost-operator", None)
    p = adminenv.AdminProcess(admin_env, TETHER_AUDIT_LOG="/dev/full")
    try:
        before = p.metrics()
        for reason in auditwriter.REASONS:  # the series exist before the first loss
            assert f'{LOST}{{reason="{reason}"}} 0.0' in before, before[-3000:]
        sign_in_and_out(p, token, 3)
        deadline = time.monotonic() + 30
        while (
            metric_value(p.metrics(), LOST, reason="write_error") < 6
            and time.monotonic() < deadline
        ):
            time.sleep(0.2)
        assert metric_value(p.metrics(), LOST, reason="write_error") >= 6
        assert p.get("/parts", token).status_code == 200  # still answering
    finally:
        p.stop()
    log_text = p.log()
    assert "audit lines lost" in log_text and os.strerror(errno.ENOSPC) in log_text
    assert token not in log_text and token[-24:] not in log_text


def test_the_admin_with_an_unread_audit_pipe_keeps_answering(
    admin_env: adminenv.Env, unread_fifo: pathlib.Path
) -> None:
    token = admin_env.operator("audit-pipe-operator", None)
    p = adminenv.AdminProcess(
        admin_env, TETHER_AUDIT_LOG=str(unread_fifo), TETHER_ADMIN_AUDIT_QUEUE_LINES="2"
    )
    try:
        t0 = time.monotonic()
        # 40 lines of ~250 bytes: more than one page of pipe and the 2 queued lines
        sign_in_and_out(p, token, 20)
        took = time.monotonic() - t0
        assert metric_value(p.metrics(), LOST, reason="queue_full") > 0
        assert metric_value(p.metrics(), LOST, reason="write_error") == 0
        assert p.get("/parts", token).status_code == 200
        print(f"\n20 sign-ins and sign-outs with the admin's audit pipe blocked: {took:.1f}s")
    finally:
        p.stop()
    assert "audit lines lost" in p.log() and "queue_full" in p.log()
