"""Version-skew helpers: another release's source tree run next to this checkout's parts.

``tree(commit, dest)`` extracts ``git archive <commit>`` (a commit hash, so a clone without
tags works); ``webhook``, ``listener`` and ``poller`` run a part from a tree (this checkout's
by default) against the real planes with mTLS and the runtime's certificate.
``deliver_then_poll`` is the round every skew test makes: labelled ConfigMaps delivered by
the webhook, then the webhook's configuration removed and the poller alone reconciling a
create, an update and a delete; it returns what the KCP holds. ``refused`` reads what a
listener refused from its metrics. ``api``, ``routes`` and ``record_kinds`` read what a
tree's listener serves from its OpenAPI document (``listener/openapi.json``), so a skew test
derives what the previous release lacks instead of naming a release.
"""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import time
import uuid
from collections.abc import Callable
from typing import Any

from kubernetes import client

from testing import controlplane, pollerenv, releaserecord
from testing import webhookstack as stack
from testing.listenerenv import Env, ListenerProcess, Runtime

REPO = controlplane.REPO_ROOT
# the newest release in releases.json (its commit: a clone without tags finds it)
PREVIOUS_RELEASE: str = releaserecord.previous()["commit"]


def tree(commit: str, dest: pathlib.Path) -> pathlib.Path:
    """``dest`` holding ``git archive <commit>`` of this repository."""
    archive = subprocess.run(
        ["git", "archive", commit], cwd=REPO, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def api(code: pathlib.Path) -> dict[str, Any]:
    """The OpenAPI document of the listener of ``code`` (a tree, or this checkout); a tree
    without one fails: every release since 0.1.0 ships it."""
    doc: dict[str, Any] = json.loads((code / "listener" / "openapi.json").read_text())
    return doc


def routes(doc: dict[str, Any]) -> set[tuple[str, str]]:
    """(METHOD, path template) of every operation the document's listener serves."""
    return {
        (method.upper(), path)
        for path, item in doc["paths"].items()
        for method in item
        if method in ("get", "put", "post", "delete", "patch", "head", "options")
    }


def record_kinds(doc: dict[str, Any]) -> set[tuple[str, str]]:
    """(apiVersion, kind) of every record and list of records the listener takes: the
    schemas whose ``apiVersion`` and ``kind`` are constants."""
    out = set()
    for schema in doc["components"]["schemas"].values():
        props = schema.get("properties", {})
        if "const" in props.get("apiVersion", {}) and "const" in props.get("kind", {}):
            out.add((props["apiVersion"]["const"], props["kind"]["const"]))
    return out


def until(what: Callable[[], Any], timeout: float, why: Callable[[], str]) -> Any:
    deadline = time.monotonic() + timeout
    while not (got := what()):
        assert time.monotonic() < deadline, why()
        time.sleep(0.2)
    return got


def namespace(core: client.CoreV1Api, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    controlplane.retry_busy(
        lambda: core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    )
    return name


def webhook(
    skr: controlplane.ControlPlane,
    env: Env,
    listener_url: str,
    rt: Runtime,
    work: pathlib.Path,
    code: pathlib.Path = REPO,
    **extra: str,
) -> stack.WebhookProcess:
    """``tether webhook`` of ``code`` for ``rt``, started."""
    work.mkdir(parents=True, exist_ok=True)
    wh = stack.WebhookProcess(
        work,
        {
            "TETHER_RUNTIME_ID": rt.id,
            "TETHER_LISTENER_URL": listener_url,
            "TETHER_LISTENER_CA_FILE": str(env.server_ca_file),
            "TETHER_CLIENT_CERT_FILE": str(rt.cert_file),
            "TETHER_CLIENT_KEY_FILE": str(rt.key_file),
            "TETHER_KUBECONFIG": str(skr.kubeconfig),
            **extra,
        },
        code=code,
    ).start()
    assert wh.proc is not None and runs_from(wh.proc.pid, code)
    return wh


class TreeListener(ListenerProcess):
    """The listener of another source tree (``code``), else as ``ListenerProcess``."""

    def __init__(self, env: Env, name: str, code: pathlib.Path, **overrides: str) -> None:
        self.code = code
        super().__init__(env, name, **overrides)


REFUSALS = re.compile(
    r"(tether_listener_(?:requests_total|\w+_refusals_total|validation_failures_total"
    r"|rate_limited_total))\{([^}]*)\} (\S+)$"
)


def refusals(exposition: str) -> dict[str, float]:
    """A listener's answers of 4xx/5xx by (route, method, code) and every refusal counter
    (auth, TLS, Watch, quota, connection, validation, rate limit) of its metrics text, nonzero."""
    out: dict[str, float] = {}
    for line in exposition.splitlines():
        m = REFUSALS.match(line)
        if not m or float(m.group(3)) == 0:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        if m.group(1) == "tether_listener_requests_total" and labels.get("code", "")[:1] not in (
            "4",
            "5",
        ):
            continue
        out[f"{m.group(1)}{{{m.group(2)}}}"] = float(m.group(3))
    return out


def refused(listener: ListenerProcess) -> dict[str, float]:
    """``refusals`` of the running listener."""
    return refusals(listener.metrics())


def runs_from(pid: int, code: pathlib.Path) -> bool:
    """The process runs in ``code`` (its working directory: first on its ``sys.path``)."""
    return pathlib.Path(f"/proc/{pid}/cwd").resolve() == code.resolve()


def _deliver(
    core: client.CoreV1Api,
    env: Env,
    rt: Runtime,
    ns: str,
    labels: dict[str, str],
    wh: stack.WebhookProcess,
) -> None:
    """``kept`` and ``to-delete`` created and delivered by the webhook (patched until the
    apiserver picks the new configuration up)."""
    for name in ("kept", "to-delete"):
        core.create_namespaced_config_map(
            ns,
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name=name, labels=labels), data={"v": "0"}
            ),
        )
    n = [0]

    def by_webhook() -> bool:
        n[0] += 1
        core.patch_namespaced_config_map("kept", ns, {"data": {"v": f"w{n[0]}"}})
        rec = env.stored_one(rt.id, ns, "kept")
        return rec is not None and rec["spec"]["source"] == "webhook"

    until(by_webhook, 60, lambda: "the webhook never delivered:\n" + wh.log())
    until(
        lambda: env.stored_one(rt.id, ns, "to-delete"),
        30,
        lambda: "to-delete not delivered:\n" + wh.log(),
    )


