"""Version skew against the previous release (the newest entry of releases.json,
``skewenv.PREVIOUS_RELEASE``), in both directions, on real planes with mTLS and the runtime's
client certificate:

- the previous release's runtime parts (its webhook and poller, run from ``git archive``)
  against this checkout's listener;
- this checkout's webhook and poller against the previous release's listener.

Each round (``skewenv.deliver_then_poll``): the webhook delivers labelled ConfigMaps, then
with its configuration removed the poller alone reconciles a create, an update and a delete;
the KCP holds the runtime's state exactly, nothing lost. This listener refuses the previous
runtime nothing, and serves every route and takes every record kind the previous listener
did (read from the two OpenAPI documents). The previous listener refuses this runtime
nothing either, except a 404 (``route="unmatched"``) when the previous release's OpenAPI
lacks a route this checkout's listener serves: the runtime must then degrade (a 404 on the
state summary reads as "a listener older than summaries": it pages the digest instead), and
the exact-state check shows it did. Which routes the previous release lacks is derived from
its tree, never named here: against 0.1.0 and 0.2.0 it is none, so no 404 is allowed."""

from __future__ import annotations

import pathlib
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from testing import controlplane, listenerenv, skewenv
from testing.listenerenv import Env, ListenerProcess

pytestmark = pytest.mark.processes  # starts processes of its own (testing/tiers.py)


