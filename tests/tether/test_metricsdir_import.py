"""The webhook sets ``PROMETHEUS_MULTIPROC_DIR`` (``tether.http.metricsdir.prepare``, a temporary
folder) in its entry point, before prometheus_client is imported (the listener's folder is
set in its environment before it starts): imported earlier, prometheus_client
keeps every worker's values in memory and ``/metrics`` of the master's aggregate is empty
(a module-level import in ``tether.base.auditwriter``, reached through ``tether.base.logs``, did
that: the webhook served no metrics at all)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.processes  # starts processes of its own (testing/tiers.py)


def test_webhook_entry_point_imports_no_prometheus_client_before_the_folder() -> None:
    entry = "webhook.main"
    code = f"import sys, {entry}; print('prometheus_client' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "False", f"{entry} imports prometheus_client at import time"
