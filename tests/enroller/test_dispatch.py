"""The enroller's dispatcher with real threads and small deadlines: a run never waits past a
runtime's deadline, a straggler is not started again while it runs, and threads are bounded."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from enroller import dispatch


def quick(value: str) -> Callable[[], str]:
    return lambda: value


def hang(until: threading.Event) -> Callable[[], str]:
    def work() -> str:
        until.wait(30)
        return "late"

    return work


def test_a_hanging_runtime_is_given_up_at_its_deadline_and_the_others_finish() -> None:
    d = dispatch.Dispatcher(8)
    release = threading.Event()
    t0 = time.monotonic()
    out = {
        o.key: o
        for o in d.run(
            [("hang", hang(release)), ("a", quick("Ready")), ("b", quick("Ready"))],
            concurrency=2,
            deadline=0.3,
        )
    }
    took = time.monotonic() - t0
    assert {k: o.kind for k, o in out.items()} == {"hang": "overdue", "a": "done", "b": "done"}
    assert out["a"].value == "Ready"
    assert 0.25 <= took < 1.5
    assert d.stragglers() == 1 and d.busy() == 1
    # the next run does not start it again while it runs, and does not wait for it
    t0 = time.monotonic()
    again = {
        o.key: o.kind
        for o in d.run([("hang", quick("x")), ("a", quick("Ready"))], concurrency=2, deadline=5)
    }
    assert again == {"hang": "busy", "a": "done"} and time.monotonic() - t0 < 1
    release.set()
    for _ in range(50):
        if not d.busy():
            break
        time.sleep(0.02)
    assert d.busy() == 0
    assert {
        o.key: o.kind for o in d.run([("hang", quick("Ready"))], concurrency=2, deadline=5)
    } == {"hang": "done"}


def test_a_run_returns_within_runtimes_over_concurrency_times_the_deadline() -> None:
    d = dispatch.Dispatcher(32)
    release = threading.Event()
    t0 = time.monotonic()
    out = list(d.run([(f"h{i}", hang(release)) for i in range(6)], concurrency=3, deadline=0.2))
    took = time.monotonic() - t0
    release.set()
    assert sorted(o.kind for o in out) == ["overdue"] * 6
    assert took < 6 / 3 * 0.2 + 0.5


def test_threads_held_by_stragglers_are_bounded_and_the_run_gives_up_rather_than_wait() -> None:
    d = dispatch.Dispatcher(2)
    release = threading.Event()
    first = {
        o.key: o.kind
        for o in d.run([("h1", hang(release)), ("h2", hang(release))], concurrency=2, deadline=0.1)
    }
    assert first == {"h1": "overdue", "h2": "overdue"} and d.busy() == 2
    t0 = time.monotonic()
    out = {
        o.key: o.kind
        for o in d.run([("a", quick("Ready")), ("b", quick("Ready"))], concurrency=2, deadline=0.2)
    }
    assert out == {"a": "no_worker", "b": "no_worker"}
    assert time.monotonic() - t0 < 1  # waited one deadline for a worker, not more
    # only the two stragglers hold threads (counted by the dispatcher's thread names, as
    # other tests of the same session may leave threads of their own)
    assert sum(t.name.startswith(d.name + "-") for t in threading.enumerate()) == 2
    release.set()


def test_work_started_by_another_run_is_joined() -> None:
    d = dispatch.Dispatcher(8)
    release = threading.Event()
    results: dict[str, dispatch.Outcome] = {}

    def first_run() -> None:
        for o in d.run([("k", lambda: (release.wait(5), "Ready")[1])], concurrency=1, deadline=5):
            results["first"] = o

    t = threading.Thread(target=first_run)
    t.start()
    time.sleep(0.1)
    threading.Timer(0.2, release.set).start()
    joined = list(d.run([("k", quick("twice"))], concurrency=1, deadline=5))
    t.join(5)
    assert joined == [dispatch.Outcome("k", "done", "Ready")]  # not run twice
    assert results["first"] == dispatch.Outcome("k", "done", "Ready")


def test_an_exception_is_an_error_outcome_not_a_failed_run() -> None:
    def boom() -> str:
        raise RuntimeError("bug")

    out = list(
        dispatch.Dispatcher(2).run([("x", boom), ("y", quick("Ready"))], concurrency=1, deadline=1)
    )
    kinds = {o.key: o.kind for o in out}
    assert kinds == {"x": "error", "y": "done"}
