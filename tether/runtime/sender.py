"""Sending change records to the listener: the client shared by the webhook and the poller.

Pure parts decide (``classify``, ``parse_retry_after``, ``backoff``, ``retry_delay``,
``split_batches``, ``encoded_batches``: each record encoded once, orjson); the routes and
request bodies are ``tether.wire.listenerapi``'s;
``ListenerClient`` does the I/O: HTTPS with the runtime's client certificate (mTLS),
keep-alive through one ``requests.Session``, the certificate files re-read when they change
(Secrets are updated in place).

Outcomes: ``ok`` (2xx, with the listener's per-item results), ``retryable`` (408, 429, 5xx,
connection errors and timeouts; ``retry_after`` from the listener's header) and
``permanent`` (any other 4xx; ``error``/``details`` carry the listener's error, bounded).
Nothing here logs record data.
"""

from __future__ import annotations

import dataclasses
import email.utils
import json
import random
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal, NamedTuple

import orjson
import requests
import requests.adapters

from tether.base import certs, config, logs, numbers, tlsreload, tracing
from tether.wire import changes, listenerapi

Verdict = Literal["ok", "retryable", "permanent"]
RETRYABLE_STATUS = frozenset({408, 421, 429})  # 421: again on a new connection
MAX_RETRY_AFTER = 300.0
DEFAULT_MAX_BATCH_BYTES = 2 * 1024 * 1024  # below the listener's default 3 MiB cap
MAX_BATCH_ITEMS = 500


class Outcome(NamedTuple):
    """The classified result of one call. ``reason`` is a short constant (a metric label):
    ``ok``, ``http-<status>``, ``timeout``, ``connection``, ``tls``, ``bad-response``."""

    verdict: Verdict
    status: int  # 0 when no HTTP response arrived
    reason: str
    retry_after: float | None = None
    error: str = ""
    details: str = ""
    results: tuple[dict[str, Any], ...] = ()
    epoch: int | None = None  # the runtime's current epoch, as the listener answered it


class StatePage(NamedTuple):
    items: list[changes.DigestItem]
    continue_token: str
    epoch: int | None = None  # None: a listener before epochs


class ListenerError(RuntimeError):
    """A call that did not succeed; ``outcome`` says how."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(f"listener call failed: {outcome.reason} {outcome.error}".strip())
        self.outcome = outcome


# -- pure decisions ----------------------------------------------------------------------


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date),
    clamped to [0, MAX_RETRY_AFTER]; None when absent or unparseable."""
    if value is None or not value.strip():
        return None
    raw = value.strip()
    digits = numbers.ascii_int(raw, max_digits=9)  # delta-seconds: ASCII digits only
    if digits is not None:
        seconds = float(digits)
    else:
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if seconds != seconds:  # NaN
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


def _error_of(body: bytes) -> tuple[str, str]:
    try:
        doc = json.loads(body)
    except ValueError:
        return "", logs.bounded(body.decode("utf-8", "replace"), 300)
    if not isinstance(doc, dict):
        return "", logs.bounded(doc, 300)
    details = doc.get("details")
    return logs.bounded(doc.get("error", ""), 100), "" if details is None else logs.bounded(
        json.dumps(details, default=str), 500
    )


def classify(status: int, headers: Mapping[str, str], body: bytes) -> Outcome:
    """Classify an HTTP response of the listener (pure)."""
    if 200 <= status < 300:
        try:
            doc = orjson.loads(body) if body else {}
        except ValueError:
            return Outcome("ok", status, "bad-response")
        results = doc.get("results") if isinstance(doc, dict) else None
        items = (
            tuple(r for r in results if isinstance(r, dict)) if isinstance(results, list) else ()
        )
        return Outcome(
            "ok",
            status,
            "ok",
            results=items,
            epoch=listenerapi.epoch_in(doc.get("epoch") if isinstance(doc, dict) else None),
        )
    error, details = _error_of(body)
    reason = f"http-{status}"
    if status in RETRYABLE_STATUS or status >= 500:
        retry_after = parse_retry_after(headers.get("Retry-After"))
        return Outcome("retryable", status, reason, retry_after, error, details)
    return Outcome("permanent", status, reason, None, error, details)


