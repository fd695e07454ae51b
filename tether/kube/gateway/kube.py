"""``Kube``: the typed calls the product makes to one Kubernetes API server.

    k = connect.from_kubeconfig(path, pool_size=16, timeout=10)
    cm = k.get(kube.CONFIGMAPS, "team-a", "app-config")          # a plain dict, as served
    for meta in k.list_items(RECORDS, ns, label_selector="a=b", metadata_only=True): ...
    k.replace(RECORDS, ns, name, body)                           # Conflict when stale

Every call is one HTTP request over the client's connection pool, TLS and credentials
(client certificate, or a bearer token refreshed by the client's hook), without the typed
layer of the ``kubernetes`` package: bodies go out and come back as JSON dicts (camelCase,
as the API serves them), which costs about half the CPU of model objects. Failures raise
the gateway's errors (``tether.kube.gateway.errors``), ``from`` the original.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import threading
import time
import urllib.parse
from collections.abc import Generator, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import urllib3
from kubernetes import client

from tether.kube import apitypes
from tether.kube.gateway import bounded, errors, stream

# the resource types live with the other API types; re-exported for ``gateway.Resource`` etc.
Resource = apitypes.Resource
CONFIGMAPS, SECRETS = apitypes.CONFIGMAPS, apitypes.SECRETS
NAMESPACES, LEASES = apitypes.NAMESPACES, apitypes.LEASES

DEFAULT_TIMEOUT = 10.0
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
APPLY_PATCH = "application/apply-patch+yaml"  # server-side apply; JSON is YAML
ERROR_BODY = 64 * 1024  # of an error answer, only the Status's message is used


_AGENT = {"name": "tether"}


def identify(part: str) -> None:
    """Name this process's calls ``tether-<part>`` (its User-Agent, with the version). The
    API server takes that name as the field manager of every create, update and patch, so
    ``managedFields`` say which part wrote what (server-side apply names its own manager).
    Called once by each part's entry point, before its gateways are built."""
    try:
        version = importlib.metadata.version("tether")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    _AGENT["name"] = f"tether-{part}/{version}"


def user_agent() -> str:
    return _AGENT["name"]


class RuntimeTransport(NamedTuple):
    """A runtime's API server: its bounded pool, base URL and static credential."""

    pool: urllib3.PoolManager
    server: str
    token: str | None
    limits: bounded.Limits


def list_query(
    *,
    label_selector: str | None = None,
    field_selector: str | None = None,
    limit: int | None = None,
    continue_token: str | None = None,
) -> list[tuple[str, str]]:
    """The query of a list call (pure)."""
    query: list[tuple[str, str]] = []
    if label_selector:
        query.append(("labelSelector", label_selector))
    if field_selector:
        query.append(("fieldSelector", field_selector))
    if limit:
        query.append(("limit", str(limit)))
    if continue_token:
        query.append(("continue", continue_token))
    return query