@pytest.fixture(scope="module")
def release_tree(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return skewenv.tree(skewenv.PREVIOUS_RELEASE, tmp_path_factory.mktemp("previous"))


@pytest.fixture
def env(listener_env: Env) -> Iterator[Env]:
    own = listenerenv.own_namespace(listener_env, "skewr")
    yield own
    listenerenv.remove_namespace(own)


def _unknown_route_only(refused: dict[str, float]) -> dict[str, float]:
    """What the listener refused beyond a 404 on a route it does not know."""
    return {
        k: v for k, v in refused.items() if not ('route="unmatched"' in k and 'code="404"' in k)
    }


def _not_allowed(refused: dict[str, float], lacking: set[tuple[str, str]]) -> dict[str, float]:
    """What an older listener refused that it may not: everything, but a 404 on a route it
    does not know when it lacks one (``lacking``: routes of this checkout it does not serve)."""
    return _unknown_route_only(refused) if lacking else refused


def test_the_previous_releases_runtime_against_this_listener_delivers_and_reconciles(
    skr: controlplane.ControlPlane,
    skr_api: client.ApiClient,
    env: Env,
    release_tree: pathlib.Path,
    tmp_path: pathlib.Path,
) -> None:
    previous, current = skewenv.api(release_tree), skewenv.api(controlplane.REPO_ROOT)
    assert skewenv.routes(previous) <= skewenv.routes(current)
    assert skewenv.record_kinds(previous) <= skewenv.record_kinds(current)
    rt = listenerenv.add_runtime(env, f"rt-old-{uuid.uuid4().hex[:6]}")
    listener = ListenerProcess(env, "skew-current")
    try:
        stored = skewenv.deliver_then_poll(
            skr,
            client.CoreV1Api(skr_api),
            env,
            rt,
            listener.url,
            tmp_path,
            webhook_code=release_tree,
            poller_code=release_tree,
        )
        assert stored["kept"]["data"] == {"v": "final"} and stored["kept"]["source"] == "poller"
        assert stored["created-later"]["source"] == "poller"
        assert stored["to-delete"]["deleted"] is True
        assert skewenv.refused(listener) == {}, listener.log_file.read_text()[-3000:]
    finally:
        listener.stop()


def test_this_runtime_against_the_previous_releases_listener_delivers_and_reconciles(
    skr: controlplane.ControlPlane,
    skr_api: client.ApiClient,
    env: Env,
    release_tree: pathlib.Path,
    tmp_path: pathlib.Path,
) -> None:
    lacking = skewenv.routes(skewenv.api(controlplane.REPO_ROOT)) - skewenv.routes(
        skewenv.api(release_tree)
    )
    rt = listenerenv.add_runtime(env, f"rt-new-{uuid.uuid4().hex[:6]}")
    listener = skewenv.TreeListener(env, "skew-previous", release_tree)
    try:
        assert skewenv.runs_from(listener.proc.pid, release_tree)
        stored = skewenv.deliver_then_poll(
            skr, client.CoreV1Api(skr_api), env, rt, listener.url, tmp_path
        )
        assert stored["kept"]["data"] == {"v": "final"} and stored["kept"]["source"] == "poller"
        assert stored["created-later"]["source"] == "poller"
        assert stored["to-delete"]["deleted"] is True
        refused = _not_allowed(skewenv.refused(listener), lacking)
        assert refused == {}, (lacking, listener.log_file.read_text()[-3000:])
    finally:
        listener.stop()


def test_refusals_reads_every_refusal_and_no_success_of_a_listeners_metrics() -> None:
    text = "\n".join(
        [
            "# HELP tether_listener_requests_total HTTP requests by route, method and status code",
            (
                'tether_listener_requests_total{route="/v1/runtimes/<runtime_id>/changes",'
                'method="POST",code="200"} 12.0'
            ),
            'tether_listener_requests_total{route="unmatched",method="other",code="404"} 2.0',
            'tether_listener_requests_total{route="/v1/x",method="POST",code="409"} 0.0',
            'tether_listener_watch_refusals_total{reason="watch_violation"} 1.0',
            'tether_listener_validation_failures_total{reason="schema"} 3.0',
            'tether_listener_rate_limited_total{limit="runtime"} 0.0',
            'tether_listener_auth_refusals_created{reason="x"} 1.7e9',
        ]
    )
    got = skewenv.refusals(text)
    assert got == {
        'tether_listener_requests_total{route="unmatched",method="other",code="404"}': 2.0,
        'tether_listener_watch_refusals_total{reason="watch_violation"}': 1.0,
        'tether_listener_validation_failures_total{reason="schema"}': 3.0,
    }
    assert _unknown_route_only(got) == {k: v for k, v in got.items() if "unmatched" not in k}


def test_not_allowed_lets_a_404_pass_only_when_the_older_listener_lacks_a_route() -> None:
    refused = {
        'tether_listener_requests_total{route="unmatched",method="GET",code="404"}': 1.0,
        'tether_listener_validation_failures_total{reason="schema"}': 2.0,
    }
    schema = {'tether_listener_validation_failures_total{reason="schema"}': 2.0}
    assert _not_allowed(refused, set()) == refused
    assert _not_allowed(refused, {("GET", "/v1/runtimes/{runtimeId}/state/summary")}) == schema


def test_routes_and_record_kinds_are_read_from_an_openapi_document() -> None:
    doc = {
        "paths": {
            "/v1/runtimes/{runtimeId}/changes": {"post": {}, "parameters": []},
            "/healthz": {"get": {}},
        },
        "components": {
            "schemas": {
                "ConfigMapChange": {
                    "properties": {
                        "apiVersion": {"const": "tether.kyma-project.io/v1"},
                        "kind": {"const": "ConfigMapChange"},
                    }
                },
                "ChangeRequest": {"oneOf": []},
                "Status": {"properties": {"kind": {"type": "string"}}},
            }
        },
    }
    assert skewenv.routes(doc) == {
        ("POST", "/v1/runtimes/{runtimeId}/changes"),
        ("GET", "/healthz"),
    }
    assert skewenv.record_kinds(doc) == {("tether.kyma-project.io/v1", "ConfigMapChange")}
    this = skewenv.api(controlplane.REPO_ROOT)  # the real document: records of both versions
    assert {v for v, _ in skewenv.record_kinds(this)} == {
        "tether.kyma-project.io/v1",
        "tether.kyma-project.io/v2",
    }
