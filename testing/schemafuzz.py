"""schemathesis against listener/openapi.json, statefully, as a hypothesis state machine:
POST changes, then GET state through the document's link (``postChanges`` 200 ->
``getState`` with the same runtimeId), over mTLS with a runtime's certificate. Used by
``tests/listener/test_schemathesis.py`` (few examples) and ``bench/listener_fuzz.py`` (many).

Checks: no 5xx, every status code and content type is documented, every answer conforms to
its schema. The runtime ID of the path is the certificate's (else every call is a 403) and
half of the generated bodies carry it too (else every record is a 403 before the store is
reached).
"""

from __future__ import annotations

import json
import zlib
from typing import Any

import hypothesis
import requests
import schemathesis
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from listener.edge import openapi
from testing.listenerenv import ListenerProcess, Runtime

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def state_machine(
    base_url: str, rt: Runtime, session: requests.Session, statuses: dict[str, int]
) -> Any:
    """The stateful test of the runtime API as a hypothesis state machine class."""
    doc = json.loads(openapi.OPENAPI_FILE.read_text())
    schema = schemathesis.openapi.from_dict(doc).include(path_regex="^/v1/runtimes/")
    schema.config.update(
        base_url=base_url,
        parameters={"runtimeId": rt.id},
        tls_verify=str(rt.env.server_ca_file),
        request_cert=str(rt.cert_file),
        request_cert_key=str(rt.key_file),
        request_timeout=60,
    )

    class Machine(schema.as_state_machine()):  # type: ignore[misc]
        def before_call(self, case: Any) -> None:
            case.path_parameters = {**(case.path_parameters or {}), "runtimeId": rt.id}
            body = case.body if isinstance(case.body, dict) else None
            # half of the bodies, chosen by their content: the same case must get the same
            # answer when hypothesis replays it (whether the link is followed depends on it)
            if body is not None and zlib.crc32(repr(body).encode()) % 2 == 0:
                items = body.get("items")
                for rec in items if isinstance(items, list) else [body]:
                    if isinstance(rec, dict):
                        rec["runtimeId"] = rt.id

        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"session": session, "timeout": 60}

        def after_call(self, response: Any, case: Any) -> None:
            key = f"{case.method} {case.path} {response.status_code}"
            statuses[key] = statuses.get(key, 0) + 1

        def validate_response(
            self, response: Any, case: Any, additional_checks: Any = None, **kwargs: Any
        ) -> None:
            case.validate_response(response, checks=CHECKS)

    return Machine


def run(
    listener: ListenerProcess,
    rt: Runtime,
    examples: int,
    steps: int,
    statuses: dict[str, int] | None = None,
) -> dict[str, int]:
    """Run the state machine; ``statuses`` (given by the caller) keeps the counts made
    before a failure."""
    statuses = {} if statuses is None else statuses
    session = rt.session()
    try:
        machine = state_machine(listener.url, rt, session, statuses)
        machine.run(
            settings=hypothesis.settings(
                max_examples=examples,
                stateful_step_count=steps,
                deadline=None,
                database=None,
                suppress_health_check=list(hypothesis.HealthCheck),
                derandomize=True,
            )
        )
    finally:
        session.close()
    return statuses
