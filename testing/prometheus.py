"""A real Prometheus server for tests: the shipped scrape configuration and alert rules
against the running parts.

``binary()`` builds (or reuses) the upstream server (hack/build-prometheus.sh: Debian's
package has no Kubernetes service discovery). ``Server`` writes a configuration made of
``manifests/monitoring/prometheus/scrape-config.yaml`` (its jobs as shipped; each
``kubernetes_sd_configs`` entry is given the plane's kubeconfig instead of the in-cluster
ServiceAccount, the one local adaptation) and the groups of a shipped PrometheusRule
(expressions, labels and annotations as shipped; ``for:`` durations shortened to
``for_seconds`` so that a test can see an alert fire, stated where used), starts it with
short scrape and evaluation intervals, and answers queries and alerts from its HTTP API.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import time
from collections.abc import Callable, Iterable
from typing import Any

import requests
import yaml

from testing import controlplane

REPO = controlplane.REPO_ROOT
SCRAPE_CONFIG = REPO / "manifests" / "monitoring" / "prometheus" / "scrape-config.yaml"
KCP_RULES = REPO / "manifests" / "monitoring" / "kcp" / "prometheusrule.yaml"
BUILD = REPO / "hack" / "build-prometheus.sh"


def binary() -> pathlib.Path:
    done = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"hack/build-prometheus.sh failed:\n{done.stderr[-3000:]}")
    return pathlib.Path(done.stdout.strip().splitlines()[-1])


def scrape_jobs(
    kubeconfig: pathlib.Path, jobs: Iterable[str], interval: str = "1s"
) -> list[dict[str, Any]]:
    """The shipped scrape configs of ``jobs``, discovering through ``kubeconfig``."""
    doc = yaml.safe_load(SCRAPE_CONFIG.read_text())
    wanted = set(jobs)
    out = []
    for job in doc["scrape_configs"]:
        if job["job_name"] not in wanted:
            continue
        for sd in job.get("kubernetes_sd_configs") or []:
            sd["kubeconfig_file"] = str(kubeconfig)
        job["scrape_interval"] = interval
        job["scrape_timeout"] = interval
        out.append(job)
    missing = wanted - {j["job_name"] for j in out}
    assert not missing, f"the shipped scrape configuration has no job {sorted(missing)}"
    return out


_FOR = re.compile(r"^\d+[smhd]$")


def rule_groups(path: pathlib.Path, for_seconds: int) -> dict[str, Any]:
    """The groups of a shipped PrometheusRule as a Prometheus rule file, each ``for:``
    shortened to ``for_seconds`` (the expressions are the shipped ones)."""
    rule = yaml.safe_load(path.read_text())
    groups = rule["spec"]["groups"]
    for g in groups:
        g["interval"] = "1s"
        for r in g["rules"]:
            if "for" in r:
                assert _FOR.match(str(r["for"])), r["for"]
                r["for"] = f"{for_seconds}s"
    return {"groups": groups}


class Server:
    def __init__(
        self, work: pathlib.Path, scrape: list[dict[str, Any]], rules: dict[str, Any]
    ) -> None:
        work.mkdir(parents=True, exist_ok=True)
        self.port = controlplane.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        (work / "rules.yaml").write_text(yaml.safe_dump(rules))
        (work / "prometheus.yaml").write_text(
            yaml.safe_dump(
                {
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "rule_files": [str(work / "rules.yaml")],
                    "scrape_configs": scrape,
                }
            )
        )
        self.log_file = work / "prometheus.log"
        self._log = open(self.log_file, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [
                str(binary()),
                f"--config.file={work / 'prometheus.yaml'}",
                f"--storage.tsdb.path={work / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1h",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=controlplane.die_with_parent(),
        )
        self.wait(lambda: self._get("/-/ready") is not None, "Prometheus ready", 60)

    def _get(self, path: str, **params: str) -> Any:
        if self.proc.poll() is not None:
            raise AssertionError(f"prometheus exited: {self.log()[-3000:]}")
        try:
            r = requests.get(self.url + path, params=params, timeout=5)
        except requests.RequestException:
            return None
        if r.status_code != 200:
            return None
        return r.json() if path.startswith("/api/") else r.text

    def log(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""

    def query(self, expr: str) -> list[dict[str, Any]]:
        doc = self._get("/api/v1/query", query=expr)
        return [] if doc is None else list(doc["data"]["result"])

    def targets(self) -> list[dict[str, Any]]:
        doc = self._get("/api/v1/targets")
        return [] if doc is None else list(doc["data"]["activeTargets"])

    def alerts(self, state: str = "firing") -> list[dict[str, Any]]:
        doc = self._get("/api/v1/alerts")
        return [] if doc is None else [a for a in doc["data"]["alerts"] if a["state"] == state]

    def firing(self, name: str, **labels: str) -> dict[str, Any] | None:
        for a in self.alerts():
            if a["labels"].get("alertname") == name and all(
                a["labels"].get(k) == v for k, v in labels.items()
            ):
                return a
        return None

    def wait(self, probe: Callable[[], Any], what: str, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = probe()
            if got:
                return got
            time.sleep(0.2)  # a probe is one local HTTP request
        raise AssertionError(f"{what}: not within {timeout:.0f}s\n{self.log()[-2000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._log.close()
