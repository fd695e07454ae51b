"""The admin page ``/rollout``: the runtime bundle's rollout as the enroller records it (its
ConfigMap, written here with ``enroller.rollout.State`` as ``enroller.rollouts`` writes it),
the manifests' RBAC (the admin reads that one ConfigMap; the page is its own adminpages
name), an unparsable record shown as such, not a 500."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest
from kubernetes import client

from enroller import rollout
from testing import adminenv
from tether.kube import apitypes

pytestmark = pytest.mark.processes  # starts processes of its own (testing/tiers.py)

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def put(env: adminenv.Env, data: dict[str, str]) -> None:
    core: Any = client.CoreV1Api(env.api)
    body = {"metadata": {"name": apitypes.BUNDLE_ROLLOUT_CONFIGMAP}, "data": data}
    try:
        core.replace_namespaced_config_map(apitypes.BUNDLE_ROLLOUT_CONFIGMAP, env.tether_ns, body)
    except client.ApiException as e:
        if e.status != 404:
            raise
        core.create_namespaced_config_map(env.tether_ns, body)


def test_the_rollout_page(admin_env: adminenv.Env, admin: adminenv.AdminProcess) -> None:
    operator = admin_env.operator("ro-operator", None)
    fleet_only = admin_env.operator("ro-fleet", ("fleet",))
    admin.wait_ready()
    none = admin.get("/rollout", operator)
    assert none.status_code == 200 and 'id="none"' in none.text

    ids = [f"rt-{i:02d}" for i in range(12)]
    s = rollout.begin(
        rollout.begin(None, "aaa", ids, (10, 50, 100), T0), "bbb", ids, (10, 50, 100), T0
    )
    s = rollout.advance(s, rollout.Verdict("pass", "", ()), T0)
    s = rollout.advance(
        s,
        rollout.Verdict(
            "fail",
            "1 of 5 runtime(s) unhealthy: <b>x</b>",
            ((s.waves[1][0], "webhook not serving"),),
        ),
        T0,
    )
    put(admin_env, {"state.json": json.dumps(s.to_json())})
    page = admin.get("/rollout", operator)
    assert page.status_code == 200
    html = page.text
    assert 'id="phase" class="bad">Halted<' in html
    assert (
        "wave 2 failed its gate" in html
        and "&lt;b&gt;x&lt;/b&gt;" in html
        and "<b>x</b>" not in html
    )
    waves = {n: html.split(f'data-wave="{n}"', 1)[1].split("</tr>", 1)[0] for n in (1, 2, 3)}
    assert "passed" in waves[1] and "failed" in waves[2] and "pending" in waves[3]
    assert all(
        f'href="/runtimes/{rid}"' in waves[i + 1] for i, w in enumerate(s.waves) for rid in w
    )
    assert f'<td><a href="/runtimes/{s.waves[1][0]}">' in html.split('id="unhealthy"', 1)[1]
    assert "operations.md#tetherbundlerollouthalted" in html

    assert admin.get("/rollout", fleet_only).status_code == 403
    assert admin.get("/rollout").status_code == 303  # to sign in

    put(admin_env, {"state.json": "{not json"})
    broken = admin.get("/rollout", operator)
    assert broken.status_code == 200 and "does not parse" in broken.text
