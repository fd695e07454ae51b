"""The webhook's Flask app in process, for the tests that build it from its factory: the
settings it is built with (no forwarder runs, no network) and an AdmissionReview as the API
server sends it, as a dict (``webhookstack.review`` forges one as bytes for a real server)."""

from __future__ import annotations

from typing import Any

from tether.runtime import sender
from tether.wire import filters
from webhook import settings as settings_mod


def app_settings(max_body: int = 64 * 1024) -> settings_mod.Settings:
    return settings_mod.Settings(
        runtime_id="rt",
        listener=sender.ClientSettings("https://l", "rt", "ca", "c", "k"),
        server=settings_mod.ServerSettings(max_body_bytes=max_body),
        forwarder=settings_mod.ForwarderSettings(),
        filter=filters.ConfigMapFilter(),
        queue_size=2,
    )


def review(
    op: str = "UPDATE",
    *,
    ns: str = "team-a",
    name: str = "cfg",
    dry_run: bool = False,
    old: dict[str, Any] | None = None,
    new: dict[str, Any] | None = None,
    kind: str = "ConfigMap",
) -> dict[str, Any]:
    def obj(data: dict[str, str], rv: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
        return {
            "metadata": {
                "name": name,
                "namespace": ns,
                "uid": "u-1",
                "resourceVersion": rv,
                "labels": labels or {},
            },
            "data": data,
        }

    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "req-1",
            "operation": op,
            "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": kind.lower() + "s"},
            "namespace": ns,
            "name": name,
            "dryRun": dry_run,
            "object": None if op == "DELETE" else (new or obj({"k": "2"}, "")),
            "oldObject": None if op == "CREATE" else (old or obj({"k": "1"}, "41")),
        },
    }
