"""The enroller's decisions with plain data (enroller.decide): dispatch with a
per-runtime deadline, backoff, certificate issuance, the CA rollover's end and quarantine;
per runtime: enroll, wait or remove, which certificates are renewed, whether and why the
bundle is applied, removal, and which KCP owns a runtime (sharding)."""

from __future__ import annotations

import base64
import datetime
import itertools
from typing import Any

import pytest

from enroller import decide
from enroller import settings as settings_mod
from tether.base import config

T0 = datetime.datetime(2026, 11, 30, 12, 0, tzinfo=datetime.UTC)
MIN = datetime.timedelta(minutes=1)


def dispatch(**kw: Any) -> decide.DispatchKind:
    facts: dict[str, Any] = dict(
        running="no", in_flight=0, concurrency=2, workers_busy=0, workers=8, waited=False
    )
    facts.update(kw)
    return decide.dispatch(**facts)


def test_dispatch_starts_work_within_the_runs_concurrency() -> None:
    assert dispatch() == "dispatch"
    assert dispatch(in_flight=1) == "dispatch"
    assert dispatch(in_flight=2) == "wait"


def test_a_straggler_still_running_is_never_started_again() -> None:
    assert dispatch(running="overdue") == "busy"
    assert dispatch(running="overdue", in_flight=2) == "busy"  # not even a slot is taken


def test_work_another_run_started_in_time_is_joined_not_doubled() -> None:
    assert dispatch(running="in_time") == "join"
    assert dispatch(running="in_time", in_flight=2) == "wait"


def test_with_every_worker_held_the_run_waits_once_then_gives_up() -> None:
    assert dispatch(workers_busy=8) == "wait"
    assert (
        dispatch(workers_busy=8, in_flight=1, waited=True) == "wait"
    )  # its own work will free one
    assert dispatch(workers_busy=8, waited=True) == "no_worker"
    assert dispatch(workers_busy=7, waited=True) == "dispatch"


def test_backoff_doubles_to_its_cap() -> None:
    assert [decide.backoff(n, 10, 600) for n in range(0, 9)] == [
        0,
        10,
        20,
        40,
        80,
        160,
        320,
        600,
        600,
    ]
    assert decide.backoff(10_000, 10, 600) == 600  # no overflow


def cert(
    due: str | None = "expiring", pending: bool = False, recent: int = 0, limit: int = 6
) -> str:
    return decide.certificate(decide.CertificateFacts(due, pending, recent, limit))


def test_a_certificate_is_issued_only_when_due_and_none_waits_to_be_applied() -> None:
    assert cert(due=None) == "keep"
    assert cert(due=None, recent=100) == "keep"
    assert cert() == "issue"
    assert cert(pending=True) == "reuse"
    assert cert(pending=True, recent=100) == "reuse"  # reuse is never limited


def test_issuance_stops_at_the_hourly_limit() -> None:
    assert cert(recent=5) == "issue"
    assert cert(recent=6) == "rate_limited"


def test_recent_issuances_are_those_of_the_last_hour() -> None:
    times = [T0 - 61 * MIN, T0 - 59 * MIN, T0 - MIN, T0]
    assert decide.recent(times, T0) == (T0 - 59 * MIN, T0 - MIN, T0)
    assert decide.recent([T0 + MIN], T0) == ()  # a clock that went back forgets the future
    assert decide.next_issuance(times[1:], T0, 6) == T0
    assert decide.next_issuance(times[1:], T0, 3) == T0 + MIN  # when the oldest leaves the window
    assert decide.next_issuance(times[1:], T0, 2) == T0 + 59 * MIN


def roll(**kw: Any) -> decide.Rollover:
    facts: dict[str, Any] = dict(
        current="new",
        previous="old",
        started=T0,
        now=T0 + 10 * MIN,
        propagation=3 * MIN,
        deadline=60 * MIN,
        held={},
        failing=frozenset(),
    )
    facts.update(kw)
    return decide.rollover(decide.RolloverFacts(**facts))


def test_no_rollover_nothing_to_decide() -> None:
    assert roll(previous=None, started=None).kind == "none"


