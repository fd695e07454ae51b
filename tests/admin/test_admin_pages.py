"""The admin pages over HTTPS against the session's KCP plane: sign-in with real bearer
tokens (TokenReview), access by RBAC (SubjectAccessReview), the facts of a scenario made in
the KCP as the other parts write them, bounds on hostile input, the fleet metrics, and
``tether status`` on the same objects."""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from kubernetes import client

from admin import runbooks
from listener.fleet import heartbeat
from testing import adminenv, controlplane, pollerenv
from testing.listenerenv import metric_value
from tether.kube import apitypes
from tether.wire import delivery

BASE = runbooks.DEFAULT_BASE  # the running version's docs

pytestmark = pytest.mark.processes


@pytest.fixture(scope="module")
def scene(admin_env: adminenv.Env) -> dict[str, str]:
    env = admin_env
    ids = {
        "healthy": env.runtime("healthy", webhook=30, poller=1),
        "failing": env.runtime("failing", webhook=3, poller=40, lag=2.0),
        "unenrolled": env.runtime("unenrolled", ready=False, webhook=0),
        "silent": env.runtime("silent", beat_age=3600, webhook=5),
        "refused": env.runtime(
            "refused",
            webhook=10,
            refused={"quota_records": 7},
            throttled=3,
            names=["<script>alert(1)</script>", "ok"],
        ),
    }
    env.mapping("healthy", "Ready")
    env.mapping("failing", "Failed", "RegistrationFailed", "the Director answered 500")
    env.deployment("tether-listener", 2, 2)
    env.deployment("tether-compass", 0, 1)
    env.leader_lease(
        "tether-compass",
        "tether-compass-abc_7",
        {
            "tether.kyma-project.io/breaker": "open",
            "tether.kyma-project.io/director-errors": json.dumps(
                [
                    {
                        "at": "2026-12-02T01:00:00Z",
                        "operation": "registerRuntime",
                        "message": "HTTP 503 <b>from</b> the Director",
                    }
                ]
            ),
            "tether.kyma-project.io/last-run-at": adminenv.stamp(adminenv.now()),
            "tether.kyma-project.io/last-run-result": "failed",
            "tether.kyma-project.io/last-run-seconds": "0.42",
        },
    )
    return ids


@pytest.fixture(scope="module")
def tokens(admin_env: adminenv.Env) -> dict[str, str]:
    return {
        "operator": admin_env.operator("operator", None),
        "fleet-only": admin_env.operator("fleet-only", ("fleet",)),
        "nobody": admin_env.operator("nobody", ()),
    }


@pytest.fixture(scope="module")
def ready(
    admin: adminenv.AdminProcess, scene: dict[str, str], tokens: dict[str, str]
) -> Iterator[adminenv.AdminProcess]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the snapshot refreshes every second here
        r = admin.get("/fleet", tokens["operator"])
        if r.status_code == 200 and all(
            f'data-runtime="{rid}"' in r.text for rid in scene.values()
        ):
            break
        time.sleep(0.5)
    yield admin


def rows(html: str) -> list[str]:
    return re.findall(r'<tr class="(?:bad|ok)" data-runtime="([^"]+)"', html)


def test_without_a_token_a_browser_is_sent_to_sign_in_and_a_client_gets_401_json(
    ready: adminenv.AdminProcess,
) -> None:
    r = ready.get("/runtimes/rt-failing?x=1")
    assert r.status_code == 303 and r.headers["Location"] == "/login?next=/runtimes/rt-failing?x=1"
    r = ready.get("/fleet", headers={"Accept": "application/json"})
    assert r.status_code == 401 and r.json()["error"] == "unauthorized"
    page = ready.get("/login?next=//evil.example/x")
    assert page.status_code == 200 and 'name="next" value="/fleet"' in page.text


