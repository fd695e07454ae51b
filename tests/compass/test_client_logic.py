"""Pure parts of the Director client: error mapping, response parsing, the circuit
breaker, backoff, token renewal time, status building, settings."""

from __future__ import annotations

import datetime
import random

import pytest

from compass import breaker, errors, oauth, queries, status
from compass import settings as settings_mod
from tether.base import config

NOW = datetime.datetime(2026, 11, 30, 12, 0, tzinfo=datetime.UTC)


@pytest.mark.parametrize(
    "code,cls",
    [
        (20, errors.NotFound),
        (22, errors.InvalidInput),
        (21, errors.InvalidInput),
        (26, errors.Unauthorized),
        (23, errors.Unauthorized),
        (10, errors.Unavailable),
        (28, errors.Unavailable),
        (24, errors.InvalidInput),
        (999, errors.InvalidInput),
    ],
)
def test_graphql_error_codes_map_to_types(code: int, cls: type[errors.DirectorError]) -> None:
    doc = {"data": None, "errors": [{"message": "m", "extensions": {"error_code": code}}]}
    with pytest.raises(cls):
        queries.result_of(doc)


def test_validation_error_without_code_is_invalid_input() -> None:
    with pytest.raises(errors.InvalidInput, match="Cannot query field"):
        queries.result_of({"errors": [{"message": "Cannot query field 'x' on type 'Runtime'."}]})


@pytest.mark.parametrize(
    "status_code,cls",
    [
        (401, errors.Unauthorized),
        (403, errors.Unauthorized),
        (429, errors.Unavailable),
        (500, errors.Unavailable),
        (503, errors.Unavailable),
        (400, errors.InvalidInput),
        (404, errors.Unavailable),
    ],
)
def test_http_status_maps_to_types(status_code: int, cls: type[errors.DirectorError]) -> None:
    assert isinstance(errors.from_http_status(status_code, "x"), cls)


def test_unavailable_subtypes_and_bounded_messages() -> None:
    assert issubclass(errors.CircuitOpen, errors.Unavailable)
    assert len(str(errors.InvalidInput("x" * 5000))) <= 300


def test_result_and_runtime_parsing() -> None:
    raw = {"id": "r1", "name": "c-1", "labels": {"a": "b"}, "status": {"condition": "CONNECTED"}}
    rt = queries.runtime_of(queries.result_of({"data": {"result": raw}}))
    assert rt == queries.Runtime("r1", "c-1", {"a": "b"}, "CONNECTED")
    with pytest.raises(errors.Unavailable):
        queries.result_of({"data": {}})
    with pytest.raises(errors.Unavailable):
        queries.runtime_of({"name": "no id"})
    tok = queries.token_of(
        {"token": "secret-value-0123456789", "connectorURL": "https://c", "expiresAt": "t"}
    )
    assert "secret-value" not in repr(tok)


def test_variables_carry_every_argument() -> None:
    evil = 'x") { id } mutation { unregisterRuntime(id: "y'
    body = queries.body("register_runtime", {"in": {"name": evil}})
    assert evil not in body["query"] and body["variables"]["in"]["name"] == evil
    assert queries.label_query('a"b') == '$[*] ? (@ == "a\\"b")'


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_breaker_opens_after_threshold_probes_once_and_closes() -> None:
    clock = Clock()
    seen: list[str] = []
    b = breaker.CircuitBreaker(3, 10.0, 40.0, clock=clock, on_change=seen.append)
    for _ in range(3):
        assert b.allow()
        b.failure()
    assert b.state == "open" and not b.allow()
    clock.t = 10.0
    assert b.state == "half_open"
    assert b.allow() and not b.allow()  # exactly one probe
    b.failure()  # probe failed: open again, twice as long
    clock.t = 29.0
    assert not b.allow()
    clock.t = 30.0
    assert b.allow()
    b.success()
    assert b.state == "closed" and b.allow()
    assert seen == ["open", "half_open", "open", "half_open", "closed"]


def test_breaker_neutral_answers_reset_the_count() -> None:
    b = breaker.CircuitBreaker(3, 10.0, clock=Clock())
    b.failure()
    b.failure()
    b.neutral()
    b.failure()
    b.failure()
    assert b.state == "closed"


def test_backoff_grows_with_jitter_and_is_capped() -> None:
    rng = random.Random(1)
    for n, ceiling in [(1, 5), (2, 10), (3, 20), (10, 300), (100, 300)]:
        for _ in range(20):
            v = status.backoff_delay(n, 5, 300, rng)
            assert ceiling / 2 <= v <= ceiling


def test_token_renewal_before_expiry() -> None:
    assert oauth.renew_at(100.0, 300) == 100.0 + 240
    assert oauth.renew_at(0.0, 10) == 5.0
    assert oauth.renew_at(0.0, 3) == 0.0