def test_never_before_the_propagation_time() -> None:
    assert roll(now=T0 + 2 * MIN).kind == "wait"
    assert (
        roll(now=T0 + 2 * MIN, deadline=MIN).kind == "wait"
    )  # a deadline shorter than it waits too
    assert roll(now=T0 + 3 * MIN, deadline=MIN) == decide.Rollover("finish", "complete")
    assert roll(started=None).kind == "wait"


def test_every_runtime_renewed_ends_it_early() -> None:
    assert roll(held={"a": "new", "b": "new", "c": "", "d": None}) == decide.Rollover(
        "finish", "complete"
    )


def test_a_runtime_on_the_old_ca_or_a_failing_one_holds_it_until_the_deadline() -> None:
    assert roll(held={"a": "new", "b": "old"}).kind == "wait"
    assert roll(held={"a": "new", "b": None}, failing=frozenset({"b"})).kind == "wait"
    assert roll(held={"a": "new", "b": "old"}, now=T0 + 59 * MIN).kind == "wait"


def test_at_the_deadline_it_ends_whatever_and_names_who_is_quarantined() -> None:
    r = roll(
        held={"a": "new", "c": "old", "b": "old", "d": None},
        failing=frozenset({"b", "d"}),
        now=T0 + 60 * MIN,
    )
    assert r == decide.Rollover("finish", "deadline", ("b", "c"))  # unknown (d) is not named
    assert roll(failing=frozenset({"x"}), now=T0 + 61 * MIN) == decide.Rollover(
        "finish", "deadline", ()
    )


@pytest.mark.parametrize(
    ("held", "previous", "expected"),
    [
        ("new", None, False),
        ("new", "old", False),
        ("old", "old", False),  # trusted
        ("old", None, True),
        ("foreign", None, True),
        ("older", "old", True),  # not any more
        (None, None, False),
        ("", None, False),  # unknown, or none held
    ],
)
def test_quarantine_is_derived_from_the_issuer_of_the_certificate_held(
    held: str | None, previous: str | None, expected: bool
) -> None:
    assert decide.quarantined(held, "new", previous) is expected


# -- one runtime: enroll, wait or remove ----------------------------------------------------------


def test_a_kyma_cr_being_deleted_is_removed_even_while_backing_off() -> None:
    assert decide.step(deleting=True, backing_off=True) == "remove"
    assert decide.step(deleting=True, backing_off=False) == "remove"
    assert decide.step(deleting=False, backing_off=True) == "wait"
    assert decide.step(deleting=False, backing_off=False) == "enroll"


def plan(**kw: Any) -> decide.Plan:
    """A runtime enrolled before, in its steady state, with ``kw`` changed."""
    facts: dict[str, Any] = dict(
        deleting=False, finalizer=True, backing_off=False, failed_before=False
    )
    facts.update(kw)
    return decide.plan(decide.RuntimeFacts(**facts))


UNREADABLE = ("WatchesUnreadable", "no Watch readable")


def test_a_runtime_is_enrolled_unless_something_says_otherwise() -> None:
    assert plan() == decide.Plan("enroll")
    assert plan(finalizer=False) == decide.Plan("enroll")  # the first write puts it on


def test_a_kyma_cr_being_deleted_is_removed_only_where_the_enroller_wrote() -> None:
    assert plan(deleting=True) == decide.Plan("remove")
    assert plan(deleting=True, backing_off=True, failed_before=True) == decide.Plan("remove")
    assert plan(deleting=True, unreadable=UNREADABLE) == decide.Plan("remove")
    # no finalizer: nothing was ever written into its runtime, only its status goes
    assert plan(deleting=True, finalizer=False) == decide.Plan("forget")


def test_a_runtime_backing_off_waits_with_its_last_failure_kept_in_its_status() -> None:
    assert plan(backing_off=True, failed_before=True) == decide.Plan("wait", status=True)
    assert plan(backing_off=True) == decide.Plan("wait", status=False)  # nothing to write
    assert plan(backing_off=True, unreadable=UNREADABLE).kind == "wait"  # not asked anyway


def test_with_the_runs_watches_unreadable_the_runtime_fails_untouched() -> None:
    assert plan(unreadable=UNREADABLE) == decide.Plan("fail", failure=UNREADABLE)
    assert plan(unreadable=UNREADABLE, finalizer=False) == decide.Plan("fail", failure=UNREADABLE)


