"""The admin runtime page shows each recent record's trace ID (``tether.base.tracing``) beside it,
from the RuntimeDelivery a listener writes (through the real API server: the CRD keeps
``traceId``), so an operator can follow one change from the page to the listener's audit
line, the stored record's annotation and the spans."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client

from listener.fleet import heartbeat
from testing import adminenv
from tether.kube import apitypes
from tether.wire import delivery

pytestmark = pytest.mark.processes

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def test_the_runtime_page_shows_the_recent_records_trace_ids(
    admin_env: adminenv.Env, admin: adminenv.AdminProcess
) -> None:
    rid = admin_env.runtime("traced", webhook=1)
    token = admin_env.operator("trace-reader", None)
    objects: Any = client.CustomObjectsApi(admin_env.api)
    res, name = apitypes.RUNTIME_DELIVERIES, heartbeat.lease_name(rid)
    obj = objects.get_namespaced_custom_object(
        res.group, res.version, admin_env.kcp_ns, res.plural, name
    )
    d = delivery.Delta()
    now = adminenv.now()
    d.record(now, "webhook", now, "persisted", "team-a", "traced-cm", TRACE)
    obj["status"] = delivery.merge(obj.get("status"), d, rid, now)
    objects.replace_namespaced_custom_object_status(
        res.group, res.version, admin_env.kcp_ns, res.plural, name, obj
    )
    stored = objects.get_namespaced_custom_object(
        res.group, res.version, admin_env.kcp_ns, res.plural, name
    )
    assert [r.get("traceId") for r in stored["status"]["recent"] if r["name"] == "traced-cm"] == [
        TRACE
    ]  # not pruned by the CRD's schema
    deadline = time.monotonic() + 30  # the snapshot refreshes every second here
    while True:
        html = admin.get(f"/runtimes/{rid}", token).text
        recent = html.split('<table id="recent">', 1)[-1].split("</table>", 1)[0]
        if "traced-cm" in recent:
            break
        assert time.monotonic() < deadline, html[-2000:]
        time.sleep(0.5)
    assert "<th>Trace ID</th>" in recent
    row = recent.split("team-a/traced-cm", 1)[1].split("</tr>", 1)[0]
    assert f'<td class="trace"><code>{TRACE}</code></td>' in row
    other = recent.split("team-a/app", 1)[1].split("</tr>", 1)[0]  # written before traces
    assert '<td class="trace"><code>—</code></td>' in other