@pytest.mark.parametrize("page", ["/fleet", "/runtimes/rt-healthy", "/compass", "/parts"])
def test_each_page_follows_rbac(
    ready: adminenv.AdminProcess, tokens: dict[str, str], page: str
) -> None:
    assert ready.get(page, tokens["operator"]).status_code == 200
    denied = ready.get(page, tokens["nobody"])
    assert denied.status_code == 403 and "may not get adminpages/" in denied.text
    assert "system:serviceaccount:" in denied.text  # who was refused, never the token
    fleet_only = ready.get(page, tokens["fleet-only"]).status_code
    assert fleet_only == (200 if page == "/fleet" else 403)
    assert ready.get(page, "not-a-token").status_code == 401


def test_the_fleet_page_sorts_the_worst_first_searches_and_filters(
    ready: adminenv.AdminProcess, tokens: dict[str, str], scene: dict[str, str]
) -> None:
    html = ready.get("/fleet", tokens["operator"]).text
    order = [rid for rid in rows(html) if rid in scene.values()]
    assert order[0] == scene["unenrolled"]  # not enrolled and never delivered: the worst
    assert order[-1] == scene["healthy"]
    failing = html.split(f'data-runtime="{scene["failing"]}"', 1)[1].split("</tr>", 1)[0]
    assert (
        "webhook_path_failing" in failing
        and "compass_failed"
        not in html.split(f'data-runtime="{scene["healthy"]}"', 1)[1].split("</tr>", 1)[0]
    )
    assert "93%" in failing  # 40 of 43 records only by the poller
    assert rows(ready.get("/fleet?q=FAIL", tokens["operator"]).text) == [scene["failing"]]
    silent = rows(ready.get("/fleet?problem=silent", tokens["operator"]).text)
    assert silent == [scene["silent"]]
    bad = ready.get("/fleet?page=x1", tokens["operator"])
    assert bad.status_code == 400 and "page must be" in bad.text
    bad = ready.get(
        "/fleet?problem=nope",
        headers={"Accept": "application/json", "Authorization": f"Bearer {tokens['operator']}"},
    )
    assert bad.status_code == 400 and "problem must be one of" in bad.json()["details"]


def test_the_fleet_is_paginated(
    admin_env: adminenv.Env, scene: dict[str, str], tokens: dict[str, str]
) -> None:
    added = [admin_env.runtime(f"page-{i}") for i in range(4)]  # 9 runtimes: two pages of five
    p = adminenv.AdminProcess(admin_env, TETHER_ADMIN_PAGE_SIZE="5")
    try:
        pollerenv.wait_until(  # its snapshot holds every runtime
            lambda: (
                set(added)
                <= {
                    *rows(p.get("/fleet", tokens["operator"]).text),
                    *rows(p.get("/fleet?page=2", tokens["operator"]).text),
                }
            ),
            30,
            "the four runtimes added on the fleet's two pages",
        )
        first = p.get("/fleet", tokens["operator"]).text
        second = p.get("/fleet?page=2", tokens["operator"]).text
        far = p.get("/fleet?page=999", tokens["operator"]).text  # clamped to the last page
        assert len(rows(first)) == 5 and rows(second) and not set(rows(first)) & set(rows(second))
        assert 'rel="next" href="/fleet?q=&amp;problem=&amp;page=2"' in first
        assert rows(far) == rows(second)
    finally:
        p.stop()


def test_the_runtime_page_shows_its_delivery_and_escapes_what_it_shows(
    ready: adminenv.AdminProcess, tokens: dict[str, str], scene: dict[str, str]
) -> None:
    html = ready.get(f"/runtimes/{scene['refused']}", tokens["operator"]).text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>" not in html
    assert "3 answered 429" in html
    refusal = html.split('<tr data-reason="quota_records">', 1)[1].split("</tr>", 1)[0]
    assert (
        f'<a class="runbook" href="{BASE}/docs/'
        'operations.md#refusal-quota_records">quota_records</a></td><td>7</td>'
    ) in refusal
    chart = ready.get(f"/runtimes/{scene['failing']}", tokens["operator"]).text
    lag = chart.split('id="lag-chart"', 1)[1].split("</figure>", 1)[0]
    assert "<polyline" in lag and "lag p99" in lag
    assert "RegistrationFailed" in chart and "the Director answered 500" in chart
    assert ready.get("/runtimes/rt-nope", tokens["operator"]).status_code == 404
    r = ready.get("/runtimes/rt-healthy", tokens["operator"])
    assert r.headers["Content-Security-Policy"].startswith("default-src 'none'")
    assert r.headers["Cache-Control"] == "no-store" and r.headers["X-Frame-Options"] == "DENY"


