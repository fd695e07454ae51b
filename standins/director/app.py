"""The stand-in Director's HTTP API (Flask):

- ``POST /oauth2/token``  OAuth2 client credentials (HTTP basic or form fields)
- ``POST /graphql``       the Director's GraphQL API, parsed and validated against
  ``schema.graphql`` by graphql-core; bearer token and ``Tenant`` header enforced
- ``POST /connector/graphql``  what the runtime agent does with its one-time token
  (header ``Connector-Token``): uses the token up, the runtime becomes CONNECTED
- ``GET/PUT /admin/faults``, ``GET /admin/runtimes``  for the demo and tests
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
import time
from typing import Any

import flask
import graphql

from standins.director import store as store_mod

SCHEMA_FILE = pathlib.Path(__file__).with_name("schema.graphql")


@functools.cache
def schema() -> graphql.GraphQLSchema:
    return graphql.build_schema(SCHEMA_FILE.read_text())


def _error(kind: str, message: str) -> graphql.GraphQLError:
    return graphql.GraphQLError(
        message, extensions={"error_code": store_mod.ERROR_CODES[kind], "error": kind}
    )


class RuntimeView:
    """A Runtime as the GraphQL layer resolves it."""

    def __init__(self, rt: store_mod.Runtime) -> None:
        self.id = rt.id
        self.name = rt.name
        self.description = rt.description
        self.metadata = {"creationTimestamp": store_mod.iso(rt.created)}
        self.status = {"condition": rt.condition, "timestamp": store_mod.iso(rt.condition_time)}
        self._labels = rt.labels

    def labels(self, info: Any, key: str | None = None) -> dict[str, Any]:
        if key is None:
            return dict(self._labels)
        return {key: self._labels[key]} if key in self._labels else {}


class Root:
    """Query and Mutation fields; graphql-core's default resolver calls these methods."""

    def __init__(self, store: store_mod.Store, tenant: str) -> None:
        self._store = store
        self._tenant = tenant

    def _call(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except store_mod.DirectorError as e:
            raise _error(e.kind, str(e)) from None

    def runtimes(
        self,
        info: Any,
        filter: list[dict[str, Any]] | None = None,
        first: int = 200,
        after: str | None = None,
    ) -> dict[str, Any]:
        page, total, end, more = self._call(self._store.find, self._tenant, filter, first, after)
        return {
            "data": [RuntimeView(r) for r in page],
            "totalCount": total,
            "pageInfo": {"startCursor": after or "", "endCursor": end, "hasNextPage": more},
        }

    def runtime(self, info: Any, id: str) -> RuntimeView | None:
        rt = self._store.get(self._tenant, id)
        return None if rt is None else RuntimeView(rt)

    def registerRuntime(self, info: Any, **kwargs: Any) -> RuntimeView:  # noqa: N802
        return RuntimeView(self._call(self._store.register, self._tenant, kwargs["in"]))

    def unregisterRuntime(self, info: Any, id: str) -> RuntimeView:  # noqa: N802
        return RuntimeView(self._call(self._store.unregister, self._tenant, id))

    def setRuntimeLabel(
        self,
        info: Any,
        runtimeID: str,
        key: str,  # noqa: N802, N803
        value: Any,
    ) -> dict[str, Any]:
        self._call(self._store.set_label, self._tenant, runtimeID, key, value)
        return {"key": key, "value": value}

    def requestOneTimeTokenForRuntime(
        self,
        info: Any,
        id: str,  # noqa: N802
        systemAuthID: str | None = None,
    ) -> dict[str, Any]:  # noqa: N803
        ott = self._call(self._store.request_token, self._tenant, id)
        return {
            "token": ott.token,
            "connectorURL": self._store.connector_url,
            "used": ott.used,
            "expiresAt": store_mod.iso(ott.expires),
            "createdAt": store_mod.iso(ott.created),
            "usedAt": None,
            "raw": None,
            "rawEncoded": None,
            "type": "Runtime",
        }


def prepared(query: str) -> tuple[graphql.DocumentNode | None, tuple[graphql.GraphQLError, ...]]:
    """A query parsed and validated against the schema: the document, or None, and the
    errors that stop it. Once per distinct query text up to 4 KiB (a client sends the same
    few queries with other variables; at most 256 kept), each time for a longer one."""
    return _prepared(query) if len(query) <= 4096 else _prepare(query)


@functools.lru_cache(maxsize=256)
def _prepared(query: str) -> tuple[graphql.DocumentNode | None, tuple[graphql.GraphQLError, ...]]:
    return _prepare(query)


def _prepare(query: str) -> tuple[graphql.DocumentNode | None, tuple[graphql.GraphQLError, ...]]:
    try:
        doc = graphql.parse(query)
    except graphql.GraphQLError as e:
        return None, (e,)
    return doc, tuple(graphql.validate(schema(), doc))


def _execute(
    query: str, root: Root, variables: dict[str, Any] | None, operation: str | None
) -> graphql.ExecutionResult:
    """What ``graphql.graphql_sync`` answers, from the prepared document."""
    doc, errors = prepared(query)
    if doc is None or errors:
        return graphql.ExecutionResult(data=None, errors=list(errors))
    result = graphql.execute(
        schema(), doc, root_value=root, variable_values=variables, operation_name=operation
    )
    assert isinstance(result, graphql.ExecutionResult), "the resolvers are synchronous"
    return result


def _operation_of(doc: graphql.DocumentNode | None) -> str:
    """The first top-level field of the first operation (bounded label for the log)."""
    if doc is None:
        return "invalid"
    for d in doc.definitions:
        if isinstance(d, graphql.OperationDefinitionNode):
            for sel in d.selection_set.selections:
                if isinstance(sel, graphql.FieldNode):
                    return sel.name.value
    return "invalid"


def create_app(store: store_mod.Store) -> flask.Flask:
    app = flask.Flask("standins.director")
    app.config["STORE"] = store

    def bad(status: int, error: str, details: Any = None) -> flask.Response:
        resp = flask.jsonify({"error": error, "details": details})
        resp.status_code = status
        return resp

    @app.post("/oauth2/token")
    def token() -> flask.Response:
        auth = flask.request.authorization
        form = flask.request.form
        if form.get("grant_type") != "client_credentials":
            return bad(400, "unsupported_grant_type")
        cid = (auth.username if auth else None) or form.get("client_id") or ""
        secret = (auth.password if auth else None) or form.get("client_secret") or ""
        issued = store.issue_access_token(cid, secret)
        if issued is None:
            return bad(401, "invalid_client")
        return flask.jsonify(
            {
                "access_token": issued,
                "token_type": "bearer",
                "expires_in": store.access_token_ttl,
                "scope": "runtime:read runtime:write",
            }
        )

    @app.post("/graphql")
    def graphql_endpoint() -> flask.Response:
        body = flask.request.get_json(silent=True)
        if not isinstance(body, dict) or not isinstance(body.get("query"), str):
            return bad(400, "invalid request", "expected JSON {query, variables}")
        op = _operation_of(prepared(body["query"])[0])
        tenant = flask.request.headers.get("Tenant")
        fault = store.take_fault(op)
        if fault is not None:
            if fault.latency:
                time.sleep(fault.latency)
            if fault.hang:
                time.sleep(fault.hang)
            if fault.http_status:
                store.record(op, tenant, f"http:{fault.http_status}")
                return bad(fault.http_status, "injected failure")
        elif store.faults.latency:
            time.sleep(store.faults.latency)
        authz = flask.request.headers.get("Authorization", "")
        if not authz.startswith("Bearer ") or not store.access_token_valid(authz[7:]):
            store.record(op, tenant, "unauthorized")
            return bad(401, "unauthorized", "a valid bearer token is required")
        if fault is not None and fault.graphql_error:
            store.record(op, tenant, f"error:{fault.graphql_error}")
            text = (fault.message or f"injected {fault.graphql_error}").replace(
                "{bearer}", authz[7:]
            )
            err = _error(fault.graphql_error, text)
            return flask.jsonify({"data": None, "errors": [err.formatted]})
        if not tenant:
            store.record(op, tenant, "error:TenantRequired")
            return flask.jsonify(
                {"data": None, "errors": [_error("TenantRequired", "Tenant is required").formatted]}
            )
        variables = body.get("variables")
        if variables is not None and not isinstance(variables, dict):
            return bad(400, "invalid request", "variables must be an object")
        result = _execute(body["query"], Root(store, tenant), variables, body.get("operationName"))
        formatted = result.formatted
        errors = formatted.get("errors") or []
        kinds = [((e.get("extensions") or {}).get("error") or "InvalidQuery") for e in errors]
        store.record(op, tenant, "ok" if not kinds else f"error:{kinds[0]}")
        return flask.jsonify(formatted)

    @app.post("/connector/graphql")
    def connector() -> flask.Response:
        tok = flask.request.headers.get("Connector-Token", "")
        rt = store.connect(tok) if tok else None
        if rt is None:
            return bad(403, "invalid token")
        return flask.jsonify({"data": {"configuration": {"runtimeId": rt.id}}})

    @app.get("/admin/faults")
    def get_faults() -> flask.Response:
        return flask.jsonify(dataclasses.asdict(store.faults))

    @app.put("/admin/faults")
    def put_faults() -> flask.Response:
        body = flask.request.get_json(silent=True)
        if not isinstance(body, dict):
            return bad(400, "invalid request", "expected a JSON object")
        try:
            f = store_mod.Faults(**{**body, "operations": tuple(body.get("operations") or ())})
        except TypeError as e:
            return bad(400, "invalid faults", str(e))
        if f.graphql_error is not None and f.graphql_error not in store_mod.ERROR_CODES:
            return bad(
                400,
                "invalid faults",
                f"graphql_error must be one of {sorted(store_mod.ERROR_CODES)}",
            )
        store.set_faults(f)
        return flask.jsonify(dataclasses.asdict(f))

    @app.get("/admin/requests")
    def request_counts() -> flask.Response:
        counts: dict[str, int] = {}
        for r in list(store.requests):
            key = f"{r.operation}:{r.outcome}"
            counts[key] = counts.get(key, 0) + 1
        return flask.jsonify(
            {
                "total": len(store.requests),
                "by_operation": counts,
                "runtimes": len(store.all_runtimes()),
            }
        )

    @app.get("/admin/runtimes")
    def list_runtimes() -> flask.Response:
        return flask.jsonify(
            [
                {
                    "id": r.id,
                    "tenant": r.tenant,
                    "name": r.name,
                    "labels": r.labels,
                    "condition": r.condition,
                }
                for r in store.all_runtimes()
            ]
        )

    return app