# -- renewal ---------------------------------------------------------------------------------------


def renewal(**kw: Any) -> decide.Renewal:
    """A runtime in the steady state (nothing due), with ``kw`` changed."""
    facts: dict[str, Any] = dict(
        now=T0,
        current="new",
        previous=None,
        settled=True,
        client_due=None,
        client_previous_ok=False,
        client_key_matches=True,
        serving_ca="new",
        serving_renew_at=T0 + 60 * MIN,
    )
    facts.update(kw)
    return decide.renewal(decide.CertFacts(**facts))


def test_nothing_is_renewed_in_the_steady_state() -> None:
    assert renewal() == decide.Renewal(None, None)


@pytest.mark.parametrize(
    "due", ["missing", "unreadable", "foreign_issuer", "subject_changed", "expired", "expiring"]
)
def test_a_due_client_certificate_is_renewed_for_its_reason(due: str) -> None:
    assert renewal(client_due=due) == decide.Renewal(due, None)


def test_a_client_secret_whose_key_is_not_the_certificates_is_reissued() -> None:
    assert renewal(client_key_matches=False) == decide.Renewal("key_mismatch", None)
    assert (
        renewal(client_key_matches=False, client_due="expired").client == "expired"
    )  # the first reason


def test_the_serving_certificate_is_renewed_at_its_time_or_when_its_ca_is_not_current() -> None:
    assert renewal(serving_renew_at=T0).serving == "expiring"  # at its renewal time
    assert renewal(serving_renew_at=T0 + MIN).serving is None
    assert renewal(serving_renew_at=None).serving == "expiring"  # unknown: renewed
    assert renewal(serving_ca="").serving == "missing"
    assert renewal(serving_ca="other").serving == "ca_changed"


def test_during_the_propagation_time_the_previous_cas_certificates_stay() -> None:
    rolling = dict(previous="old", settled=False)
    assert renewal(
        **rolling, client_due="foreign_issuer", client_previous_ok=True, serving_ca="old"
    ) == decide.Renewal(None, None)
    # not a good certificate of the previous CA either (another CA, or expiring): renewed
    assert (
        renewal(**rolling, client_due="foreign_issuer", client_previous_ok=False).client
        == "foreign_issuer"
    )
    assert renewal(**rolling, client_due="expiring", client_previous_ok=True).client == "expiring"
    assert renewal(**rolling, serving_ca="older").serving == "ca_changed"


def test_once_the_new_ca_is_trusted_everywhere_the_previous_cas_certificates_are_reissued() -> None:
    settled = dict(previous="old", settled=True)
    assert renewal(
        **settled, client_due="foreign_issuer", client_previous_ok=True, serving_ca="old"
    ) == decide.Renewal("foreign_issuer", "ca_changed")


# -- apply -----------------------------------------------------------------------------------------


def apply(**kw: Any) -> decide.Apply:
    """A runtime enrolled before and in its steady state, with ``kw`` changed."""
    facts: dict[str, Any] = dict(
        client_secret=True,
        webhook_config=True,
        applied_before=True,
        renewed=False,
        serving_renewed=False,
        installed_current=True,
        resync_due=False,
        webhook_serving=True,
    )
    facts.update(kw)
    return decide.apply(decide.ApplyFacts(**facts))


def test_the_steady_state_writes_nothing_and_reads_nothing_more() -> None:
    assert apply() == decide.Apply(None, read_serving=False, check_webhook=False)


def test_a_webhook_not_serving_yet_is_looked_at_without_an_apply() -> None:
    assert apply(webhook_serving=False) == decide.Apply(
        None, read_serving=False, check_webhook=True
    )
    assert apply(webhook_serving=None) == decide.Apply(None, read_serving=False, check_webhook=True)