def test_the_compass_and_parts_pages(ready: adminenv.AdminProcess, tokens: dict[str, str]) -> None:
    compass = ready.get("/compass", tokens["operator"]).text
    assert re.search(r'id="breaker" class="bad">open<', compass)
    assert "HTTP 503 &lt;b&gt;from&lt;/b&gt; the Director" in compass
    assert "Failed: 1" in compass and "Ready: 1" in compass
    parts = ready.get("/parts", tokens["operator"]).text
    compass_row = parts.split('data-part="tether-compass"', 1)[1].split("</tr>", 1)[0]
    assert (
        "0/1" in compass_row and "tether-compass-abc_7" in compass_row and "failed" in compass_row
    )
    assert 'class="bad" data-part="tether-compass"' in parts
    assert 'class="ok" data-part="tether-listener"' in parts


def test_sign_in_sets_a_strict_cookie_and_refuses_foreign_origins(
    ready: adminenv.AdminProcess, tokens: dict[str, str]
) -> None:
    s = requests.Session()
    s.trust_env = False  # a REQUESTS_CA_BUNDLE would override the session's CA
    s.verify = str(ready.env.ca_file)
    r = s.post(
        ready.url + "/login",
        data={"token": tokens["operator"], "next": "/compass"},
        allow_redirects=False,
        timeout=10,
    )
    assert r.status_code == 303 and r.headers["Location"] == "/compass"
    cookie = r.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "Secure" in cookie and "SameSite=Strict" in cookie
    assert s.get(ready.url + "/compass", allow_redirects=False, timeout=10).status_code == 200
    assert s.post(ready.url + "/logout", allow_redirects=False, timeout=10).status_code == 303
    assert s.get(ready.url + "/compass", allow_redirects=False, timeout=10).status_code == 303
    wrong = s.post(
        ready.url + "/login", data={"token": "forged"}, allow_redirects=False, timeout=10
    )
    assert wrong.status_code == 401 and "did not accept" in wrong.text
    foreign = s.post(
        ready.url + "/login",
        data={"token": tokens["operator"]},
        headers={"Origin": "https://evil.example"},
        allow_redirects=False,
        timeout=10,
    )
    assert foreign.status_code == 403 and "Set-Cookie" not in foreign.headers


def test_hostile_input_is_bounded_before_the_kcp_is_asked(
    ready: adminenv.AdminProcess, tokens: dict[str, str]
) -> None:
    before = metric_value(ready.metrics(), "tether_admin_reviews_total", kind="token")
    assert ready.get("/fleet", "x" * 10_000).status_code == 431  # a header field over 8 KiB
    form = requests.post(
        ready.url + "/login",
        data={"token": "z" * 20_000},
        timeout=10,
        verify=str(ready.env.ca_file),
        allow_redirects=False,
    )
    assert form.status_code == 401  # over MAX_TOKEN: refused without asking the KCP
    try:  # a head over 64 KiB: answered 431 or closed by the worker while it is still sent
        assert ready.get("/fleet", "x" * 100_000).status_code == 431
    except requests.ConnectionError:
        pass
    body = requests.post(
        ready.url + "/login",
        data={"token": "y" * 40_000},
        timeout=10,
        verify=str(ready.env.ca_file),
        allow_redirects=False,
    )
    assert body.status_code == 413
    assert ready.get("/fleet?q=" + "a" * 3000, tokens["operator"]).status_code == 200
    assert ready.get("/fleet?q=" + "a" * 5000, tokens["operator"]).status_code == 414  # line cap
    assert ready.get("/fleet", tokens["operator"]).status_code == 200  # still serving
    after = metric_value(ready.metrics(), "tether_admin_reviews_total", kind="token")
    assert after == before  # the long tokens never reached the KCP; the operator's was cached


