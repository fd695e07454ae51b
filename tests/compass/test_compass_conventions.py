"""Kubernetes conventions of compass on real planes: metav1.Condition with a Ready summary
on the mapping, printer columns with types the Table API reports, Events for the critical
transitions, and what compass publishes on its Lease (last run, breaker, Director errors),
never a secret."""

from __future__ import annotations

import datetime
import json
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from compass import service
from standins.director import store as store_mod
from testing import compassenv as h
from testing import controlplane
from tether.kube import apitypes, gateway
from tether.runtime import elected, leader

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
RCM_CRD = (
    controlplane.REPO_ROOT
    / "manifests"
    / "kcp"
    / "crds"
    / "tether.kyma-project.io_runtimeconfigmaps.yaml"
)


def table(api: client.ApiClient, path: str) -> dict[str, Any]:
    """A list as the Table API serves it to kubectl (columns with their types)."""
    data = gateway.Kube(api).request("GET", path, accept=TABLE)
    assert isinstance(data, dict) and data["kind"] == "Table", data
    return data


def lease(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    return dict(
        api.sanitize_for_serialization(
            client.CoordinationV1Api(api).read_namespaced_lease(name, ns)
        )
    )


def notes_of(api: client.ApiClient, ns: str, name: str) -> dict[str, str]:
    return dict(lease(api, ns, name)["metadata"].get("annotations") or {})


def events_of(api: client.ApiClient, ns: str, name: str) -> list[dict[str, Any]]:
    evs = client.CoreV1Api(api).list_namespaced_event(
        ns, field_selector=f"involvedObject.name={name}"
    )
    return [dict(api.sanitize_for_serialization(e)) for e in evs.items]


def wait(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout:.0f}s: {what}")


class Leading:
    """The service, its scheduler and elector wired as ``compass.main`` wires them."""

    def __init__(self, kcp_api: client.ApiClient, s: Any) -> None:
        self.svc, self.audit = h.make_service(kcp_api, s)
        self.sched = service.scheduler(self.svc)
        self.elector = elected.elector(
            gateway.Kube(kcp_api),
            leader.LeaseSettings(
                namespace=s.lease_namespace,
                name=s.lease_name,
                lease_duration=3,
                renew_deadline=2,
                retry_period=0.3,
            ),
            self.sched,
            self.svc.metrics.leader,
        )
        self.svc.job.active = lambda: self.elector.is_leader
        self.svc.notes.attach(self.elector.annotate)

    def __enter__(self) -> Leading:
        self.elector.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.elector.stop()
        self.sched.shutdown(wait=True)
        self.svc.close()


@pytest.fixture
def logs_text(caplog: pytest.LogCaptureFixture) -> Iterator[Callable[[], str]]:
    caplog.set_level(logging.DEBUG)
    yield lambda: caplog.text


def test_mapping_conditions_columns_events_and_last_run_on_the_lease(
    kcp_api: client.ApiClient,
    kcp_namespace: str,
    mapping_crd: str,
    clean_director: h.Director,
    skr: controlplane.ControlPlane,
) -> None:
    ns = kcp_namespace
    h.create_kubeconfig_secret(kcp_api, ns, "conv-00", skr)
    h.create_kyma(kcp_api, ns, "conv-00", h.kyma_labels("ga-conv", "conv-shoot-0"))
    s = h.make_settings(clean_director, ns, interval=0.5)
    with Leading(kcp_api, s):
        m = wait(
            lambda: (
                (x := h.get_mapping(kcp_api, ns, "conv-00"))
                and (x.get("status") or {}).get("state") == "Ready"
                and x
            ),
            what="mapping Ready",
        )
        st, gen = m["status"], m["metadata"]["generation"]
        # compass-manager's fields stay
        assert st["registered"] is True and st["configured"] is True and st["state"] == "Ready"
        assert st["observedGeneration"] == gen
        conds = {c["type"]: c for c in st["conditions"]}
        assert set(conds) == {"Ready", "Registered", "Configured"}
        for c in conds.values():
            assert set(c) == {
                "type",
                "status",
                "observedGeneration",
                "lastTransitionTime",
                "reason",
                "message",
            }
            assert c["status"] == "True" and c["observedGeneration"] == gen
            assert c["reason"][0].isupper() and c["reason"].isalnum()
            assert len(c["message"]) <= 1000
        assert conds["Ready"]["reason"] == "Ready"
        since = conds["Ready"]["lastTransitionTime"]

        # printer columns: Ready and Reason, typed; the Age a date
        t = table(kcp_api, f"/apis/tether.kyma-project.io/v1alpha1/namespaces/{ns}/compassmappings")
        cols = {c["name"]: c["type"] for c in t["columnDefinitions"]}
        assert cols["Ready"] == "string" and cols["Reason"] == "string" and cols["Age"] == "date"
        row = dict(
            zip([c["name"] for c in t["columnDefinitions"]], t["rows"][0]["cells"], strict=True)
        )
        assert row["Ready"] == "True" and row["Reason"] == "Ready" and row["State"] == "Ready"

        # Events for the transitions, on the mapping
        evs = wait(
            lambda: (
                (e := events_of(kcp_api, ns, "conv-00"))
                and {"Registered", "TokenDelivered"} <= {x["reason"] for x in e}
                and e
            ),
            what="events",
        )
        for e in evs:
            assert e["involvedObject"]["kind"] == "CompassMapping"
            assert e["source"]["component"] == "tether-compass" and e["type"] == "Normal"
            assert len(e["message"]) <= 1024

        # the last run, the breaker, on the Lease (the elector's next renewal writes them)
        notes = wait(
            lambda: (
                (n := notes_of(kcp_api, ns, s.lease_name))
                and apitypes.LAST_RUN_AT_ANNOTATION in n
                and n
            ),
            what="last run on the Lease",
        )
        at = datetime.datetime.fromisoformat(
            notes[apitypes.LAST_RUN_AT_ANNOTATION].replace("Z", "+00:00")
        )
        assert at.tzinfo is not None and notes[apitypes.LAST_RUN_AT_ANNOTATION].endswith("Z")
        assert abs((datetime.datetime.now(datetime.UTC) - at).total_seconds()) < 30
        assert notes[apitypes.LAST_RUN_RESULT_ANNOTATION] == "ok"
        assert 0 <= float(notes[apitypes.LAST_RUN_SECONDS_ANNOTATION]) < 30
        assert notes[apitypes.BREAKER_ANNOTATION] == "closed"
        spec = lease(kcp_api, ns, s.lease_name)["spec"]
        assert spec["holderIdentity"] and spec["renewTime"]

        # further runs: the transition time stays, the last run moves
        first = notes[apitypes.LAST_RUN_AT_ANNOTATION]
        wait(
            lambda: notes_of(kcp_api, ns, s.lease_name)[apitypes.LAST_RUN_AT_ANNOTATION] != first,
            what="next run",
        )
        again = h.get_mapping(kcp_api, ns, "conv-00")
        assert again is not None
        ready = next(c for c in again["status"]["conditions"] if c["type"] == "Ready")
        assert ready["lastTransitionTime"] == since

    # a deleted Kyma CR: Unregistered
    h.delete_kyma(kcp_api, ns, "conv-00")
    svc, _ = h.make_service(kcp_api, s)
    try:
        h.run_until(svc, lambda: h.get_mapping(kcp_api, ns, "conv-00") is None)
    finally:
        svc.close()
    assert "Unregistered" in {e["reason"] for e in events_of(kcp_api, ns, "conv-00")}


def test_failing_runtime_breaker_and_director_errors_never_show_a_secret(
    kcp_api: client.ApiClient,
    kcp_namespace: str,
    mapping_crd: str,
    clean_director: h.Director,
    skr: controlplane.ControlPlane,
    logs_text: Callable[[], str],
) -> None:
    ns = kcp_namespace
    secret = clean_director.store.client_secret
    h.create_kubeconfig_secret(kcp_api, ns, "leak-00", skr)
    h.create_kyma(kcp_api, ns, "leak-00", h.kyma_labels("ga-leak", "leak-shoot-0"))
    # the Director refuses the input and echoes credentials in its message
    clean_director.store.set_faults(
        store_mod.Faults(
            graphql_error="InvalidData",
            operations=("registerRuntime",),
            message=f"invalid input; client_secret={secret}; Authorization: Bearer {{bearer}}; "
            f"raw {secret} and {{bearer}}",
        )
    )
    # each Kyma CR its own agent Secret in the shared runtime plane: one runtime's Secret
    # naming the other's registration is refused since issue 38 (test_adoption_hostile.py)
    s = h.make_settings(
        clean_director,
        ns,
        interval=0.3,
        secret_name="agent-{kyma}",
        secret_namespace=f"agents-{ns}",
    )
    with Leading(kcp_api, s) as run:
        bearer = run.svc.tokens.get()
        m = wait(
            lambda: (
                (x := h.get_mapping(kcp_api, ns, "leak-00"))
                and int((x.get("status") or {}).get("failures") or 0) >= 3
                and x
            ),
            what="3 failures",
        )
        ready = next(c for c in m["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "False" and ready["reason"] == "DirectorInvalidInput"
        assert m["status"]["state"] == "Failed"
        assert "[redacted]" in ready["message"]
        # failing after backoff: one Warning Event
        evs = wait(
            lambda: [e for e in events_of(kcp_api, ns, "leak-00") if e["reason"] == "Failing"],
            what="Failing event",
        )
        assert len(evs) == 1 and evs[0]["type"] == "Warning"
        # the Director's errors on the Lease: bounded, scrubbed
        notes = wait(
            lambda: (
                (n := notes_of(kcp_api, ns, s.lease_name))
                and apitypes.DIRECTOR_ERRORS_ANNOTATION in n
                and n
            ),
            what="director errors",
        )
        errs = json.loads(notes[apitypes.DIRECTOR_ERRORS_ANNOTATION])
        assert 1 <= len(errs) <= 5
        assert errs[0]["operation"] == "register_runtime" and len(errs[0]["message"]) <= 200
        assert set(errs[0]) == {"at", "operation", "message"}

        # an outage: the breaker opens (threshold 3), then closes when the Director returns
        h.create_kubeconfig_secret(kcp_api, ns, "leak-01", skr)
        h.create_kyma(kcp_api, ns, "leak-01", h.kyma_labels("ga-leak", "leak-shoot-1"))
        clean_director.store.set_faults(store_mod.Faults(http_status=503))
        wait(
            lambda: notes_of(kcp_api, ns, s.lease_name).get(apitypes.BREAKER_ANNOTATION) == "open",
            what="breaker open on the Lease",
        )
        clean_director.store.set_faults(store_mod.Faults())
        wait(
            lambda: (
                notes_of(kcp_api, ns, s.lease_name).get(apitypes.BREAKER_ANNOTATION) == "closed"
            ),
            what="breaker closed on the Lease",
        )
        reasons = wait(
            lambda: (
                (r := [e["reason"] for e in events_of(kcp_api, ns, s.lease_name)])
                and "CircuitClosed" in r
                and r
            ),
            what="breaker events",
        )
        assert "CircuitOpened" in reasons
        wait(
            lambda: (
                (x := h.get_mapping(kcp_api, ns, "leak-01"))
                and (x.get("status") or {}).get("state") == "Ready"
            ),
            what="leak-01 Ready after the outage",
        )
        all_notes = json.dumps(notes_of(kcp_api, ns, s.lease_name))

    everything = [json.dumps(h.get_mapping(kcp_api, ns, n)) for n in ("leak-00", "leak-01")]
    everything += [
        json.dumps(events_of(kcp_api, ns, n)) for n in ("leak-00", "leak-01", s.lease_name)
    ]
    everything += [all_notes, logs_text(), json.dumps(run.audit.events, default=str)]
    for text in everything:
        assert secret not in text
        assert bearer not in text