@pytest.mark.parametrize(
    ("facts", "cause"),
    [
        (dict(client_secret=False, webhook_config=False, applied_before=False), "installed"),
        (
            dict(client_secret=False, webhook_config=False, applied_before=True),
            "repaired",
        ),  # deleted since
        (dict(client_secret=False, renewed=True), "repaired"),
        (dict(webhook_config=False, installed_current=False), "repaired"),
        (dict(renewed=True, installed_current=False, resync_due=True), "renewed"),
        (dict(installed_current=False, resync_due=True), "updated"),
        (
            dict(installed_current=False, watches_current=False),
            "updated",
        ),  # the whole bundle covers them
        (dict(renewed=True, watches_current=False), "renewed"),
        (dict(resync_due=True), "resync"),
    ],
)
def test_the_apply_cause_is_the_first_that_holds(facts: dict[str, Any], cause: str) -> None:
    verdict = apply(**facts)
    assert verdict.cause == cause
    assert verdict.check_webhook  # every apply looks at the webhook after
    assert verdict.read_serving  # the serving certificate is kept: its pair is read for the apply


def test_only_the_watches_changed_applies_them_without_reading_the_serving_certificate() -> None:
    assert apply(watches_current=False) == decide.Apply(
        "watches", read_serving=False, check_webhook=True
    )
    assert apply(watches_current=False, resync_due=True).cause == "watches"  # the resync comes next


def test_a_renewed_serving_certificate_needs_no_read_of_its_secret() -> None:
    assert apply(renewed=True, serving_renewed=True) == decide.Apply(
        "renewed", read_serving=False, check_webhook=True
    )


def test_a_pass_that_writes_nothing_finds_tether_in_the_runtime() -> None:
    """The installer puts the finalizer on before every apply it reaches: either it writes,
    or the runtime holds both objects (its deletion must then remove them)."""
    for bits in itertools.product((False, True), repeat=8):
        facts = decide.ApplyFacts(*bits[:7], webhook_serving=True, watches_current=bits[7])
        if decide.apply(facts).cause is None:
            assert facts.client_secret and facts.webhook_config, facts


def test_the_installed_state_is_current_only_as_rendered_now_with_its_key() -> None:
    def current(**kw: Any) -> bool:
        facts: dict[str, Any] = dict(want="d1", webhook="d1", secret="d1", digest_key=True)
        facts.update(kw)
        return decide.installed_current(**facts)

    assert current()
    assert not current(webhook="d0")  # an edited webhook configuration, or an older bundle
    assert not current(secret="d0")
    assert not current(webhook=None, secret=None)  # not annotated: not ours, or by hand
    assert not current(want="d2")  # a new image, bundle or certificate serial
    assert not current(digest_key=False)  # a Secret written without its digest key


def test_a_full_apply_without_watches_deletes_the_watch_list_installed_before() -> None:
    assert apply(watch_list_stale=True).delete_watch_list is False  # nothing is written
    assert apply(watch_list_stale=True, resync_due=True).delete_watch_list
    assert apply(watch_list_stale=True, renewed=True).delete_watch_list
    assert apply(resync_due=True).delete_watch_list is False  # none installed, or Watches now
    # only the Watches' digest differs: their objects are applied, the list not deleted
    assert apply(watch_list_stale=True, watches_current=False) == decide.Apply(
        "watches", read_serving=False, check_webhook=True
    )


def test_a_kept_serving_certificate_whose_secret_lost_its_pair_is_replaced() -> None:
    assert decide.kept_serving(True) is None
    assert decide.kept_serving(False) == "missing"


# -- which Kyma CRs (KYMA_SELECTOR) ---------------------------------------------------------------


def test_the_kyma_selector_picks_the_pilot_and_keeps_what_was_installed() -> None:
    option = settings_mod.SPEC.option("TETHER_ENROLLER_KYMA_SELECTOR")
    parsed = option.read({"TETHER_ENROLLER_KYMA_SELECTOR": "tether-pilot=wave-0"})
    assert decide.selected(parsed, {"tether-pilot": "wave-0", "x": "y"}, False)
    assert not decide.selected(parsed, {"tether-pilot": "wave-1"}, False)
    assert not decide.selected(parsed, {}, False)
    assert decide.selected(parsed, {}, True)  # installed into before: still the enroller's
    assert decide.selected((), {}, False)  # the default: every Kyma CR
    with pytest.raises(config.SettingError, match="TETHER_ENROLLER_KYMA_SELECTOR"):
        option.read({"TETHER_ENROLLER_KYMA_SELECTOR": "a in (b"})


# -- removal ---------------------------------------------------------------------------------------