def test_request_metrics_by_route(ready: adminenv.AdminProcess, tokens: dict[str, str]) -> None:
    """prometheus-flask-exporter's request metrics (issue 28, item 8) in the admin's own
    /metrics, by URL rule: the runtime ID of a page's path and unknown paths are no labels."""
    name = "tether_admin_http_request_duration_seconds_count"
    route = "/runtimes/<runtime_id>"
    before = metric_value(ready.metrics(), name, method="GET", route=route, status="200")
    assert ready.get("/runtimes/rt-healthy", tokens["operator"]).status_code == 200
    assert ready.get("/no-such-page-xyz", tokens["operator"]).status_code == 404
    text = ready.metrics()
    assert metric_value(text, name, method="GET", route=route, status="200") == before + 1
    assert metric_value(text, name, method="GET", route="unmatched", status="404") >= 1
    assert "no-such-page-xyz" not in text and 'route="/runtimes/rt-healthy"' not in text


def test_tokens_never_reach_the_logs_and_sign_ins_are_audited(
    ready: adminenv.AdminProcess, tokens: dict[str, str]
) -> None:
    signed_in = sum(e.get("event") == "admin_sign_in" for e in ready.audit())
    s = requests.post(
        ready.url + "/login",
        data={"token": tokens["fleet-only"]},
        timeout=10,
        verify=str(ready.env.ca_file),
        allow_redirects=False,
    )
    assert s.status_code == 303
    pollerenv.wait_until(
        lambda: sum(e.get("event") == "admin_sign_in" for e in ready.audit()) > signed_in,
        10,
        "the sign-in's audit event",
    )
    text = ready.log() + ready.audit_text()
    for token in tokens.values():
        assert token not in text and token[-24:] not in text
    events = {e.get("event") for e in ready.audit()}
    assert {"admin_sign_in", "admin_denied"} <= events


def test_the_fleet_metrics_name_the_runtimes_with_a_problem_and_are_capped(
    ready: adminenv.AdminProcess, admin_env: adminenv.Env, scene: dict[str, str]
) -> None:
    text = ready.metrics()
    assert (
        metric_value(
            text,
            "tether_fleet_runtime_problem",
            runtime_id=scene["failing"],
            problem="webhook_path_failing",
        )
        == 1
    )
    assert (
        metric_value(
            text,
            "tether_fleet_runtime_problem",
            runtime_id=scene["healthy"],
            problem="webhook_path_failing",
        )
        == 0
    )
    assert metric_value(text, "tether_fleet_runtime_problems", problem="silent") >= 1
    assert metric_value(text, "tether_fleet_runtimes") >= len(scene)
    capped = adminenv.AdminProcess(admin_env, TETHER_ADMIN_PROBLEM_SERIES="2")
    try:
        pollerenv.wait_until(  # its snapshot holds the scene
            lambda: metric_value(capped.metrics(), "tether_fleet_runtimes") >= len(scene),
            30,
            "the capped admin's snapshot of the fleet",
        )
        t = capped.metrics()
        assert len(re.findall(r"^tether_fleet_runtime_problem\{", t, re.M)) == 2
        assert metric_value(t, "tether_fleet_runtime_problems_omitted") >= 3
    finally:
        capped.stop()


