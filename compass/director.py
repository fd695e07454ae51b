"""The Director client: GraphQL over HTTPS with OAuth2 client credentials, the ``Tenant``
header (the global account ID), timeouts, a circuit breaker and typed errors.

Retries are not done here: a failed call fails the runtime's step, which the reconciler
retries with that runtime's persisted backoff; the breaker keeps an outage cheap.

Fencing: ``fence`` (the elector's ``fresh``, attached by the entry point) is checked right
before every write (``WRITES``: register, one-time token, unregister); when it is false the
call is not sent and ``errors.NotLeading`` is raised.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import requests

from compass import breaker as breaker_mod
from compass import errors, metrics, model, queries
from compass import oauth as oauth_mod

WRITES = frozenset({"register_runtime", "request_token", "unregister_runtime", "set_runtime_label"})


class DirectorClient:
    def __init__(
        self,
        *,
        graphql_url: str,
        tokens: oauth_mod.TokenSource,
        session: requests.Session,
        verify: str | bool,
        timeout: float,
        breaker: breaker_mod.CircuitBreaker,
        stats: metrics.Metrics,
        page_size: int = 100,
        clock: Callable[[], float] = time.monotonic,
        on_error: Callable[[str, errors.DirectorError], None] | None = None,
    ) -> None:
        self._url = graphql_url
        self._tokens = tokens
        self._session = session
        self._verify = verify
        self._timeout = timeout
        self.breaker = breaker
        self._metrics = stats
        self._page = page_size
        self._clock = clock
        # Told of every error the Director (or the way to it) answered; not of NotFound
        # (an expected answer) nor of calls the open breaker refused (no request was made).
        self.on_error = on_error
        # Whether this process may write now (its leadership is fresh); always, unelected.
        self.fence: Callable[[], bool] = lambda: True

    # -- operations ---------------------------------------------------------------------------

    def find_runtime(self, tenant: str, managed_by: str, kyma_ref: str) -> queries.Runtime | None:
        """A runtime this instance registered for this Kyma CR (label filter), if any.
        Several (should never happen): the oldest, as the Director lists them."""
        filt = [
            {"key": "director_connection_managed_by", "query": queries.label_query(managed_by)},
            {"key": "tether_kyma", "query": queries.label_query(kyma_ref)},
        ]
        res = self._call("find_runtimes", tenant, {"filter": filt, "first": self._page})
        data = res.get("data") if isinstance(res, dict) else None
        if not data:
            return None
        return queries.runtime_of(data[0])

    def find_registrations(self, tenant: str, shoot: str) -> list[queries.Runtime]:
        """The tenant's runtimes labelled ``gardenerClusterName`` = ``shoot`` (as the
        Provisioner, compass-manager and Tether write it): the first page, oldest first."""
        filt = [{"key": model.SHOOT_LABEL, "query": queries.label_query(shoot)}]
        res = self._call("find_runtimes", tenant, {"filter": filt, "first": self._page})
        data = res.get("data") if isinstance(res, dict) else None
        return [queries.runtime_of(r) for r in data or []]

    def list_labelled(self, tenant: str, key: str, limit: int) -> list[queries.Runtime] | None:
        """Every runtime of the tenant that carries the label ``key`` (a ``LabelFilter``
        without ``query``: the label exists), page by page, oldest first; None when there
        are more than ``limit`` (known from the first page's ``totalCount``)."""
        out: list[queries.Runtime] = []
        after: str | None = None
        while True:
            res = self._call(
                "find_runtimes",
                tenant,
                {"filter": [{"key": key}], "first": self._page, "after": after},
            )
            page, total, after, more = queries.page_of(res)
            if total > limit or len(out) + len(page) > limit:
                return None
            out += page
            if not more:
                return out
            if not page or not after:
                raise errors.Unavailable("Director runtimes: a next page without data or cursor")

    def set_label(self, tenant: str, runtime_id: str, key: str, value: Any) -> None:
        self._call(
            "set_runtime_label", tenant, {"runtimeID": runtime_id, "key": key, "value": value}
        )

    def get_runtime(self, tenant: str, runtime_id: str) -> queries.Runtime | None:
        try:
            res = self._call("get_runtime", tenant, {"id": runtime_id})
        except errors.NotFound:
            return None
        if res is None:
            return None
        rt = queries.runtime_of(res)
        if rt.id != runtime_id:  # as compass-manager (ErrDirectorRuntimeIDMismatch)
            raise errors.InvalidAnswer("Director answered runtime(id:) with another runtime")
        return rt

    def register(self, tenant: str, register_input: dict[str, Any]) -> queries.Runtime:
        return queries.runtime_of(self._call("register_runtime", tenant, {"in": register_input}))

    def unregister(self, tenant: str, runtime_id: str) -> bool:
        """True if unregistered now, False if the Director did not know it (idempotent)."""
        try:
            self._call("unregister_runtime", tenant, {"id": runtime_id})
        except errors.NotFound:
            return False
        return True

    def request_token(self, tenant: str, runtime_id: str) -> queries.OneTimeToken:
        return queries.token_of(self._call("request_token", tenant, {"id": runtime_id}))

    # -- transport ------------------------------------------------------------------------------

    def _call(self, operation: str, tenant: str, variables: dict[str, Any]) -> Any:
        if operation in WRITES and not self.fence():
            raise errors.NotLeading(f"Director {operation} not sent: leadership not fresh")
        if not self.breaker.allow():
            self._metrics.director_errors.labels(operation, "circuit_open").inc()
            raise errors.CircuitOpen("Director circuit breaker is open")
        t0 = self._clock()
        try:
            result = self._send(operation, tenant, variables)
        except errors.Unavailable as e:
            self.breaker.failure()
            self._metrics.director_errors.labels(operation, e.kind).inc()
            self._told(operation, e)
            raise
        except errors.DirectorError as e:
            self.breaker.neutral()
            self._metrics.director_errors.labels(operation, e.kind).inc()
            if not isinstance(e, errors.NotFound):
                self._told(operation, e)
            raise
        finally:
            self._metrics.director_latency.labels(operation).observe(self._clock() - t0)
        self.breaker.success()
        return result

    def _told(self, operation: str, e: errors.DirectorError) -> None:
        if self.on_error is not None:
            self.on_error(operation, e)

    def _send(self, operation: str, tenant: str, variables: dict[str, Any]) -> Any:
        for attempt in (1, 2):
            token = self._tokens.get()
            try:
                resp = self._session.post(
                    self._url,
                    json=queries.body(operation, variables),
                    headers={"Authorization": f"Bearer {token}", "Tenant": tenant},
                    verify=self._verify,
                    timeout=self._timeout,
                )
            except requests.Timeout:
                raise errors.Unavailable(f"Director {operation}: timed out") from None
            except requests.RequestException as e:
                raise errors.Unavailable(f"Director {operation}: {type(e).__name__}") from None
            if resp.status_code == 401 and attempt == 1:
                self._tokens.invalidate()  # expired or revoked early: one fresh token
                continue
            if resp.status_code != 200:
                raise errors.from_http_status(resp.status_code, f"Director {operation}")
            try:
                doc = resp.json()
            except ValueError:
                raise errors.Unavailable(f"Director {operation}: response is not JSON") from None
            return queries.result_of(doc, self._tokens.secrets())
        raise errors.Unauthorized(f"Director {operation}: HTTP 401 with a fresh token")
