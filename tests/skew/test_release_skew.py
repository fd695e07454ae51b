"""Version skew against the previous release, v0.1.0 (``skewenv.PREVIOUS_RELEASE``), in both
directions, on real planes with mTLS and the runtime's client certificate:

- the previous release's runtime parts (its webhook and poller, run from ``git archive``)
  against this checkout's listener;
- this checkout's webhook and poller against the previous release's listener.

Each round (``skewenv.deliver_then_poll``): the webhook delivers labelled ConfigMaps, then
with its configuration removed the poller alone reconciles a create, an update and a delete;
the KCP holds the runtime's state exactly, nothing lost. The listener refuses nothing: no
4xx/5xx answer and no refusal counted. The one refusal that may ever be allowed is a 404 on
a route the older listener does not have (``route="unmatched"``): the runtime must then
degrade (the sender reads a 404 on the state summary as "a listener older than summaries"
and pages the digest instead); the exact-state check shows it did. Between v0.1.0 and this
checkout the runtime sends nothing the old listener refuses."""

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


def test_the_previous_releases_runtime_against_this_listener_delivers_and_reconciles(
    skr: controlplane.ControlPlane,
    skr_api: client.ApiClient,
    env: Env,
    release_tree: pathlib.Path,
    tmp_path: pathlib.Path,
) -> None:
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
        assert _unknown_route_only(skewenv.refused(listener)) == {}, listener.log_file.read_text()[
            -3000:
        ]
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