def test_status_transitions() -> None:
    st = status.registered({}, NOW, "r1", adopted=False)
    assert (st["registered"], st["configured"], st["state"]) == (True, False, "Processing")
    st = status.configured(
        st, NOW, token_expires_at="2026-11-30T12:10:00Z", secret_digest="d", reason="SecretMissing"
    )
    assert st["state"] == "Ready" and st["secretDigest"] == "d"
    failed = status.failure(
        st,
        NOW,
        ctype=status.CONFIGURED,
        reason="DirectorUnavailable",
        message="x",
        permanent=False,
        delay=7,
    )
    assert failed["failures"] == 1 and failed["nextAttemptAt"] == "2026-11-30T12:00:07Z"
    assert failed["state"] == "Processing"
    conds = {c["type"]: c for c in failed["conditions"]}
    assert conds["Configured"]["reason"] == "DirectorUnavailable"
    assert conds["Registered"]["status"] == "True"
    again = status.failure(
        failed,
        NOW,
        ctype=status.REGISTERED,
        reason="DirectorInvalidInput",
        message="y",
        permanent=True,
        delay=1,
    )
    assert again["failures"] == 2 and again["state"] == "Failed"
    assert status.connected(again, NOW)["state"] == "Ready"


def test_digest_depends_on_every_value() -> None:
    a = status.digest({"TOKEN": "a", "RUNTIME_ID": "r"})
    assert a == status.digest({"RUNTIME_ID": "r", "TOKEN": "a"})
    assert a != status.digest({"TOKEN": "b", "RUNTIME_ID": "r"})


ENV = {
    "TETHER_COMPASS_DIRECTOR_URL": "https://d/graphql",
    "TETHER_COMPASS_OAUTH_TOKEN_URL": "https://d/token",
    "TETHER_COMPASS_OAUTH_CLIENT_ID": "id",
    "TETHER_COMPASS_OAUTH_CLIENT_SECRET": "very-secret-value",
}


def test_settings_from_env_and_clear_errors() -> None:
    s = settings_mod.from_env(ENV)
    assert s.namespace == "kcp-system" and s.interval == 60
    assert s.client_secret == "very-secret-value" and "very-secret-value" not in repr(s)
    with pytest.raises(config.SettingError, match="TETHER_COMPASS_DIRECTOR_URL"):
        settings_mod.from_env({**ENV, "TETHER_COMPASS_DIRECTOR_URL": "http://plain"})
    with pytest.raises(config.SettingError, match="TETHER_COMPASS_RESYNC_CRON"):
        settings_mod.from_env({**ENV, "TETHER_COMPASS_RESYNC_CRON": "every hour"})
    with pytest.raises(config.SettingError, match="TETHER_COMPASS_OAUTH_CLIENT_SECRET"):
        settings_mod.from_env(
            {k: v for k, v in ENV.items() if k != "TETHER_COMPASS_OAUTH_CLIENT_SECRET"}
        )
    with pytest.raises(config.SettingError, match="TETHER_COMPASS_CONCURRENCY"):
        settings_mod.from_env({**ENV, "TETHER_COMPASS_CONCURRENCY": "0"})


def test_sharding_simulation_every_kyma_in_exactly_one_shard_and_balanced() -> None:
    from compass import job

    names = [f"{i:08x}-runtime" for i in range(3000)]
    for count in (1, 3, 7):
        owners = [[i for i in range(count) if job.in_shard(n, i, count)] for n in names]
        assert all(len(o) == 1 for o in owners)
        sizes = [sum(1 for o in owners if o == [i]) for i in range(count)]
        assert min(sizes) > 0.8 * len(names) / count, sizes
    # stable across processes: a fixed value, not Python's salted hash()
    assert [job.in_shard("kyma-1", i, 4) for i in range(4)].count(True) == 1
    assert job.in_shard("kyma-1", 0, 4)  # first 8 bytes of sha256("kyma-1") mod 4 == 0


def test_shard_settings() -> None:
    s = settings_mod.from_env(
        {**ENV, "TETHER_COMPASS_SHARD_COUNT": "3", "TETHER_COMPASS_SHARD_INDEX": "2"}
    )
    assert (s.shard_index, s.shard_count, s.lease_name) == (2, 3, "tether-compass-2")
    with pytest.raises(config.SettingError, match="TETHER_COMPASS_SHARD_INDEX: 3 must be below"):
        settings_mod.from_env(
            {**ENV, "TETHER_COMPASS_SHARD_COUNT": "3", "TETHER_COMPASS_SHARD_INDEX": "3"}
        )


def test_circuit_open_is_not_written_again_once_the_outage_is_reported() -> None:
    from compass import model, reconcile

    def m(reason: str | None) -> model.MappingView:
        conds = [{"type": "Registered", "status": "False", "reason": reason}] if reason else []
        return model.MappingView("ns", "k", {}, {}, (), False, {"conditions": conds})

    assert reconcile._reports_outage(m("DirectorUnavailable"))
    assert reconcile._reports_outage(m("DirectorCircuitOpen"))
    assert not reconcile._reports_outage(m("MissingLabel"))
    assert not reconcile._reports_outage(m(None))
    assert not reconcile._reports_outage(None)
