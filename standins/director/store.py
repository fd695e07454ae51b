"""The stand-in Director's state: runtimes per tenant, one-time tokens, OAuth access
tokens, injected faults and a log of the requests it saw. In memory, thread-safe.

Errors carry the Director's own error types (``apperrors`` codes) so that a client sees
what the real Director would answer.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import re
import secrets
import threading
import time
import uuid
from typing import Any

# components/director/pkg/apperrors/consts.go
ERROR_CODES = {
    "InternalError": 10,
    "NotFound": 20,
    "NotUnique": 21,
    "InvalidData": 22,
    "InsufficientScopes": 23,
    "TenantRequired": 24,
    "TenantNotFound": 25,
    "Unauthorized": 26,
    "InvalidOperation": 27,
    "OperationTimeout": 28,
}

NAME_RE = re.compile(r"^[a-z][a-z0-9.-]{0,35}$")
LABEL_KEY_RE = re.compile(r"^[A-Za-z0-9_]{1,256}$")
FILTER_QUERY_RE = re.compile(r'^\$\[\*\] \? \(@ == "(.*)"\)$')


class DirectorError(Exception):
    """An application error of the Director (becomes a GraphQL error)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.code = ERROR_CODES[kind]


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def iso(ts: datetime.datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclasses.dataclass
class Runtime:
    id: str
    tenant: str
    name: str
    description: str | None
    labels: dict[str, Any]
    condition: str
    condition_time: datetime.datetime
    created: datetime.datetime


@dataclasses.dataclass
class OneTimeToken:
    token: str
    runtime_id: str
    tenant: str
    created: datetime.datetime
    expires: datetime.datetime
    used: bool = False
    used_at: datetime.datetime | None = None


@dataclasses.dataclass
class Faults:
    """What the stand-in does wrong, on demand. ``remaining`` None: until cleared."""

    latency: float = 0.0  # seconds added to every GraphQL request
    http_status: int | None = None  # answer GraphQL requests with this status (e.g. 503)
    hang: float = 0.0  # sleep this long before answering (client timeouts)
    graphql_error: str | None = None  # an ERROR_CODES key, answered as a GraphQL error
    # the GraphQL error's message (default "injected <kind>"); "{bearer}" is replaced by the
    # request's bearer token, as a careless server might echo a credential
    message: str | None = None
    operations: tuple[str, ...] = ()  # limit the fault to these operations (empty: all)
    remaining: int | None = None

    def active_for(self, operation: str) -> bool:
        if self.remaining is not None and self.remaining <= 0:
            return False
        return not self.operations or operation in self.operations


@dataclasses.dataclass(frozen=True)
class RequestRecord:
    at: float  # time.monotonic()
    operation: str
    tenant: str | None
    outcome: str  # "ok", "http:<status>", "error:<kind>", "unauthorized"


class Store:
    def __init__(
        self,
        *,
        client_id: str = "tether",
        client_secret: str | None = None,
        access_token_ttl: int = 300,
        one_time_token_ttl: int = 600,
        connector_url: str = "https://connector.example.com/graphql",
    ) -> None:
        self.client_id = client_id
        self.client_secret = client_secret or secrets.token_urlsafe(24)
        self.access_token_ttl = access_token_ttl
        self.one_time_token_ttl = one_time_token_ttl
        self.connector_url = connector_url
        self.faults = Faults()
        self._lock = threading.Lock()
        self._runtimes: dict[str, Runtime] = {}
        self._tokens: dict[str, OneTimeToken] = {}
        self._access: dict[str, float] = {}
        self.requests: list[RequestRecord] = []

    # -- OAuth ----------------------------------------------------------------------------

    def issue_access_token(self, client_id: str, client_secret: str) -> str | None:
        if not (
            secrets.compare_digest(client_id, self.client_id)
            and secrets.compare_digest(client_secret, self.client_secret)
        ):
            return None
        token = secrets.token_urlsafe(32)
        with self._lock:
            self._access[token] = time.monotonic() + self.access_token_ttl
        return token

    def access_token_valid(self, token: str) -> bool:
        with self._lock:
            exp = self._access.get(token)
        return exp is not None and time.monotonic() < exp

    def expire_access_tokens(self) -> None:
        """Make every issued access token invalid (tests of renewal)."""
        with self._lock:
            self._access.clear()

    # -- faults and the request log ---------------------------------------------------------

    def set_faults(self, faults: Faults) -> None:
        with self._lock:
            self.faults = faults

    def take_fault(self, operation: str) -> Faults | None:
        with self._lock:
            f = self.faults
            if not f.active_for(operation):
                return None
            if f.remaining is not None:
                f.remaining -= 1
            return dataclasses.replace(f)

    def record(self, operation: str, tenant: str | None, outcome: str) -> None:
        with self._lock:
            self.requests.append(RequestRecord(time.monotonic(), operation, tenant, outcome))

    def request_count(self, operation: str | None = None, since: float = 0.0) -> int:
        with self._lock:
            return sum(
                1
                for r in self.requests
                if r.at >= since and (operation is None or r.operation == operation)
            )

    # -- runtimes -------------------------------------------------------------------------

    def register(self, tenant: str, data: dict[str, Any]) -> Runtime:
        name = data.get("name") or ""
        if not NAME_RE.match(name):
            raise DirectorError(
                "InvalidData",
                "Invalid data RuntimeRegisterInput [name=must be "
                "up to 36 lower case letters, digits, '-' or '.', not starting with a digit]",
            )
        labels = dict(data.get("labels") or {})
        for key in labels:
            if not LABEL_KEY_RE.match(str(key)):
                raise DirectorError(
                    "InvalidData",
                    f"Invalid data RuntimeRegisterInput [labels={key}: "
                    "key must be alphanumeric with underscore]",
                )
        now = _now()
        rt = Runtime(
            id=str(uuid.uuid4()),
            tenant=tenant,
            name=name,
            description=data.get("description"),
            labels=labels,
            condition=data.get("statusCondition") or "INITIAL",
            condition_time=now,
            created=now,
        )
        with self._lock:
            self._runtimes[rt.id] = rt
        return rt

    def get(self, tenant: str, runtime_id: str) -> Runtime | None:
        with self._lock:
            rt = self._runtimes.get(runtime_id)
        return rt if rt is not None and rt.tenant == tenant else None

    def unregister(self, tenant: str, runtime_id: str) -> Runtime:
        with self._lock:
            rt = self._runtimes.get(runtime_id)
            if rt is None or rt.tenant != tenant:
                raise DirectorError("NotFound", "Object not found [object=runtime]")
            del self._runtimes[runtime_id]
            for t in [t for t, v in self._tokens.items() if v.runtime_id == runtime_id]:
                del self._tokens[t]
        return rt

    def find(
        self, tenant: str, filters: list[dict[str, Any]] | None, first: int, after: str | None
    ) -> tuple[list[Runtime], int, str, bool]:
        if first < 1 or first > 200:
            raise DirectorError("InvalidData", "first must be between 1 and 200")
        offset = 0
        if after:
            try:
                offset = int(base64.b64decode(after).decode())
            except ValueError:
                raise DirectorError("InvalidData", "invalid cursor") from None
        matchers = [_matcher(f) for f in filters or []]
        with self._lock:
            found = [
                r
                for r in self._runtimes.values()
                if r.tenant == tenant and all(m(r.labels) for m in matchers)
            ]
        found.sort(key=lambda r: (r.created, r.id))
        page = found[offset : offset + first]
        end = offset + len(page)
        return page, len(found), base64.b64encode(str(end).encode()).decode(), end < len(found)

    def all_runtimes(self) -> list[Runtime]:
        with self._lock:
            return list(self._runtimes.values())

    def set_label(self, tenant: str, runtime_id: str, key: str, value: Any) -> None:
        if not LABEL_KEY_RE.match(key):
            raise DirectorError(
                "InvalidData", f"Invalid data [key={key}: must be alphanumeric with underscore]"
            )
        with self._lock:
            rt = self._runtimes.get(runtime_id)
            if rt is None or rt.tenant != tenant:
                raise DirectorError("NotFound", "Object not found [object=runtime]")
            rt.labels[key] = value

    def seed_provisioned(
        self,
        tenant: str,
        shoot: str,
        *,
        name: str | None = None,
        subaccount: str = "",
        instance: str = "",
        managed_by: str = "",
        condition: str = "CONNECTED",
    ) -> Runtime:
        """A runtime as the Provisioner registered it (KEB's name and labels, the shoot's
        ``gardenerClusterName`` and ``gardenerClusterDomain``), or with ``managed_by``
        ("compass-manager") as compass-manager does (``<shoot>-<random>``)."""
        labels: dict[str, Any] = {
            "gardenerClusterName": shoot,
            "gardenerClusterDomain": f"{shoot}.kyma.example.com",
        }
        if subaccount:
            labels["global_subaccount_id"] = subaccount
        if instance:
            labels["broker_instance_id"] = instance
        if managed_by:
            labels["director_connection_managed_by"] = managed_by
        rt = self.register(
            tenant,
            {
                "name": name or f"{shoot}-{secrets.token_hex(3)}",
                "description": "registered by the Provisioner",
                "labels": labels,
                "statusCondition": condition,
            },
        )
        return rt

    def token_for_seed(
        self, tenant: str, runtime_id: str, *, used: bool = False, age: float = 0.0
    ) -> OneTimeToken:
        """A one-time token as the Provisioner had issued it ``age`` seconds ago; ``used``:
        the agent exchanged it already."""
        ott = self.request_token(tenant, runtime_id)
        with self._lock:
            back = datetime.timedelta(seconds=age)
            ott.created, ott.expires = ott.created - back, ott.expires - back
            ott.used = used
        return ott

    def set_condition(self, runtime_id: str, condition: str) -> None:
        with self._lock:
            rt = self._runtimes[runtime_id]
            rt.condition, rt.condition_time = condition, _now()

    # -- one-time tokens ----------------------------------------------------------------------

    def request_token(self, tenant: str, runtime_id: str) -> OneTimeToken:
        if self.get(tenant, runtime_id) is None:
            raise DirectorError("NotFound", "Object not found [object=runtime]")
        now = _now()
        ott = OneTimeToken(
            token=secrets.token_urlsafe(32),
            runtime_id=runtime_id,
            tenant=tenant,
            created=now,
            expires=now + datetime.timedelta(seconds=self.one_time_token_ttl),
        )
        with self._lock:
            self._tokens[ott.token] = ott
        return ott

    def token_state(self, token: str) -> str:
        """'valid', 'used', 'expired' or 'unknown' (for tests; never logged)."""
        with self._lock:
            ott = self._tokens.get(token)
        if ott is None:
            return "unknown"
        if ott.used:
            return "used"
        return "expired" if _now() >= ott.expires else "valid"

    def connect(self, token: str) -> Runtime | None:
        """What the Connector does when a runtime agent presents its one-time token: the
        token is used up and the runtime becomes CONNECTED. None if it is not valid."""
        with self._lock:
            ott = self._tokens.get(token)
            if ott is None or ott.used or _now() >= ott.expires:
                return None
            ott.used, ott.used_at = True, _now()
            rt = self._runtimes.get(ott.runtime_id)
            if rt is None:
                return None
            rt.condition, rt.condition_time = "CONNECTED", _now()
            return rt


def _matcher(f: dict[str, Any]) -> Any:
    key = str(f.get("key"))
    query = f.get("query")
    if query is None:
        return lambda labels: key in labels
    m = FILTER_QUERY_RE.match(query)
    if m is None:
        raise DirectorError(
            "InvalidData", 'unsupported label filter query; use $[*] ? (@ == "value")'
        )
    wanted = m.group(1)

    def match(labels: dict[str, Any]) -> bool:
        v = labels.get(key)
        return v == wanted or (isinstance(v, list) and wanted in v)

    return match