def transport_failure(exc: BaseException) -> Outcome:
    """Classify an exception raised before any response arrived (always retryable)."""
    if isinstance(exc, requests.exceptions.SSLError):  # the log names the failed check
        check = certs.verify_failure(exc)
        return Outcome(
            "retryable",
            0,
            "tls",
            None,
            f"{type(exc).__name__}: {check}" if check else type(exc).__name__,
            "",
        )
    if isinstance(exc, requests.exceptions.Timeout):
        reason = "timeout"
    else:
        reason = "connection"
    return Outcome("retryable", 0, reason, None, type(exc).__name__, "")


def backoff(
    attempt: int, *, base: float = 0.2, cap: float = 30.0, rand: Callable[[], float] = random.random
) -> float:
    """Exponential backoff with full jitter: uniform in [0, min(cap, base * 2**attempt)]."""
    ceiling = min(cap, base * (2 ** min(max(attempt, 0), 32)))
    return float(ceiling * rand())


def retry_delay(
    outcome: Outcome,
    attempt: int,
    *,
    base: float = 0.2,
    cap: float = 30.0,
    rand: Callable[[], float] = random.random,
) -> float:
    """How long to wait before the next attempt: the listener's ``Retry-After`` when it gave
    one (never less), else the jittered backoff."""
    delay = backoff(attempt, base=base, cap=cap, rand=rand)
    if outcome.retry_after is not None:
        return max(outcome.retry_after, delay)
    return delay


def record_size(record: changes.ChangeRecord) -> int:
    return len(orjson.dumps(record))


class Batch(NamedTuple):
    """Records of one version to POST together, and their body (each record encoded once)."""

    records: list[changes.ChangeRecord]
    body: bytes


def _bounds(sizes: Sequence[int], max_items: int, max_bytes: int) -> list[tuple[int, int]]:
    """(start, end) of each batch: in order, at most ``max_items`` records and about
    ``max_bytes`` of JSON each (a single record larger than ``max_bytes`` travels alone)."""
    out: list[tuple[int, int]] = []
    start, size = 0, 0
    for i, n in enumerate(sizes):
        n += 1
        if i > start and (i - start >= max_items or size + n > max_bytes):
            out.append((start, i))
            start, size = i, 0
        size += n
    if start < len(sizes):
        out.append((start, len(sizes)))
    return out


def split_batches(
    records: Sequence[changes.ChangeRecord],
    *,
    max_items: int = MAX_BATCH_ITEMS,
    max_bytes: int = DEFAULT_MAX_BATCH_BYTES,
) -> list[list[changes.ChangeRecord]]:
    """Group records in order into batches of at most ``max_items`` and about ``max_bytes``
    of JSON (a single record larger than ``max_bytes`` travels alone)."""
    bounds = _bounds([record_size(r) for r in records], max_items, max_bytes)
    return [list(records[a:b]) for a, b in bounds]


def encoded_batches(
    records: Sequence[changes.ChangeRecord],
    *,
    max_items: int = MAX_BATCH_ITEMS,
    max_bytes: int = DEFAULT_MAX_BATCH_BYTES,
) -> list[Batch]:
    """``split_batches`` with each batch's body (records of one version): every record is
    encoded once, measured by its bytes, and joined into its batch's body."""
    parts = listenerapi.encoded(records)
    bounds = _bounds([len(p) for p in parts], max_items, max_bytes)
    return [
        Batch(list(records[a:b]), listenerapi.joined(records[a:b], parts[a:b])) for a, b in bounds
    ]


# -- I/O -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ClientSettings:
    base_url: str  # e.g. https://listener.example.com
    runtime_id: str
    ca_file: str
    cert_file: str
    key_file: str
    connect_timeout: float = 3.0
    read_timeout: float = 10.0
    pool_size: int = 4
    reload_check_seconds: float = 1.0


def client_options(read_timeout: float) -> tuple[config.Option, ...]:
    """The listener client's options, shared by the webhook and the poller (one Secret and
    ConfigMap configure both); ``read_timeout`` is the part's default."""
    return (
        config.https_url(
            "TETHER_LISTENER_URL",
            config.REQUIRED,
            "the listener's base URL (https://HOST[:PORT])",
            flag="--listener-url",
        ),
        config.file(
            "TETHER_LISTENER_CA_FILE",
            config.REQUIRED,
            "CA bundle that signs the listener's serving certificate (PEM)",
            "certificate",
            flag="--listener-ca-file",
        ),
        config.file(
            "TETHER_CLIENT_CERT_FILE",
            config.REQUIRED,
            "this runtime's client certificate (PEM; CN = runtime ID)",
            "certificate",
            flag="--client-cert-file",
        ),
        config.file(
            "TETHER_CLIENT_KEY_FILE",
            config.REQUIRED,
            "the client certificate's private key (PEM)",
            "key",
            flag="--client-key-file",
        ),
        config.seconds(
            "TETHER_LISTENER_CONNECT_TIMEOUT_SECONDS",
            3.0,
            "connect timeout of a request to the listener",
            minimum=0.1,
            maximum=60,
        ),
        config.seconds(
            "TETHER_LISTENER_TIMEOUT_SECONDS",
            read_timeout,
            "read timeout of a request to the listener",
            minimum=0.1,
            maximum=300,
            flag="--listener-timeout",
        ),
        config.seconds(
            "TETHER_CERT_RELOAD_SECONDS",
            5.0,
            "how often the client certificate files are checked for a change (0: every request)",
            minimum=0,
            maximum=3600,
        ),
    )


