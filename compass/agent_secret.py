"""The Compass agent's Secret in a runtime (``kyma-system/compass-agent-configuration``,
keys CONNECTOR_URL, RUNTIME_ID, TENANT, TOKEN): build, compare, write.

Thin I/O over a runtime's gateway; API failures become ``errors.RuntimeUnreachable``
(no content in the message). The token is only ever in the Secret's data.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from compass import decide, errors, model, queries, status
from tether.kube import apitypes, gateway

MANAGED_LABELS = {apitypes.MANAGED_BY_LABEL: "tether-compass"}


def data_for(token: queries.OneTimeToken, runtime_id: str, tenant: str) -> dict[str, str]:
    """The Secret's ``data`` (base64 values, as the API stores them)."""
    plain = {
        "CONNECTOR_URL": token.connector_url,
        "RUNTIME_ID": runtime_id,
        "TENANT": tenant,
        "TOKEN": token.token,
    }
    return {k: base64.b64encode(v.encode()).decode() for k, v in plain.items()}


def _unreachable(what: str, e: gateway.GatewayError) -> errors.RuntimeUnreachable:
    if isinstance(e, gateway.Bounded):  # the runtime's API server broke a bound: which, and how
        return errors.RuntimeUnreachable(f"{what}: {e.reason}: {e}")
    if e.status:
        return errors.RuntimeUnreachable(f"{what}: HTTP {e.status}")
    return errors.RuntimeUnreachable(f"{what}: {type(e.__cause__ or e).__name__}")


def read_state(
    skr: gateway.Kube, namespace: str, name: str, expected_digest: str | None, timeout: float
) -> decide.SecretState:
    return read(skr, namespace, name, expected_digest, timeout)[0]


def read(
    skr: gateway.Kube, namespace: str, name: str, expected_digest: str | None, timeout: float
) -> tuple[decide.SecretState, model.AgentSecret | None]:
    """The Secret's state against the digest Tether recorded, and what it holds."""
    try:
        sec = skr.get(gateway.SECRETS, namespace, name, timeout=timeout)
    except gateway.NotFound:
        return "missing", None
    except gateway.GatewayError as e:
        raise _unreachable("reading the agent Secret", e) from e
    data = dict(sec.get("data") or {})
    state: decide.SecretState = (
        "matches" if expected_digest and status.digest(data) == expected_digest else "differs"
    )
    return state, describe(sec)


def _plain(data: Mapping[str, Any], key: str) -> str:
    try:
        return base64.b64decode(str(data.get(key) or "")).decode().strip()
    except (ValueError, UnicodeDecodeError):
        return ""


def describe(sec: Mapping[str, Any]) -> model.AgentSecret:
    """What a Secret as served holds: its runtime ID, tenant, whether it is complete, when
    it was last written (the latest of creationTimestamp and managedFields times)."""
    data = dict(sec.get("data") or {})
    meta = sec.get("metadata") or {}
    times = [model.parse_time(meta.get("creationTimestamp"))]
    times += [
        model.parse_time(mf.get("time"))
        for mf in meta.get("managedFields") or []
        if isinstance(mf, Mapping)
    ]
    known = [t for t in times if t is not None]
    return model.AgentSecret(
        runtime_id=_plain(data, "RUNTIME_ID"),
        tenant=_plain(data, "TENANT"),
        complete=all(_plain(data, k) for k in model.AGENT_SECRET_KEYS),
        written_at=max(known) if known else None,
        digest=status.digest(data),
    )


def cert_present(skr: gateway.Kube, namespace: str, timeout: float) -> bool:
    """Whether the runtime agent's client certificate Secret exists (it used its token)."""
    try:
        return (
            skr.get_or_none(gateway.SECRETS, namespace, model.AGENT_CERT_SECRET, timeout=timeout)
            is not None
        )
    except gateway.GatewayError as e:
        raise _unreachable("reading the agent's certificate Secret", e) from e


def write(
    skr: gateway.Kube,
    namespace: str,
    name: str,
    data: dict[str, str],
    timeout: float,
    *,
    exists: bool = True,
) -> None:
    """Create or replace the Secret (creating its namespace if needed). ``exists`` says
    which to try first (one request in the usual case)."""
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "data": dict(data),
        "metadata": {"name": name, "namespace": namespace, "labels": dict(MANAGED_LABELS)},
    }

    def replace() -> bool:
        try:
            skr.replace(gateway.SECRETS, namespace, name, body, timeout=timeout)
            return True
        except gateway.NotFound:
            return False

    def create() -> bool:
        try:
            skr.create(gateway.SECRETS, namespace, body, timeout=timeout)
            return True
        except gateway.Conflict:
            return False
        except gateway.NotFound:  # the namespace itself is missing
            pass
        try:
            skr.create(
                gateway.NAMESPACES,
                None,
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
                timeout=timeout,
            )
        except gateway.Conflict:
            pass
        skr.create(gateway.SECRETS, namespace, body, timeout=timeout)
        return True

    try:
        done = (replace() or create()) if exists else (create() or replace())
    except gateway.GatewayError as e:
        raise _unreachable("writing the agent Secret", e) from e
    if not done:
        raise errors.RuntimeUnreachable("writing the agent Secret: it changed meanwhile")
