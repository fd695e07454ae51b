"""The GraphQL documents Tether sends to the Director, and the pure parts around them:
building a request body (every argument a variable, never formatted into the text) and
turning a response into data or a typed error.

The Director's answers are checked before they reach a runtime or the KCP (issue 38): a
runtime ID must be a Kubernetes label value (it becomes the mapping's label and the agent
Secret's RUNTIME_ID; compass-manager likewise refuses a ``runtime(id:)`` answer for another
ID), a one-time token 16-512 characters of the base64/URL-safe alphabet, and the connector
URL an ``https://`` URL with a host, without user info, query or fragment, at most 1,024
printable characters. A refused answer raises ``errors.InvalidAnswer``, whose message never
holds the token.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable
from typing import Any, NamedTuple

from compass import errors

RUNTIME_FIELDS = "id name labels status { condition timestamp }"

FIND_RUNTIMES = f"""query FindRuntimes($filter: [LabelFilter!], $first: Int, $after: PageCursor) {{
  result: runtimes(filter: $filter, first: $first, after: $after) {{
    data {{ {RUNTIME_FIELDS} }}
    pageInfo {{ endCursor hasNextPage }}
    totalCount
  }}
}}"""

GET_RUNTIME = f"""query GetRuntime($id: ID!) {{
  result: runtime(id: $id) {{ {RUNTIME_FIELDS} }}
}}"""

REGISTER_RUNTIME = f"""mutation RegisterRuntime($in: RuntimeRegisterInput!) {{
  result: registerRuntime(in: $in) {{ {RUNTIME_FIELDS} }}
}}"""

UNREGISTER_RUNTIME = """mutation UnregisterRuntime($id: ID!) {
  result: unregisterRuntime(id: $id) { id }
}"""

REQUEST_TOKEN = """mutation RequestOneTimeToken($id: ID!) {
  result: requestOneTimeTokenForRuntime(id: $id) { token connectorURL expiresAt }
}"""

SET_RUNTIME_LABEL = """mutation SetRuntimeLabel($runtimeID: ID!, $key: String!, $value: Any!) {
  result: setRuntimeLabel(runtimeID: $runtimeID, key: $key, value: $value) { key value }
}"""

# operation label (bounded) -> document
OPERATIONS = {
    "find_runtimes": FIND_RUNTIMES,
    "get_runtime": GET_RUNTIME,
    "register_runtime": REGISTER_RUNTIME,
    "unregister_runtime": UNREGISTER_RUNTIME,
    "request_token": REQUEST_TOKEN,
    "set_runtime_label": SET_RUNTIME_LABEL,
}


RUNTIME_ID_RE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")  # a label value
TOKEN_RE = re.compile(r"[A-Za-z0-9._~+/=-]{16,512}")
CONNECTOR_URL_MAX = 1024
_PRINTABLE = re.compile(r"[\x21-\x7e]+")


class Runtime(NamedTuple):
    id: str
    name: str
    labels: dict[str, Any]
    condition: str


class OneTimeToken(NamedTuple):
    token: str
    connector_url: str
    expires_at: str

    def __repr__(self) -> str:  # never show the token
        return f"OneTimeToken(connector_url={self.connector_url!r}, expires_at={self.expires_at!r})"


def label_query(value: str) -> str:
    """The Director's SQL/JSON path filter for an exact label value. The value is a
    variable's content (JSON-escaped), not part of the document."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'$[*] ? (@ == "{escaped}")'


def body(operation: str, variables: dict[str, Any]) -> dict[str, Any]:
    return {"query": OPERATIONS[operation], "variables": variables}


def result_of(doc: object, secrets: Iterable[str] = ()) -> Any:
    """The ``result`` field of a GraphQL response, or the mapped error (its message
    scrubbed of ``secrets``, ``errors.scrub``)."""
    if not isinstance(doc, dict):
        raise errors.Unavailable("Director answered something that is not a JSON object")
    errs = doc.get("errors")
    if errs:
        raise errors.from_graphql_error(errs[0] if isinstance(errs, list) else errs, secrets)
    data = doc.get("data")
    if not isinstance(data, dict) or "result" not in data:
        raise errors.Unavailable("Director response has no data")
    return data["result"]


def valid_runtime_id(rid: str) -> bool:
    return RUNTIME_ID_RE.fullmatch(rid) is not None


def connector_url_problem(url: str) -> str:
    """Why ``url`` is no acceptable connector URL ("" when it is)."""
    if len(url) > CONNECTOR_URL_MAX or not _PRINTABLE.fullmatch(url):
        return f"more than {CONNECTOR_URL_MAX} characters or a non-printable one"
    parts = urllib.parse.urlsplit(url)
    try:
        parts.port  # noqa: B018 - raises on a port that is no number
    except ValueError:
        return "a bad port"
    if parts.scheme != "https" or not parts.hostname:
        return "a scheme other than https or no host"
    if parts.username is not None or parts.password is not None or parts.query or parts.fragment:
        return "user info, a query or a fragment"
    return ""


def runtime_of(raw: object) -> Runtime:
    if not isinstance(raw, dict) or not raw.get("id"):
        raise errors.Unavailable("Director returned a runtime without id")
    if not isinstance(raw["id"], str) or not valid_runtime_id(raw["id"]):
        raise errors.InvalidAnswer(
            "Director returned a runtime whose id is no label value "
            "(1-63 of [A-Za-z0-9._-], alphanumeric at both ends)"
        )
    status = raw.get("status") or {}
    return Runtime(
        id=str(raw["id"]),
        name=str(raw.get("name") or ""),
        labels=dict(raw.get("labels") or {}),
        condition=str(status.get("condition") or "INITIAL")
        if isinstance(status, dict)
        else "INITIAL",
    )


def page_of(raw: object) -> tuple[list[Runtime], int, str | None, bool]:
    """A ``RuntimePage``: its runtimes, ``totalCount``, ``endCursor``, ``hasNextPage``."""
    if not isinstance(raw, dict):
        raise errors.Unavailable("Director returned a runtime page that is not an object")
    data = [runtime_of(r) for r in raw.get("data") or []]
    info: dict[str, Any] = raw.get("pageInfo") or {}
    if not isinstance(info, dict):
        raise errors.Unavailable("Director returned a runtime page without pageInfo")
    total = raw.get("totalCount")
    cursor = info.get("endCursor")
    return (
        data,
        total if isinstance(total, int) else len(data),
        str(cursor) if cursor else None,
        bool(info.get("hasNextPage")),
    )


def token_of(raw: object) -> OneTimeToken:
    """The one-time token, checked (module docstring); the message never holds it."""
    if not isinstance(raw, dict) or not raw.get("token") or not raw.get("connectorURL"):
        raise errors.Unavailable("Director returned an incomplete one-time token")
    token, url = raw["token"], raw["connectorURL"]
    if not isinstance(token, str) or not TOKEN_RE.fullmatch(token):
        raise errors.InvalidAnswer(
            "Director returned a one-time token that is not 16-512 "
            "characters of [A-Za-z0-9._~+/=-]; not delivered"
        )
    problem = connector_url_problem(url) if isinstance(url, str) else "not a string"
    if problem:
        raise errors.InvalidAnswer(
            f"Director returned a connector URL with {problem}; token not delivered"
        )
    expires = raw.get("expiresAt")
    return OneTimeToken(token, url, str(expires)[:64] if expires else "")
