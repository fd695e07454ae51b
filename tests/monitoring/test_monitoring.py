"""Alert rules and dashboards: valid for promtool, tested with promtool, and naming only
metrics that the parts really export."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import re
import shutil
import subprocess

import pytest
import yaml

from testing import controlplane

REPO = controlplane.REPO_ROOT
MON = REPO / "manifests" / "monitoring"
PARTS = ("webhook", "listener", "poller", "compass", "enroller")
SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_created")


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is missing: install Debian's 'prometheus' package (.ci/run does)")
    return path


@pytest.fixture
def rules_dir(tmp_path: pathlib.Path) -> pathlib.Path:
    rule = yaml.safe_load((MON / "prometheusrule.yaml").read_text())
    (tmp_path / "tether.rules.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    shutil.copy(MON / "tests" / "rules.test.yaml", tmp_path / "rules.test.yaml")
    return tmp_path


def test_promtool_check_rules(rules_dir: pathlib.Path) -> None:
    out = subprocess.run([promtool(), "check", "rules", str(rules_dir / "tether.rules.yaml")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_promtool_unit_tests(rules_dir: pathlib.Path) -> None:
    out = subprocess.run([promtool(), "test", "rules", str(rules_dir / "rules.test.yaml")],
                         capture_output=True, text=True, cwd=rules_dir)
    assert out.returncode == 0, out.stdout + out.stderr


def exported_metric_names() -> set[str]:
    """Metric names as written in the parts' source (prefix constants expanded)."""
    names: set[str] = set()
    for part in PARTS:
        for path in (REPO / part).glob("*.py"):
            text = path.read_text()
            consts = dict(re.findall(r'^(\w+) = "(tether_\w+)"', text, re.M))
            names |= set(re.findall(r'"(tether_[a-z_]+)"', text))
            for const, prefix in consts.items():
                names |= {prefix + s for s in re.findall(r'f"\{' + const + r'\}(_[a-z_]+)"', text)}
    return names


def used_metric_names(text: str) -> set[str]:
    out = set()
    for name in re.findall(r"\b(tether_[a-z_]+)", text):
        for s in SUFFIXES:
            if name.endswith(s) and name != "tether_compass_actions_total":
                name = name[: -len(s)]
                break
        out.add(name)
    return out


def test_rules_and_dashboards_name_real_metrics() -> None:
    exported = exported_metric_names() | {n.removesuffix("_total") for n in exported_metric_names()}
    texts = [(MON / "prometheusrule.yaml").read_text()]
    texts += [p.read_text() for p in (MON / "dashboards").glob("*.json")]
    used = set().union(*(used_metric_names(t) for t in texts))
    assert used, "no metric referenced"
    unknown = sorted(u for u in used if u not in exported)
    assert unknown == [], f"metrics referenced but not exported: {unknown}"


def test_every_alert_has_a_runbook_section() -> None:
    rule = yaml.safe_load((MON / "prometheusrule.yaml").read_text())
    ops = (REPO / "docs" / "operations.md").read_text()
    anchors = {re.sub(r"[^a-z0-9-]", "", h.strip().lower().replace(" ", "-"))
               for h in re.findall(r"^#+ (.+)$", ops, re.M)}
    for group in rule["spec"]["groups"]:
        for r in group["rules"]:
            url = r["annotations"]["runbook_url"]
            assert url == f"docs/operations.md#{r['alert'].lower()}"
            assert r["alert"].lower() in anchors, f"docs/operations.md lacks a section {r['alert']}"


def test_dashboards_are_generated_and_valid() -> None:
    spec = importlib.util.spec_from_file_location("gen_dashboards", REPO / "hack" / "gen-dashboards.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for name, text in mod.render().items():
        committed = (MON / "dashboards" / name).read_text()
        assert committed == text, f"{name} is stale: run hack/gen-dashboards.py"
        doc = json.loads(committed)
        ids = [p["id"] for p in doc["panels"]]
        assert len(ids) == len(set(ids)) and doc["uid"].startswith("tether-")
        for p in doc["panels"]:
            if p["type"] != "row":
                assert p["targets"] and all(t["expr"] for t in p["targets"])


def test_kustomize_renders() -> None:
    kubectl = controlplane.binaries() / "kubectl"
    out = subprocess.run([str(kubectl), "kustomize", str(MON)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    kinds = [d["kind"] for d in yaml.safe_load_all(out.stdout)]
    assert sorted(kinds) == ["ConfigMap", "PrometheusRule"]
