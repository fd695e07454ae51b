"""schemathesis against listener/openapi.json, statefully: POST changes, then GET state through
the document's link (``postChanges`` 200 -> ``getState`` with the same runtimeId), over mTLS
with a valid runtime certificate, against the real listener and KCP.

Checks: no 5xx, every status code and content type is documented, every answer conforms to
its schema. The runtime ID of the path is the certificate's (else every call is a 403) and
half of the generated bodies carry it too (else every record is a 403 before the store is
reached). The example count is small for CI; ``bench/listener_fuzz.py`` runs the same machine
longer.
"""

from __future__ import annotations

from typing import Any

from testing.listenerenv import ListenerProcess, Runtime
from testing.schemafuzz import run

STEP_COUNT = 10
EXAMPLES = 25


def test_stateful_schemathesis(listener: ListenerProcess, runtime: Any) -> None:
    rt: Runtime = runtime()
    statuses = run(listener, rt, EXAMPLES, STEP_COUNT)
    print("schemathesis statuses:", dict(sorted(statuses.items())))
    posts = {k: n for k, n in statuses.items() if k.startswith("POST ")}
    gets = {k: n for k, n in statuses.items() if k.startswith("GET ")}
    assert sum(posts.values()) >= EXAMPLES and sum(gets.values()) >= 1
    assert any(k.endswith(" 200") for k in gets), statuses  # the link was followed
    assert not any(int(k.rsplit(" ", 1)[1]) >= 500 for k in statuses), statuses
    assert "unexpected error" not in listener.log_file.read_text()