def test_tether_status_prints_the_same_facts(
    admin_env: adminenv.Env, scene: dict[str, str], ready: adminenv.AdminProcess
) -> None:
    def status(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "command.cli",
                "status",
                "--kubeconfig",
                str(admin_env.kubeconfig),
                "--namespace",
                admin_env.kcp_ns,
                "--heartbeat-namespace",  # this env keeps them in its KCP namespace
                admin_env.kcp_ns,
                "--tether-namespace",
                admin_env.tether_ns,
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    table = status()
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split()[:3] == ["RUNTIME", "PROBLEMS", "ENROLLED"]
    ours = [ln.split()[0] for ln in lines[1:] if ln.split()[0] in scene.values()]
    assert ours[0] == scene["unenrolled"] and ours[-1] == scene["healthy"]
    one = status(scene["failing"], "-o", "json")
    doc = json.loads(one.stdout)
    assert doc["runtimeId"] == scene["failing"] and "webhook_path_failing" in doc["problems"]
    assert doc["lastHour"]["poller"] == 40 and doc["compass"]["state"] == "Failed"
    assert status("rt-nope").returncode == 1
    assert status("--problem", "silent", "--fail-on-problems").returncode == 1
    bad = status("--kubeconfig", "/nonexistent")
    assert bad.returncode == 2 and "--kubeconfig" in bad.stderr and "Traceback" not in bad.stderr


# -- issue 28, item 6: what to do next ---------------------------------------------------------

HOSTILE = '<img src=x onerror=alert(1)>"\nFAKE LINE' + "x" * 300


@pytest.fixture(scope="module")
def last_refused(admin_env: adminenv.Env, scene: dict[str, str]) -> str:
    """The refused runtime's RuntimeDelivery as a listener of this version writes it: a
    record of a hostile name refused by the quota, a body that was no JSON (no object),
    through the real API server (the CRD's schema validates and keeps ``lastRefused``)."""
    rid = scene["refused"]
    objects: Any = client.CustomObjectsApi(admin_env.api)
    res = apitypes.RUNTIME_DELIVERIES
    name = heartbeat.lease_name(rid)
    obj = objects.get_namespaced_custom_object(
        res.group, res.version, admin_env.kcp_ns, res.plural, name
    )
    d = delivery.Delta()
    now = adminenv.now()
    d.record(now, "webhook", None, "refused", "team-a", HOSTILE)
    d.refuse(now, "quota_records", 413, "team-a", HOSTILE)
    d.refuse(now - datetime.timedelta(minutes=2), "invalid_json", 400)
    obj["status"] = delivery.merge(obj.get("status"), d, rid, now)
    objects.replace_namespaced_custom_object_status(
        res.group, res.version, admin_env.kcp_ns, res.plural, name, obj
    )
    stored = objects.get_namespaced_custom_object(
        res.group, res.version, admin_env.kcp_ns, res.plural, name
    )
    assert stored["status"]["lastRefused"] == obj["status"]["lastRefused"]  # not pruned
    return rid


def test_a_refusal_shows_its_last_object_when_and_runbook(
    ready: adminenv.AdminProcess, tokens: dict[str, str], last_refused: str
) -> None:
    html = ready.get(f"/runtimes/{last_refused}", tokens["operator"]).text
    quota = html.split('<tr data-reason="quota_records">', 1)[1].split("</tr>", 1)[0]
    assert "team-a/&lt;img src=x onerror=alert(1)&gt;&#34;" in quota and "<img" not in html
    assert "ago (" in quota and "<td>413</td>" in quota
    assert len(quota) < 1500  # the name is cut (253 characters)
    invalid = html.split('<tr data-reason="invalid_json">', 1)[1].split("</tr>", 1)[0]
    assert "the runtime&#39;s request; no object read" in invalid and "2m ago" in invalid
    assert f'href="{BASE}/docs/operations.md#refusal-invalid_json"' in invalid
    # every problem of a runtime links its runbook, on its page and in the fleet
    page = ready.get("/runtimes/rt-silent", tokens["operator"]).text
    assert f'href="{BASE}/docs/operations.md#problem-silent">runbook</a>' in page
    fleet_html = ready.get("/fleet?problem=silent", tokens["operator"]).text
    assert f'class="badge" href="{BASE}/docs/operations.md#problem-silent"' in fleet_html


def test_the_runbook_base_is_a_setting(
    admin_env: adminenv.Env, tokens: dict[str, str], last_refused: str
) -> None:
    p = adminenv.AdminProcess(
        admin_env, TETHER_ADMIN_RUNBOOK_BASE="https://docs.example.internal/tether"
    )
    try:
        html = p.get(f"/runtimes/{last_refused}", tokens["operator"]).text
        assert (
            'href="https://docs.example.internal/tether/docs/operations.md#refusal-quota_records"'
        ) in html
        assert "github.com" not in html
    finally:
        p.stop()


def _status_env(admin_env: adminenv.Env, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    return {
        **env,
        "KUBECONFIG": str(admin_env.kubeconfig),
        "TETHER_KCP_NAMESPACE": admin_env.kcp_ns,
        "TETHER_HEARTBEAT_NAMESPACE": admin_env.kcp_ns,  # where this env keeps them
        **extra,
    }


def test_tether_status_of_one_runtime_is_a_detail_view(
    admin_env: adminenv.Env, last_refused: str
) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "command.cli",
            "status",
            last_refused,
            "--tether-namespace",
            admin_env.tether_ns,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=_status_env(admin_env, TETHER_ADMIN_RUNBOOK_BASE="https://docs.example.internal/t"),
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    for fact in (
        "Enrollment:  Ready",
        "Certificate: expires in",
        "Heartbeat:   ",
        "Lag:  ",
        "Stored:      ",
        "Compass:     no mapping",
        "Refusals, last hour:",
    ):
        assert fact in text, fact
    quota = next(ln for ln in text.splitlines() if ln.lstrip().startswith("quota_records"))
    assert 'team-a/<img src=x onerror=alert(1)>"?FAKE LINE' in quota
    assert quota.endswith(
        "https://docs.example.internal/t/docs/operations.md#refusal-quota_records"
    )
    assert not any(ln.startswith("FAKE LINE") for ln in text.splitlines())
    assert "3 answered 429: https://docs.example.internal/t/docs/operations.md#refusal-rate" in text
    one = json.loads(
        subprocess.run(
            [
                sys.executable,
                "-m",
                "command.cli",
                "status",
                last_refused,
                "-o",
                "json",
                "--tether-namespace",
                admin_env.tether_ns,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            env=_status_env(admin_env),
        ).stdout
    )
    by_reason = {r["reason"]: r for r in one["refused"]}
    assert by_reason["invalid_json"]["lastObject"] == "(the runtime's request; no object read)"
    assert by_reason["quota_records"]["lastStatus"] == 413
    assert by_reason["quota_records"]["runbook"].endswith("#refusal-quota_records")


def test_kubectl_tether_runs_the_operator_commands(
    admin_env: adminenv.Env, last_refused: str
) -> None:
    """As kubectl runs a plugin: ``kubectl tether ...`` finds ``kubectl-tether`` on PATH
    (the venv's bin, where the console script is installed)."""
    kubectl = str(controlplane.binaries() / "kubectl")
    venv_bin = pathlib.Path(sys.executable).parent
    assert (venv_bin / "kubectl-tether").is_file(), "pip install -e . (setup.cfg entry points)"
    env = _status_env(admin_env, PATH=f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}")
    plugins = subprocess.run(
        [kubectl, "plugin", "list"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert str(venv_bin / "kubectl-tether") in plugins.stdout, plugins.stdout + plugins.stderr
    out = subprocess.run(
        [kubectl, "tether", "status", last_refused, "--tether-namespace", admin_env.tether_ns],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    assert f"Runtime {last_refused}" in out.stdout and "#refusal-quota_records" in out.stdout
    table = subprocess.run(
        [kubectl, "tether", "status", "--tether-namespace", admin_env.tether_ns],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert table.returncode == 0 and table.stdout.startswith("RUNTIME"), table.stderr
    certs = subprocess.run(
        [kubectl, "tether", "certs", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert certs.returncode == 0 and "issue" in certs.stdout, certs.stderr
    wrong = subprocess.run(
        [kubectl, "tether", "listener"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert wrong.returncode == 2 and "unknown command" in wrong.stderr
