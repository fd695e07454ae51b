"""What the listener tests that run a listener of their own share: the listener as a
module fixture (flushing its delivery health and heartbeats after every request), a runtime
of a fresh ID, and a runtime's two calls, a POST of records and a GET of its state, over its
mTLS session."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import requests

from testing.listenerenv import Env, ListenerProcess, Runtime, add_runtime
from tether.wire import changes

# delivery health and the heartbeat Lease written after every request, not on an interval
IMMEDIATE = {
    "TETHER_LISTENER_DELIVERY_FLUSH_SECONDS": "0",
    "TETHER_LISTENER_HEARTBEAT_INTERVAL_SECONDS": "0",
}


def running(env: Env, name: str, **overrides: str) -> Iterator[ListenerProcess]:
    """A module fixture's body: ``yield from running(env, "name")``; stopped at the end."""
    p = ListenerProcess(env, name, **{**IMMEDIATE, **overrides})
    try:
        yield p
    finally:
        p.stop()


def new_runtime(env: Env) -> Runtime:
    """A Kyma CR in ``env`` for a runtime of a fresh ID, and its client certificate."""
    return add_runtime(env, f"rt-{uuid.uuid4().hex[:12]}")


def post(
    p: ListenerProcess, rt: Runtime, *recs: dict[str, Any], timeout: float = 60
) -> requests.Response:
    """One record as it is, several as a batch."""
    doc: Any = recs[0] if len(recs) == 1 else changes.batch(list(recs))  # type: ignore[arg-type]
    with rt.session() as s:
        return s.post(f"{p.url}/v1/runtimes/{rt.id}/changes", json=doc, timeout=timeout)


def state(p: ListenerProcess, rt: Runtime, **query: str) -> requests.Response:
    with rt.session() as s:
        return s.get(f"{p.url}/v1/runtimes/{rt.id}/state", params=query, timeout=60)