CLIENT_PAIRS = (("TETHER_CLIENT_CERT_FILE", "TETHER_CLIENT_KEY_FILE"),)
CLIENT_RENAMED = {
    "TETHER_LISTENER_TIMEOUT": "TETHER_LISTENER_TIMEOUT_SECONDS",
    "TETHER_LISTENER_CONNECT_TIMEOUT": "TETHER_LISTENER_CONNECT_TIMEOUT_SECONDS",
}


def client_settings(v: Mapping[str, Any], runtime_id: str, *, pool_size: int = 4) -> ClientSettings:
    """The listener client's settings from the values of ``client_options``."""
    return ClientSettings(
        base_url=v["TETHER_LISTENER_URL"],
        runtime_id=runtime_id,
        ca_file=v["TETHER_LISTENER_CA_FILE"],
        cert_file=v["TETHER_CLIENT_CERT_FILE"],
        key_file=v["TETHER_CLIENT_KEY_FILE"],
        connect_timeout=v["TETHER_LISTENER_CONNECT_TIMEOUT_SECONDS"],
        read_timeout=v["TETHER_LISTENER_TIMEOUT_SECONDS"],
        reload_check_seconds=v["TETHER_CERT_RELOAD_SECONDS"],
        pool_size=pool_size,
    )


class _ContextAdapter(requests.adapters.HTTPAdapter):
    """An adapter whose connections use a prepared ``ssl.SSLContext`` (client cert + CA)."""

    def __init__(self, context: ssl.SSLContext, pool_size: int) -> None:
        self._context = context
        super().__init__(pool_connections=1, pool_maxsize=pool_size, max_retries=0)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        kwargs["ssl_context"] = self._context
        super().init_poolmanager(*args, **kwargs)


FORWARD_SPAN = "tether.forward"


