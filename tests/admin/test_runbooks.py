"""Every refusal reason and fleet problem the admin pages and ``tether status`` can show has
a runbook section in docs/operations.md, under the anchor its link points at (issue 28,
item 6). The reasons are read from the code: the listener's reason sets (``auth.REASONS``,
``httpconn.REASONS``) and every reason its edge hands to a runtime's RuntimeDelivery (found
in the source, so a new reason without a section fails here)."""

from __future__ import annotations

import ast
import datetime
import importlib.metadata
import importlib.util
import os
import pathlib
import re
import typing
from typing import Any

import pytest
import yaml

from admin import fleet, runbooks, status_cli
from admin import settings as settings_mod
from listener.edge import auth, watchcheck
from listener.storage import rules
from testing.docanchors import OPERATIONS, github_anchors
from tether.base import config
from tether.http import httpconn
from tether.wire import delivery

ROOT = pathlib.Path(__file__).resolve().parents[2]
EDGE = ROOT / "listener" / "edge"
LABELS = ("**Means:**", "**Cause:**", "**Do:**", "**Check:**")


def _literal(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def runtime_reasons() -> set[str]:
    """Every reason the listener's edge counts for a runtime: the reason of each
    ``Problem(...)`` it builds and of each ``deliveries.refuse``/``record`` call; a
    ``"quota_" + limit`` expands to the storage rule's limits, the refusals of a verified
    certificate (``steps.refuse``) to ``auth.ATTRIBUTED``."""
    found: set[str] = set()
    for path in EDGE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            owner = f.value if isinstance(f, ast.Attribute) else None
            on_deliveries = isinstance(owner, ast.Attribute) and owner.attr == "deliveries"
            arg = None
            if name == "Problem":
                arg = (
                    node.args[3]
                    if len(node.args) > 3
                    else next((k.value for k in node.keywords if k.arg == "reason"), None)
                )
            elif on_deliveries and name == "refuse":
                arg = node.args[1]
            elif on_deliveries and name == "record" and len(node.args) > 3:
                arg = node.args[3]
            if arg is None:
                continue
            if (text := _literal(arg)) is not None:
                found.add(text)
            elif isinstance(arg, ast.BinOp) and (prefix := _literal(arg.left)) is not None:
                found |= {prefix + limit for limit in typing.get_args(rules.Limit)}
            elif isinstance(arg, ast.Attribute) and arg.attr == "reason":
                continue  # a Problem's own reason, found where the Problem is built
            elif isinstance(arg, ast.Name) and arg.id == "reason" and path.name == "steps.py":
                found |= set(auth.ATTRIBUTED)  # a verified certificate's refusal, on its runtime
            else:
                raise AssertionError(f"{path.name}:{node.lineno}: a reason that is no literal")
    return found


def shown_reasons() -> set[str]:
    # the Watches' refusals are recorded per record (``r.reason``): their set is watchcheck's
    return (
        set(auth.REASONS)
        | set(httpconn.REASONS)
        | set(watchcheck.REASONS)
        | runtime_reasons()
        | {runbooks.OTHER}
    )


def test_the_scan_finds_the_listeners_runtime_reasons() -> None:
    found = runtime_reasons()
    assert {
        "invalid_json",
        "body_timeout",
        "schema",
        "media_type",
        "too_large",
        "rate",
        "in_flight",
        "kcp_unavailable",
        "kcp_rejected",
        "quota_records",
        "quota_bytes",
        "future_epoch",
        "parse_budget",
        "query",
        "muted",
        "san_mismatch",
        "cn_mismatch",
    } <= found, found


@pytest.mark.parametrize("reason", sorted(shown_reasons()))
def test_every_refusal_reason_has_a_runbook_section(reason: str) -> None:
    anchors = github_anchors(OPERATIONS.read_text())
    anchor = runbooks.refusal_anchor(reason)
    assert anchor == f"refusal-{reason}"
    assert anchor in anchors, f"docs/operations.md lacks ### {runbooks.refusal_heading(reason)}"
    missing = [label for label in LABELS if label not in anchors[anchor]]
    assert missing == [], f"section {anchor} lacks {missing}"


@pytest.mark.parametrize("problem", fleet.PROBLEMS)
def test_every_problem_has_a_runbook_section(problem: str) -> None:
    anchors = github_anchors(OPERATIONS.read_text())
    anchor = runbooks.problem_anchor(problem)
    assert anchor in anchors, f"docs/operations.md lacks ### {runbooks.problem_heading(problem)}"
    assert all(label in anchors[anchor] for label in LABELS), anchor


def test_anchors_are_rendered_as_github_does() -> None:
    text = OPERATIONS.read_text()
    headings = re.findall(r"^#{1,6} +(.+)$", text, re.M)
    assert set(map(runbooks.slug, headings)) <= set(github_anchors(text))
    assert runbooks.slug("Refusal `invalid_json`") == "refusal-invalid_json"
    assert runbooks.slug("TetherRuntimeSilent") == "tetherruntimesilent"
    assert runbooks.slug("Problem `silent`") == "problem-silent"
    # the sections' links to each other resolve too
    for target in re.findall(r"\]\(#([^)]+)\)", text):
        assert target in github_anchors(text), target


def _release() -> Any:
    spec = importlib.util.spec_from_file_location("release", ROOT / "hack" / "release.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("version", "ref"),
    [
        ("0.1.0", "0.1.0"),
        ("12.3.40", "12.3.40"),
        ("0.2.0.dev3", "main"),
        ("0.1.0+g1a2b3c", "main"),
        ("0.2.0rc1", "main"),
        ("1.0", "main"),
        (None, "main"),
        ("", "main"),
    ],
)
def test_links_point_at_the_docs_of_the_running_version(version: str | None, ref: str) -> None:
    assert runbooks.ref_of(version) == ref
    assert runbooks.base_of(version) == f"https://github.com/kyma-project/tether/blob/{ref}"


def test_the_default_base_is_the_installed_version_s_tag_as_the_release_tags_it() -> None:
    installed = importlib.metadata.version("tether")
    assert runbooks.running_version() == installed
    assert runbooks.DEFAULT_BASE == runbooks.base_of(installed)
    # the tag is the one make release checks out and docs/releasing.md tells to push
    release = _release()
    assert release.tag_of("1.2.3") == runbooks.ref_of("1.2.3")
    assert "git tag -a X.Y.Z" in (ROOT / "docs" / "releasing.md").read_text()
    # tether status defaults to the same base
    assert status_cli.parser().get_default("runbook_base") in (
        runbooks.DEFAULT_BASE,
        os.environ.get("TETHER_ADMIN_RUNBOOK_BASE"),
    )


def test_make_release_pins_the_alerts_runbook_base(tmp_path: pathlib.Path) -> None:
    """The repository's alerts link main (its docs move with it); the release's copy of the
    manifests links its tag, a snapshot its commit, a mirror is left alone."""
    release = _release()
    source = ROOT / "manifests" / release.RUNBOOK_BASE
    assert yaml.safe_load(source.read_text())["data"]["base"] == runbooks.base_of(None)
    copy = tmp_path / "manifests"
    (copy / release.RUNBOOK_BASE).parent.mkdir(parents=True)
    (copy / release.RUNBOOK_BASE).write_text(source.read_text())
    assert release.pin_runbooks(copy, release.tag_of("1.4.2"))
    pinned = yaml.safe_load((copy / release.RUNBOOK_BASE).read_text())
    assert pinned["data"]["base"] == runbooks.base_of("1.4.2")
    assert (copy / release.RUNBOOK_BASE).read_text().count("\n") == source.read_text().count(
        "\n"
    )  # comments kept
    mirror = source.read_text().replace(runbooks.base_of(None), "https://docs.example.internal/t")
    (copy / release.RUNBOOK_BASE).write_text(mirror)
    assert not release.pin_runbooks(copy, "v1.4.2")
    assert (copy / release.RUNBOOK_BASE).read_text() == mirror


def test_links_use_the_configured_base_like_the_alerts(tmp_path: pathlib.Path) -> None:
    (tmp_path / "f").write_text("x")
    files = {
        "TETHER_ADMIN_TLS_CERT_FILE": str(tmp_path / "f"),
        "TETHER_ADMIN_TLS_KEY_FILE": str(tmp_path / "f"),
    }
    s = settings_mod.build(settings_mod.SPEC.read(files))
    assert s.runbook_base == runbooks.DEFAULT_BASE
    with pytest.raises(config.SettingError, match="https://"):
        settings_mod.SPEC.read({**files, "TETHER_ADMIN_RUNBOOK_BASE": "javascript:alert(1)"})
    s = settings_mod.build(
        settings_mod.SPEC.read(
            {**files, "TETHER_ADMIN_RUNBOOK_BASE": "https://docs.example.internal/tether/"}
        )
    )
    links = runbooks.Links(s.runbook_base)
    assert (
        links.refusal("invalid_json")
        == "https://docs.example.internal/tether/docs/operations.md#refusal-invalid_json"
    )
    assert (
        links.problem("silent")
        == "https://docs.example.internal/tether/docs/operations.md#problem-silent"
    )
    # a reason that is no plain code (written by hand, a future version) leads to "other"
    assert links.refusal('x"><script>').endswith("#refusal-other")
    assert links.refusal("Quota").endswith("#refusal-other")


def test_the_runtime_refusals_name_the_last_object_and_when() -> None:
    now = datetime.datetime(2026, 12, 2, 10, 30, tzinfo=datetime.UTC)
    d = delivery.Delta()
    d.refuse(now - datetime.timedelta(minutes=3), "quota_records", 413, "team-a", "app")
    d.refuse(now - datetime.timedelta(minutes=2), "quota_records", 413, "team-a", "app-2")
    d.refuse(now - datetime.timedelta(minutes=1), "invalid_json", 400)
    d.refuse(now, "rate", 429)  # a 429: counted as throttled, no refusal
    summary = delivery.summarize(delivery.merge(None, d, "rt-1", now), now)
    rows = runbooks.refusals(summary, runbooks.Links())
    assert [(r.reason, r.refused, r.object, r.status) for r in rows] == [
        ("quota_records", 2, "team-a/app-2", 413),
        ("invalid_json", 1, runbooks.NO_OBJECT, 400),
    ]
    assert rows[0].at == now - datetime.timedelta(minutes=2)
    assert rows[0].runbook.endswith("/docs/operations.md#refusal-quota_records")
    # an object written before lastRefused existed still renders
    old = delivery.merge(None, d, "rt-1", now)
    del old["lastRefused"]
    rows = runbooks.refusals(delivery.summarize(old, now), runbooks.Links())
    assert [(r.object, r.at, r.status) for r in rows] == [("not recorded", None, 0)] * 2