def deliver_then_poll(
    skr: controlplane.ControlPlane,
    core: client.CoreV1Api,
    env: Env,
    rt: Runtime,
    listener_url: str,
    work: pathlib.Path,
    *,
    webhook_code: pathlib.Path = REPO,
    poller_code: pathlib.Path = REPO,
) -> dict[str, dict[str, Any]]:
    """The webhook of ``webhook_code`` delivers; with its configuration removed the poller
    of ``poller_code`` reconciles a create, an update and a delete. Asserts the KCP then holds
    the runtime's state exactly; returns the stored specs by name."""
    ns = namespace(core, "skew")
    labels, selector = pollerenv.unique_selector()
    wh = webhook(
        skr, env, listener_url, rt, work / "webhook", webhook_code, TETHER_LABEL_SELECTOR=selector
    )
    vwc = stack.vwc_body(f"tether-skew-{ns}", wh.url + "/validate", wh.ca.cert_pem, ns)
    stack.register(core.api_client, vwc)
    poller: pollerenv.PollerProcess | None = None
    rc: int | None = None
    try:
        _deliver(core, env, rt, ns, labels, wh)
        stack.unregister(core.api_client, vwc["metadata"]["name"])
        until(
            lambda: _not_called(core, ns, wh), 30, lambda: "the apiserver kept calling the webhook"
        )
        # stopped (its pending read-backs done) before the changes only the poller may send
        rc = wh.stop()
        assert rc == 0, wh.log()
        core.create_namespaced_config_map(
            ns,
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name="created-later", labels=labels), data={"v": "1"}
            ),
        )
        core.patch_namespaced_config_map("kept", ns, {"data": {"v": "final"}})
        core.delete_namespaced_config_map("to-delete", ns)
        poller = pollerenv.PollerProcess(
            work,
            f"skew-{ns}",
            pollerenv.poller_env(
                rt,
                listener_url,
                skr,
                selector,
                ns,
                TETHER_POLLER_INTERVAL_SECONDS="2",
                TETHER_POLLER_JITTER_SECONDS="0.2",
                TETHER_POLLER_LEASE_DURATION_SECONDS="3",
            ),
            code=poller_code,
        ).start()
        p = poller
        assert p.proc is not None and runs_from(p.proc.pid, poller_code)
        until(
            lambda: p.metric("tether_poller_runs_total", outcome="ok") >= 2,
            90,
            lambda: "no two ok poll runs:\n" + p.log(),
        )
        live, dead = pollerenv.kcp_state(env, rt.id, ns)
        assert live == pollerenv.runtime_state(core, ns, selector), p.log()
        assert list(dead) == [(ns, "to-delete")]
        return {
            s["name"]: s for s in (o["spec"] for o in env.stored(rt.id)) if s["namespace"] == ns
        }
    finally:
        stack.unregister(core.api_client, vwc["metadata"]["name"])
        if rc is None:
            wh.stop()
        if poller is not None:
            assert poller.stop() == 0, poller.log()
        core.delete_namespace(ns)


def _not_called(core: client.CoreV1Api, ns: str, wh: stack.WebhookProcess) -> bool:
    before = wh.metric("tether_webhook_admission_requests_total")
    core.patch_namespaced_config_map(
        "kept", ns, {"metadata": {"annotations": {"probe": uuid.uuid4().hex}}}
    )
    return wh.metric("tether_webhook_admission_requests_total") == before