class ListenerClient:
    """Talks to the listener over mTLS. Thread-safe; one per process is enough. Each POST
    of changes is a span of ``tracer`` (``tether.base.tracing``) whose context travels in the
    ``traceparent`` header."""

    def __init__(self, settings: ClientSettings, tracer: tracing.Tracer = tracing.OFF) -> None:
        self.settings = settings
        self.tracer = tracer
        self._base = settings.base_url.rstrip("/")
        self._lock = threading.Lock()
        self._session: requests.Session | None = None
        self._files = tlsreload.Watched(
            (settings.ca_file, settings.cert_file, settings.key_file),
            self._load,
            check_interval=settings.reload_check_seconds,
        )

    def _load(self) -> requests.Session:
        s = self.settings
        ctx = certs.client_context(s.ca_file, s.cert_file, s.key_file)
        session = requests.Session()
        session.verify = s.ca_file
        session.trust_env = False  # no proxies or netrc from the environment
        session.mount("https://", _ContextAdapter(ctx, s.pool_size))
        return session

    def session(self) -> requests.Session:
        """The current session; a new one (new connections) after the files changed.
        Raises ``tlsreload.LoadError`` when the files never loaded."""
        current = self._files.get()
        with self._lock:
            if self._session is not current:
                old, self._session = self._session, current
                if old is not None:
                    old.close()
            return current

    def certs_loaded(self) -> bool:
        return self._files.loaded()

    def _call(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        timeout: tuple[float, float] | None = None,
        extra: Mapping[str, str] | None = None,
    ) -> tuple[Outcome, bytes]:
        try:
            session = self.session()
        except tlsreload.LoadError as e:
            return Outcome("retryable", 0, "tls", None, "client-certificate", str(e)), b""
        headers = {"Accept": "application/json", **(extra or {})}
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            resp = session.request(
                method,
                self._base + path,
                data=body,
                headers=headers,
                timeout=timeout or (self.settings.connect_timeout, self.settings.read_timeout),
                allow_redirects=False,
            )
            content = resp.content
        except requests.exceptions.RequestException as e:
            return transport_failure(e), b""
        return classify(resp.status_code, resp.headers, content), content

    def send(
        self,
        records: Sequence[changes.ChangeRecord],
        timeout: tuple[float, float] | None = None,
        *,
        parent: tracing.TraceParent | None = None,
        links: Sequence[tracing.TraceParent] = (),
        body: bytes | None = None,
    ) -> Outcome:
        """POST one record or a batch (callers split with ``split_batches``, or with
        ``encoded_batches`` and pass its ``body``: the records are then not encoded again),
        as a span that is a child of ``parent`` (the first record's admission; None: a new
        trace, e.g. the poller's) linked to ``links`` (the other records' admissions)."""
        if body is None:
            body = listenerapi.changes_body(records)
        path = listenerapi.changes_path(self.settings.runtime_id)
        span = self.tracer.start(
            FORWARD_SPAN,
            parent=parent,
            links=links,
            kind="client",
            attributes={"tether.records": len(records)} if self.tracer.enabled else None,
        )
        outcome, _ = self._call(
            "POST", path, body, timeout, {tracing.HEADER: span.context.header()}
        )
        span.end(
            {"http.response.status_code": outcome.status, "tether.outcome": outcome.reason},
            error=outcome.verdict != "ok",
        )
        return outcome

    def state_page(
        self,
        limit: int = 500,
        token: str = "",
        report: listenerapi.EpochReport | None = None,
        watch: str = "",
    ) -> StatePage:
        """One page of the runtime's state digest; ``watch``: of that Watch's records."""
        path = listenerapi.state_path(self.settings.runtime_id, limit, token, report, watch)
        outcome, content = self._call("GET", path)
        if outcome.verdict != "ok":
            raise ListenerError(outcome)
        try:
            doc = json.loads(content)
            items = doc["items"]
            token_out = doc.get("continue") or ""
            if not isinstance(items, list) or not isinstance(token_out, str):
                raise TypeError("items/continue")
        except (ValueError, KeyError, TypeError):
            raise ListenerError(
                outcome._replace(verdict="retryable", reason="bad-response")
            ) from None
        return StatePage(items, token_out, listenerapi.epoch_in(doc.get("epoch")))

    def _get_json(self, path: str) -> dict[str, Any]:
        outcome, content = self._call("GET", path)
        if outcome.verdict != "ok":
            raise ListenerError(outcome)
        try:
            doc = json.loads(content)
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            raise ListenerError(outcome._replace(verdict="retryable", reason="bad-response"))
        return doc

    def state_summary(self, identity: str = "") -> dict[str, Any] | None:
        """The runtime's state summary (``tether.wire.statehash.parse_summary`` reads it); None
        when the listener has no such route (404: a listener older than summaries)."""
        try:
            return self._get_json(listenerapi.summary_path(self.settings.runtime_id, identity))
        except ListenerError as e:
            if e.outcome.status == 404:
                return None
            raise

    def watch_summary(self, watch: str, identity: str = "") -> dict[str, Any] | None:
        """A Watch's state summary (``statehash.parse_summary`` reads it); None when the
        listener answers 404 (older than per-Watch summaries, or the Watch not in force: the
        Watch's digest then says which)."""
        path = listenerapi.watch_summary_path(self.settings.runtime_id, watch, identity)
        try:
            return self._get_json(path)
        except ListenerError as e:
            if e.outcome.status == 404:
                return None
            raise

    def state_bucket(self, bucket: int) -> list[changes.DigestItem]:
        """The digest items of one bucket of the runtime's state summary."""
        doc = self._get_json(listenerapi.bucket_path(self.settings.runtime_id, bucket))
        items = doc.get("items")
        if not isinstance(items, list):
            raise ListenerError(Outcome("retryable", 200, "bad-response"))
        return items

    def iter_state(self, limit: int = 500) -> Iterator[changes.DigestItem]:
        """Every item of the runtime's state digest, page by page."""
        token = ""
        while True:
            page = self.state_page(limit, token)
            yield from page.items
            if not page.continue_token:
                return
            token = page.continue_token

    def close(self) -> None:
        with self._lock:
            if self._session is not None:
                self._session.close()
                self._session = None
        self._files.close()