def removal(**kw: Any) -> decide.Removal:
    facts: dict[str, Any] = dict(
        finalizer=True, attempted=True, problem=None, waited=MIN, timeout=5 * MIN
    )
    facts.update(kw)
    return decide.removal(decide.RemovalFacts(**facts))


def test_without_the_finalizer_only_the_enrollment_goes() -> None:
    assert removal(finalizer=False, attempted=False).kind == "forget"
    assert removal(finalizer=False, problem="unreachable", waited=10 * MIN).kind == "forget"


def test_removal_deletes_the_objects_then_releases_the_finalizer() -> None:
    assert removal(attempted=False).kind == "delete"
    assert removal() == decide.Removal("release", "removed")


def test_an_unreachable_runtime_is_retried_until_the_removal_timeout() -> None:
    assert removal(problem="unreachable").kind == "retry"
    assert (
        removal(problem="unreachable", waited=5 * MIN - datetime.timedelta(seconds=1)).kind
        == "retry"
    )
    assert removal(problem="unreachable", waited=5 * MIN) == decide.Removal(
        "release", "removal_timed_out"
    )
    assert removal(
        problem="unreachable", timeout=datetime.timedelta(0), waited=datetime.timedelta(0)
    ) == decide.Removal("release", "removal_timed_out")


def test_a_runtime_never_installed_into_is_released_at_once_when_unreachable() -> None:
    """Issue 42: a Kyma CR whose kubeconfig went missing was held for the whole timeout."""
    assert removal(problem="no kubeconfig", installed=False, waited=datetime.timedelta(0)) == (
        decide.Removal("release", "nothing_installed")
    )
    assert removal(installed=False) == decide.Removal("release", "removed")  # reachable: as ever
    assert removal(problem="unreachable", installed=True).kind == "retry"


# -- ownership (sharding across KCPs) --------------------------------------------------------

A, B = "https://listener.kcp-a.example.com", "https://listener.kcp-b.example.com"


@pytest.mark.parametrize(
    ("installed", "take_over_from", "verdict"),
    [
        (None, None, "ours"),  # nothing installed: a first install
        (B, None, "ours"),  # installed by this KCP
        (B + "/", None, "ours"),  # a trailing slash is the same listener
        (
            "HTTPS://Listener.KCP-B.example.com:443",
            None,
            "ours",
        ),  # case of scheme and host, the default port
        (B + ":8443", None, "foreign"),  # another port is another listener
        ("https://listener.kcp-b.example.com:99999", None, "foreign"),  # unparsable: not ours
        (A, None, "foreign"),  # another KCP's: refused, nothing written
        (A, A, "take_over"),  # the move asked for, from exactly that listener
        (A, A + "/", "take_over"),
        (
            A,
            "https://listener.kcp-c.example.com",
            "foreign",
        ),  # a move from another KCP than the owner
        (A, "", "foreign"),
        (B, A, "ours"),  # taken over: the annotation left behind changes nothing
    ],
)
def test_a_runtime_is_written_only_by_the_kcp_it_is_installed_for(
    installed: str | None, take_over_from: str | None, verdict: str
) -> None:
    assert decide.ownership(installed=installed, own=B, take_over_from=take_over_from) == verdict


def test_a_runtime_whose_certificate_this_kcps_ca_issued_stays_ours_when_the_listener_url_changed() -> (  # noqa: E501
    None
):
    """An operator who moves the listener to a new ingress name changes the enroller's URL:
    its runtimes still name the old one, and must be re-rendered, not refused."""
    assert decide.ownership(installed=A, own=B, take_over_from=None, issued_here=True) == "ours"
    assert decide.ownership(installed=A, own=B, take_over_from=None, issued_here=False) == "foreign"


def test_the_installed_listener_is_read_from_the_client_secrets_data() -> None:
    assert decide.installed_listener({"listener-url": base64.b64encode(A.encode()).decode()}) == A
    assert decide.installed_listener({}) is None
    assert decide.installed_listener({"listener-url": ""}) is None
    assert decide.installed_listener({"listener-url": "not base64!"}) is None
    assert (
        decide.installed_listener({"listener-url": base64.b64encode(b"\xff\xfe").decode()}) is None
    )
