"""The Compass agent's Secret in a runtime (``kyma-system/compass-agent-configuration``,
keys CONNECTOR_URL, RUNTIME_ID, TENANT, TOKEN): build, compare, write.

Thin I/O over a runtime's ApiClient; API failures become ``errors.RuntimeUnreachable``
(no content in the message). The token is only ever in the Secret's data.
"""

from __future__ import annotations

import base64
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from compass import decide, errors, queries, status

MANAGED_LABELS = {"app.kubernetes.io/managed-by": "tether-compass"}


def data_for(token: queries.OneTimeToken, runtime_id: str, tenant: str) -> dict[str, str]:
    """The Secret's ``data`` (base64 values, as the API stores them)."""
    plain = {"CONNECTOR_URL": token.connector_url, "RUNTIME_ID": runtime_id, "TENANT": tenant,
             "TOKEN": token.token}
    return {k: base64.b64encode(v.encode()).decode() for k, v in plain.items()}


def _unreachable(what: str, e: Exception) -> errors.RuntimeUnreachable:
    if isinstance(e, ApiException):
        return errors.RuntimeUnreachable(f"{what}: HTTP {e.status}")
    return errors.RuntimeUnreachable(f"{what}: {type(e).__name__}")


def read_state(api: client.ApiClient, namespace: str, name: str, expected_digest: str | None,
               timeout: float) -> decide.SecretState:
    try:
        sec: Any = client.CoreV1Api(api).read_namespaced_secret(name, namespace,
                                                                _request_timeout=timeout)
    except ApiException as e:
        if e.status == 404:
            return "missing"
        raise _unreachable("reading the agent Secret", e) from None
    except (urllib3.exceptions.HTTPError, OSError) as e:
        raise _unreachable("reading the agent Secret", e) from None
    data = dict(sec.data or {})
    return "matches" if expected_digest and status.digest(data) == expected_digest else "differs"


def write(api: client.ApiClient, namespace: str, name: str, data: dict[str, str],
          timeout: float, *, exists: bool = True) -> None:
    """Create or replace the Secret (creating its namespace if needed). ``exists`` says
    which to try first (one request in the usual case)."""
    core = client.CoreV1Api(api)
    body = client.V1Secret(
        metadata=client.V1ObjectMeta(name=name, namespace=namespace, labels=dict(MANAGED_LABELS)),
        type="Opaque", data=dict[str, bytes | str](data),
    )

    def replace() -> bool:
        try:
            core.replace_namespaced_secret(name, namespace, body, _request_timeout=timeout)
            return True
        except ApiException as e:
            if e.status != 404:
                raise
            return False

    def create() -> bool:
        try:
            core.create_namespaced_secret(namespace, body, _request_timeout=timeout)
            return True
        except ApiException as e:
            if e.status == 409:
                return False
            if e.status != 404:  # 404: the namespace itself is missing
                raise
        ns = client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace))
        try:
            core.create_namespace(ns, _request_timeout=timeout)
        except ApiException as e2:
            if e2.status != 409:
                raise
        core.create_namespaced_secret(namespace, body, _request_timeout=timeout)
        return True

    try:
        done = (replace() or create()) if exists else (create() or replace())
        if not done:
            raise errors.RuntimeUnreachable("writing the agent Secret: it changed meanwhile")
    except (ApiException, urllib3.exceptions.HTTPError, OSError) as e:
        raise _unreachable("writing the agent Secret", e) from None