class Kube:
    """Calls to one API server; thread-safe (the connection pool is)."""

    def __init__(
        self,
        api: client.ApiClient | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        runtime: RuntimeTransport | None = None,
    ) -> None:
        """A gateway over the ``kubernetes`` client's configuration (``api``: the KCP, a
        kubeconfig the operator wrote), or over a runtime's bounded transport (``runtime``:
        built from a parsed runtime kubeconfig, ``connect.from_runtime_kubeconfig``)."""
        self._api = api
        self.timeout = timeout
        self._runtime = runtime
        if runtime is not None:
            self._pool: urllib3.PoolManager = runtime.pool
            self._host = runtime.server
            self._headers = {"User-Agent": user_agent(), "Accept-Encoding": "identity"}
            if runtime.token:
                self._headers["Authorization"] = f"Bearer {runtime.token}"
            self._retries = urllib3.Retry(total=1, redirect=False)
        elif api is not None:
            self._pool = api.rest_client.pool_manager
            self._host = str(api.configuration.host).rstrip("/")
            self._headers = {
                **{k: str(v) for k, v in api.default_headers.items()},
                "User-Agent": user_agent(),
            }  # not OpenAPI-Generator's
            # urllib3's default retries, as the typed client has them (a connection that the
            # server closed while pooled, e.g. after its restart, is retried), never a redirect
            self._retries = urllib3.Retry(total=3, redirect=False)
        else:
            raise ValueError("Kube needs an api client or a runtime transport")

    @property
    def server(self) -> str:
        """The API server's URL (no credentials): where this gateway sends its requests."""
        return self._host

    @property
    def api_client(self) -> client.ApiClient:
        """The ``kubernetes`` client underneath: for tests and the dev harness only."""
        if self._api is None:
            raise ValueError("a runtime's gateway has no kubernetes client")
        return self._api

    def close(self) -> None:
        if self._api is not None:
            self._api.close()
        else:
            self._pool.clear()

    # -- the one request -------------------------------------------------------------------

    def _auth_headers(self) -> dict[str, str]:
        if self._api is None:
            return {}
        out = {}
        for auth in self._api.configuration.auth_settings().values():
            if auth.get("in") == "header" and auth.get("value"):
                out[str(auth["key"])] = str(auth["value"])
        return out

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Any = None,
        content_type: str = JSON,
        accept: str = JSON,
        timeout: float | None = None,
        what: str = "",
    ) -> dict[str, Any]:
        """One request; the answer's JSON object. Raises a ``errors.GatewayError``.

        A runtime's gateway bounds the whole call by ``timeout`` (wall clock: connect, TLS,
        headers and body) and the answer by its ``Limits.max_bytes``; a redirect is refused."""
        what = what or f"{method} {path.rsplit('/', 1)[-1] if '/' in path else path}"
        headers = dict(self._headers)
        headers["Accept"] = accept
        headers.update(self._auth_headers())
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body).encode()
        url = self._host + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        seconds = self.timeout if timeout is None else timeout
        runtime = self._runtime
        scope = bounded.deadline(seconds) if runtime is not None else contextlib.nullcontext(0.0)
        with scope as end:
            try:
                resp = self._pool.request(
                    method,
                    url,
                    body=data,
                    headers=headers,
                    retries=self._retries,
                    timeout=urllib3.Timeout(connect=seconds, read=seconds),
                    preload_content=False,
                    decode_content=runtime is None,
                    pool_timeout=seconds,
                )
                try:
                    if 300 <= resp.status <= 399:
                        raise errors.Redirected(
                            f"{what}: HTTP {resp.status}: redirects are not followed"
                        )
                    limit = runtime.limits.max_bytes if runtime is not None else None
                    if not 200 <= resp.status <= 299:
                        raw = bounded.read_bounded(resp, min(limit or ERROR_BODY, ERROR_BODY), what)
                        raise errors.for_status(resp.status, what, raw)
                    raw = bounded.read_bounded(resp, limit, what)
                except BaseException:
                    bounded.discard(resp)
                    raise
                resp.release_conn()
                doc = json.loads(raw or b"{}")
            except errors.GatewayError:
                raise
            except (urllib3.exceptions.HTTPError, OSError, ValueError) as e:
                if runtime is not None and time.monotonic() >= end:
                    raise errors.DeadlineExceeded(
                        f"{what}: no complete answer within {seconds:g}s"
                    ) from e
                raise errors.translate(e, what) from e
        if not isinstance(doc, dict):
            raise errors.Unavailable(f"{what}: the answer is not a JSON object")
        return doc

    def watch(
        self,
        res: Resource,
        namespace: str | None,
        *,
        resource_version: str,
        timeout_seconds: int,
        label_selector: str | None = None,
        bookmarks: bool = True,
        max_event_bytes: int = stream.MAX_EVENT_BYTES,
        read_timeout: float | None = None,
        stop: threading.Event | None = None,
        metadata_only: bool = False,
    ) -> Generator[dict[str, Any], None, None]:
        """The events of a watch from ``resource_version`` (``namespace`` None: across all
        namespaces), as served, while the server holds it open (``timeout_seconds``); see
        ``stream`` for its bounds and errors (``errors.Gone``: the version is too old).
        Lazy: the request is made at the first ``next``. ``metadata_only``: the events'
        objects are ``PartialObjectMetadata`` (their ``metadata`` only)."""
        what = f"watch {res.plural}"
        query = list_query(label_selector=label_selector) + stream.query(
            resource_version=resource_version, timeout_seconds=timeout_seconds, bookmarks=bookmarks
        )
        headers = {
            **self._headers,
            "Accept": METADATA if metadata_only else JSON,
            **self._auth_headers(),
        }
        read = read_timeout if read_timeout is not None else timeout_seconds + 30.0
        try:
            resp = self._pool.request(
                "GET",
                f"{self._host}{res.path(namespace)}?{urllib.parse.urlencode(query)}",
                headers=headers,
                retries=self._retries,
                preload_content=False,
                timeout=urllib3.Timeout(connect=self.timeout, read=read),
                decode_content=self._runtime is None,
                pool_timeout=self.timeout,
            )
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise errors.translate(e, what) from e
        if not 200 <= resp.status <= 299:
            try:
                raw = bounded.read_bounded(resp, ERROR_BODY, what)
            except errors.GatewayError:
                raw = b""
            finally:
                bounded.discard(resp)
            raise errors.for_status(resp.status, what, raw)
        encoding = (resp.headers.get("Content-Encoding") or "identity").strip().lower()
        if self._runtime is not None and encoding != "identity":  # a tenant's: never inflated
            bounded.discard(resp)
            raise errors.TooLarge(f"{what}: a compressed answer ({encoding[:20]}) is refused")
        yield from stream.events(resp, max_event_bytes=max_event_bytes, what=what, stop=stop)

    # -- typed calls -----------------------------------------------------------------------

    def get(
        self, res: Resource, namespace: str | None, name: str, *, timeout: float | None = None
    ) -> dict[str, Any]:
        """The object; ``errors.NotFound`` when it does not exist."""
        return self.request(
            "GET", res.path(namespace, name), timeout=timeout, what=f"get {res.plural}"
        )

    def get_or_none(
        self, res: Resource, namespace: str | None, name: str, *, timeout: float | None = None
    ) -> dict[str, Any] | None:
        try:
            return self.get(res, namespace, name, timeout=timeout)
        except errors.NotFound:
            return None

    def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        metadata_only: bool = False,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """One page of a list (``namespace`` None: across all namespaces), as served:
        ``items`` and ``metadata.continue``/``resourceVersion``. ``metadata_only`` asks for a
        ``PartialObjectMetadataList`` (items carry only their ``metadata``)."""
        query = list_query(
            label_selector=label_selector,
            field_selector=field_selector,
            limit=limit,
            continue_token=continue_token,
        )
        return self.request(
            "GET",
            res.path(namespace),
            query=query,
            timeout=timeout,
            accept=METADATA_LIST if metadata_only else JSON,
            what=f"list {res.plural}",
        )

    def list_items(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
        metadata_only: bool = False,
        timeout: float | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Every item of a list, page by page (one page in memory at a time)."""
        token = ""
        while True:
            page = self.list(
                res,
                namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                limit=page_size,
                continue_token=token,
                metadata_only=metadata_only,
                timeout=timeout,
            )
            yield from page.get("items") or []
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                return

    def create(
        self,
        res: Resource,
        namespace: str | None,
        body: Mapping[str, Any],
        *,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """The created object; ``errors.Conflict`` when it exists already."""
        return self.request(
            "POST", res.path(namespace), body=body, timeout=timeout, what=f"create {res.plural}"
        )

    def replace(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        body: Mapping[str, Any],
        *,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """The replaced object; ``errors.Conflict`` when the body's resourceVersion is stale."""
        return self.request(
            "PUT",
            res.path(namespace, name),
            body=body,
            timeout=timeout,
            what=f"replace {res.plural}",
        )

    def patch(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        patch: Mapping[str, Any],
        *,
        subresource: str | None = None,
        strategic: bool = False,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """A JSON merge patch (``strategic``: a strategic merge patch, built-in types only);
        ``None`` values remove keys."""
        return self.request(
            "PATCH",
            res.path(namespace, name, subresource),
            body=patch,
            content_type=STRATEGIC_PATCH if strategic else MERGE_PATCH,
            timeout=timeout,
            what=f"patch {res.plural}",
        )

    def apply(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        body: Mapping[str, Any],
        *,
        field_manager: str,
        force: bool = True,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Server-side apply of ``body`` (the whole intent of ``field_manager``); ``force``
        takes over fields another manager set (an operator's ``kubectl edit``)."""
        query = [("fieldManager", field_manager)] + ([("force", "true")] if force else [])
        return self.request(
            "PATCH",
            res.path(namespace, name),
            query=query,
            body=body,
            content_type=APPLY_PATCH,
            timeout=timeout,
            what=f"apply {res.plural}",
        )

    def delete(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        *,
        preconditions: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Delete; with ``preconditions`` (``resourceVersion``, ``uid``) only if unchanged
        (else ``errors.Conflict``)."""
        body = None
        if preconditions:
            body = {
                "apiVersion": "v1",
                "kind": "DeleteOptions",
                "preconditions": dict(preconditions),
            }
        return self.request(
            "DELETE",
            res.path(namespace, name),
            body=body,
            timeout=timeout,
            what=f"delete {res.plural}",
        )

    def delete_collection(
        self,
        res: Resource,
        namespace: str | None,
        *,
        label_selector: str,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Delete every object the selector matches; the API's answer (a list)."""
        return self.request(
            "DELETE",
            res.path(namespace),
            query=list_query(label_selector=label_selector),
            timeout=timeout,
            what=f"delete collection {res.plural}",
        )
