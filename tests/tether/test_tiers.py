"""The suite's tiers and its workers' shares (testing/tiers.py, testing/workers.py): plain data."""

from __future__ import annotations

import pathlib

import pytest

from testing import tiers, workers


@pytest.mark.parametrize(
    ("fixtures", "marks", "tier"),
    [
        ((), (), "unit"),
        (("tmp_path", "capsys"), ("parametrize",), "unit"),
        (("planes", "kcp_api"), (), "check"),
        (("planes", "listener"), (), "full"),
        (("part",), (), "full"),
        (("tmp_path",), ("processes",), "full"),
        (("planes",), ("processes",), "full"),
    ],
)
def test_a_tier_follows_from_fixtures_and_marks(
    fixtures: tuple[str, ...], marks: tuple[str, ...], tier: str
) -> None:
    assert tiers.decide(fixtures, marks) == tier


def test_the_guard_fails_a_unit_or_check_test_that_starts_a_process() -> None:
    guard = tiers.Guard()
    guard.check("outside any test")  # collection, the report header: not checked
    for tier in ("unit", "check"):
        guard.current = (f"tests/x.py::t_{tier}", tier)
        with pytest.raises(
            tiers.TierViolation, match=f"tests/x.py::t_{tier} is in tier '{tier}'.*git"
        ):
            guard.check("subprocess ['git', 'log']")
        with guard.allowed():  # the session's planes
            guard.check("subprocess ['etcd']")
    guard.current = ("tests/x.py::t", "full")
    guard.check("subprocess ['gunicorn']")


def test_a_survey_notes_every_start_instead_of_failing(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "survey.tsv"
    guard = tiers.Guard(str(path))
    guard.current = ("tests/x.py::t", "unit")
    guard.check("os.fork")
    assert path.read_text() == "tests/x.py::t\tunit\tos.fork\n"


def test_each_worker_has_its_own_ports_below_the_ephemeral_range(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shares = []
    for n in range(workers.BLOCKS):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{n}")
        assert workers.index() == n
        shares.append(set(workers.slot(10240, 32768)))
    assert all(len(s) == (32768 - 10240) // workers.BLOCKS for s in shares)
    assert not set.intersection(*shares[:2]) and len(set.union(*shares)) == sum(map(len, shares))
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw2")
    got = {workers.port() for _ in range(20)}
    assert len(got) == 20 and got <= shares[2]  # never handed out twice
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    assert workers.index() == 0
