"""The admin's audit never holds up a page (``tether.auditwriter``): a real ``tether admin``
with its audit file on a full file system (``/dev/full``: every write fails with ENOSPC)
still signs operators in and out and answers its pages; every audit line it could not write
is counted in ``tether_admin_audit_lost_total{reason="write_error"}`` (both reasons exported
at 0 from the start) and said on its stderr, without the line's content."""

from __future__ import annotations

import errno
import os
import time

import pytest

from testing import adminenv
from testing.listenerenv import metric_value
from tether import auditwriter

LOST = "tether_admin_audit_lost_total"


def test_the_admin_with_its_audit_on_a_full_disk_keeps_answering(
        admin_env: adminenv.Env) -> None:
    if not os.path.exists("/dev/full"):
        pytest.fail("/dev/full is missing: the full-disk case cannot be shown on this machine")
    token = admin_env.operator("audit-lost-operator", None)
    p = adminenv.AdminProcess(admin_env, TETHER_AUDIT_LOG="/dev/full")
    try:
        before = p.metrics()
        for reason in auditwriter.REASONS:  # the series exist before the first loss
            assert f'{LOST}{{reason="{reason}"}} 0.0' in before, before[-3000:]
        s = p.session()
        for _ in range(3):  # each sign-in and sign-out is an audit line
            r = s.post(p.url + "/login", data={"token": token, "next": "/parts"},
                       allow_redirects=False, timeout=30)
            assert r.status_code == 303, r.text[:500]
            assert s.get(p.url + "/parts", allow_redirects=False, timeout=30).status_code == 200
            assert s.post(p.url + "/logout", allow_redirects=False, timeout=30).status_code == 303
        deadline = time.monotonic() + 30
        while metric_value(p.metrics(), LOST, reason="write_error") < 6 \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        assert metric_value(p.metrics(), LOST, reason="write_error") >= 6
        assert p.get("/parts", token).status_code == 200  # still answering
    finally:
        p.stop()
    log_text = p.log()
    assert "audit lines lost" in log_text and os.strerror(errno.ENOSPC) in log_text
    assert token not in log_text and token[-24:] not in log_text
