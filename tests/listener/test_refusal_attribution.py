"""Refusals of a verified certificate count against the runtime its CN names (issue 43, item
1): a runtime whose domain changed under its certificate (``san_mismatch``) shows the refusals
in its RuntimeDelivery, hence on its page, in ``tether status`` and in TetherRuntimeRefused.

Hostile: a runtime's certificate sent on another runtime's path (``cn_mismatch``) counts
against the sender, never against the runtime it names; a verified certificate of a runtime no
Kyma CR carries creates no RuntimeDelivery; a caller without a certificate counts against no
runtime."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from testing.deliveryenv import delivery_object, summary
from testing.listenercalls import new_runtime, running
from testing.listenerenv import (
    Env,
    ListenerProcess,
    add_runtime,
    metric_value,
    own_namespace,
    remove_namespace,
)
from testing.pollerenv import wait_until
from tether.wire import delivery

pytestmark = pytest.mark.processes  # starts a listener of its own (testing/tiers.py)


@pytest.fixture(scope="module")
def env(listener_env: Env) -> Iterator[Env]:
    e = own_namespace(listener_env, "ra")
    yield e
    remove_namespace(e)


@pytest.fixture(scope="module")
def listener(env: Env) -> Iterator[ListenerProcess]:
    yield from running(env, "attribution")


def refused(env: Env, runtime_id: str, counts: dict[str, int]) -> delivery.Summary | None:
    """The runtime's delivery summary once its refusals are ``counts`` (each answer's flush
    runs after the answer, so the object catches up)."""
    got = summary(env, runtime_id)
    return got if got is not None and got.refused == counts else None


def attributed(listener: ListenerProcess, reason: str) -> float:
    return metric_value(
        listener.metrics(), "tether_listener_auth_refusals_attributed_total", reason=reason
    )


def test_a_san_mismatch_is_on_the_runtimes_delivery(env: Env, listener: ListenerProcess) -> None:
    rt = new_runtime(env)
    s = rt.session(cert=rt.issue(dns=["c-moved.kyma.example.com"]))  # the domain it had
    before = attributed(listener, "san_mismatch")
    for _ in range(3):
        r = s.get(f"{listener.url}/v1/runtimes/{rt.id}/state", timeout=10)
        assert r.status_code == 403 and r.json()["details"]["reason"] == "san_mismatch"
    got = wait_until(
        lambda: refused(env, rt.id, {"san_mismatch": 3}),
        what="the san_mismatch refusals in the runtime's RuntimeDelivery",
        timeout=30,
    )
    assert got.last_refused["san_mismatch"]["status"] == 403
    assert attributed(listener, "san_mismatch") == before + 3


def test_another_runtimes_certificate_counts_against_its_sender(
    env: Env, listener: ListenerProcess
) -> None:
    victim, sender = new_runtime(env), new_runtime(env)
    s = sender.session()  # the sender's own valid certificate, on the victim's path
    for _ in range(2):
        r = s.get(f"{listener.url}/v1/runtimes/{victim.id}/state", timeout=10)
        assert r.status_code == 403 and r.json()["details"]["reason"] == "cn_mismatch"
    wait_until(
        lambda: refused(env, sender.id, {"cn_mismatch": 2}),
        what="the cn_mismatch refusals on the sender's RuntimeDelivery",
        timeout=30,
    )
    assert delivery_object(env, victim.id) is None  # nothing written for the victim


def test_nothing_is_counted_for_a_runtime_no_kyma_cr_carries(
    env: Env, listener: ListenerProcess
) -> None:
    """A verified certificate whose runtime is gone (its Kyma CR deleted), on its own path
    and on another runtime's: refused, counted in the metrics, and no RuntimeDelivery is
    created for it (a deleted runtime's certificate cannot make the KCP store objects)."""
    ghost = add_runtime(env, f"rt-{uuid.uuid4().hex[:12]}")
    other = new_runtime(env)
    client.CustomObjectsApi(env.api).delete_collection_namespaced_custom_object(
        "operator.kyma-project.io",
        "v1beta2",
        env.namespace,
        "kymas",
        label_selector=f"kyma-project.io/runtime-id={ghost.id}",
    )
    s = ghost.session()
    wait_until(
        lambda: (
            s.get(f"{listener.url}/v1/runtimes/{ghost.id}/state", timeout=10).status_code == 403
            or None
        ),
        what="the deleted runtime refused",
        timeout=30,
    )
    r = s.get(f"{listener.url}/v1/runtimes/{other.id}/state", timeout=10)
    assert r.status_code == 403 and r.json()["details"]["reason"] == "cn_mismatch"
    nobody = other.session(cert=None)
    assert nobody.get(f"{listener.url}/v1/runtimes/{other.id}/state", timeout=10).status_code in (
        401,
        403,
    )
    # a record of the runtime itself gets its object flushed: once it is there, the refusals
    # above (answered before it, flushed after each answer) would be in it, or in the ghost's
    ok = other.session().post(
        f"{listener.url}/v1/runtimes/{other.id}/changes", json=other.record("a", 1), timeout=10
    )
    assert ok.status_code == 200, ok.text
    wait_until(
        lambda: delivery_object(env, other.id), what="the other's RuntimeDelivery", timeout=30
    )
    assert delivery_object(env, ghost.id) is None
    got = summary(env, other.id)
    assert got is not None and not got.refused  # neither the ghost's nor the anonymous caller's
