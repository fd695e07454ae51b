"""The Director down for several compass intervals while Kyma CRs come and go: the real
``tether compass`` process on the fault KCP, the Director stand-in in this process (so it
can be stopped and made to fail), every Kyma CR's token Secret in the fault SKR plane
(``TETHER_COMPASS_AGENT_SECRET_NAME`` with ``{kyma}``, one Secret per Kyma CR).

What must hold: provisioning never waits for Compass (every Kyma CR create and delete
succeeds at once, Director down or not); no mapping is Failed while the Director is
unavailable; afterwards every remaining Kyma CR is Ready with a valid one-time token in its
runtime and registered exactly once, and every deleted one is unregistered, its mapping
gone: the Director ends holding exactly the KCP's Kyma CRs.
"""

from __future__ import annotations

import base64
import pathlib
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from compass import model
from standins.director import server as server_mod
from standins.director import store as store_mod
from testing import compassenv, controlplane, listenerenv
from testing.faultstack import CompassProcess
from testing.pollerenv import wait_until

INTERVAL = 1.0  # compass's interval (its minimum)


@pytest.fixture(scope="module")
def director(tmp_path_factory: pytest.TempPathFactory) -> Iterator[compassenv.Director]:
    ca, cert, key = server_mod.self_signed(tmp_path_factory.mktemp("fault-director"))
    store = store_mod.Store(client_secret="s3cr3t-of-the-fault-suite")
    srv = server_mod.DirectorServer(store, cert, key).start()
    store.connector_url = f"{srv.url}/connector/graphql"
    yield compassenv.Director(srv, ca)
    srv.stop()


class Fleet:
    """Kyma CRs of one KCP namespace pointing at one runtime plane, and what compass made
    of them (mappings, the Director's runtimes, the token Secrets)."""

    def __init__(
        self,
        kcp_api: client.ApiClient,
        ns: str,
        skr: controlplane.ControlPlane,
        secret_ns: str,
        director: compassenv.Director,
        tenant: str,
    ) -> None:
        self.kcp_api, self.ns, self.skr, self.secret_ns = kcp_api, ns, skr, secret_ns
        self.director, self.tenant = director, tenant
        self.skr_api = skr.api_client()
        self.skr_core = client.CoreV1Api(self.skr_api)
        self.live: list[str] = []
        self.deleted: list[str] = []
        self.writes = 0
        self.tag = uuid.uuid4().hex[:6]

    def create(self, name: str) -> None:
        """What provisioning does: the kubeconfig Secret and the Kyma CR (must succeed)."""
        compassenv.create_kubeconfig_secret(self.kcp_api, self.ns, name, self.skr)
        compassenv.create_kyma(
            self.kcp_api, self.ns, name, compassenv.kyma_labels(self.tenant, f"{name}-{self.tag}")
        )
        self.writes += 2
        self.live.append(name)

    def delete(self, name: str) -> None:
        compassenv.delete_kyma(self.kcp_api, self.ns, name)
        self.writes += 1
        self.live.remove(name)
        self.deleted.append(name)

    def mapping(self, name: str) -> dict[str, Any] | None:
        return compassenv.get_mapping(self.kcp_api, self.ns, name)

    def state(self, name: str) -> str:
        return str(((self.mapping(name) or {}).get("status") or {}).get("state", ""))

    def registered(self, name: str) -> list[store_mod.Runtime]:
        ref = f"{self.ns}.{name}"
        return [
            r for r in self.director.store.all_runtimes() if r.labels.get(model.KYMA_REF) == ref
        ]

    def token(self, name: str) -> dict[str, str] | None:
        try:
            sec: Any = self.skr_core.read_namespaced_secret(f"compass-agent-{name}", self.secret_ns)
        except client.ApiException as e:
            if e.status == 404:
                return None
            raise
        return {k: base64.b64decode(v).decode() for k, v in (sec.data or {}).items()}

    def difference(self) -> str:
        """'' when the Director and the runtime hold exactly what the Kyma CRs ask for."""
        problems = []
        try:
            for n in self.live:
                regs, sec, state = self.registered(n), self.token(n), self.state(n)
                if state != "Ready" or len(regs) != 1:
                    problems.append(f"{n}: {state or 'no mapping'}, {len(regs)} registrations")
                elif (
                    sec is None
                    or sec.get("RUNTIME_ID") != regs[0].id
                    or self.director.store.token_state(sec.get("TOKEN", "")) != "valid"
                ):
                    problems.append(f"{n}: no valid token in its runtime")
            for n in self.deleted:
                if self.registered(n) or self.mapping(n) is not None:
                    problems.append(f"{n}: deleted but still registered or mapped")
        except Exception as e:  # noqa: BLE001 - not yet comparable
            return f"cannot compare: {type(e).__name__}: {str(e)[:200]}"
        return "; ".join(problems)

    def close(self) -> None:
        self.skr_api.close()

    def failed(self) -> list[str]:
        return [n for n in self.live if self.state(n) == "Failed"]


def test_director_down_for_several_intervals_while_kyma_crs_come_and_go(
    fkcp: controlplane.ControlPlane,
    fkcp_api: client.ApiClient,
    fskr: controlplane.ControlPlane,
    fault_env: listenerenv.Env,
    director: compassenv.Director,
    tmp_path: pathlib.Path,
    report: Callable[..., None],
) -> None:
    controlplane.install_crds(fkcp_api, compassenv.CRD_FILE)  # the Kyma CRD: fault_env's
    ns, secret_ns = f"kc-{uuid.uuid4().hex[:8]}", f"ks-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(fkcp_api).create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=ns))
    )
    d = director
    secret_file = tmp_path / "client_secret"
    secret_file.write_text(d.store.client_secret)
    fleet = Fleet(fkcp_api, ns, fskr, secret_ns, d, "ga-faults")
    compass = CompassProcess(
        tmp_path,
        fkcp.kubeconfig,
        {
            "TETHER_KCP_NAMESPACE": ns,
            "TETHER_COMPASS_LEASE_NAMESPACE": ns,
            "TETHER_COMPASS_DIRECTOR_URL": d.graphql_url,
            "TETHER_COMPASS_OAUTH_TOKEN_URL": d.token_url,
            "TETHER_COMPASS_OAUTH_CLIENT_ID": d.store.client_id,
            "TETHER_COMPASS_OAUTH_CLIENT_SECRET_FILE": str(secret_file),
            "TETHER_COMPASS_DIRECTOR_CA_FILE": str(d.ca_file),
            "TETHER_COMPASS_INTERVAL_SECONDS": str(INTERVAL),
            "TETHER_COMPASS_AGENT_SECRET_NAMESPACE": secret_ns,
            "TETHER_COMPASS_AGENT_SECRET_NAME": "compass-agent-{kyma}",
            "TETHER_COMPASS_DIRECTOR_TIMEOUT_SECONDS": "2",
            "TETHER_COMPASS_SKR_TIMEOUT_SECONDS": "5",
            "TETHER_COMPASS_BACKOFF_BASE_SECONDS": "0.5",
            "TETHER_COMPASS_BACKOFF_CAP_SECONDS": "2",
            "TETHER_COMPASS_BREAKER_THRESHOLD": "3",
            "TETHER_COMPASS_BREAKER_OPEN_SECONDS": "1",
            "TETHER_COMPASS_BREAKER_MAX_OPEN_SECONDS": "2",
        },
    ).start()
    down = False
    try:
        for i in range(3):
            fleet.create(f"k-{i:02d}")
        wait_until(lambda: not fleet.difference(), 60, "the first Kyma CRs to be Ready")

        began = time.monotonic()
        d.server.stop()  # down: connections refused
        down = True
        fleet.create("k-03")
        fleet.create("k-04")
        fleet.delete("k-00")  # registered before the outage
        fleet.create("k-05")
        time.sleep(3 * INTERVAL)  # the outage spans compass runs before k-04 goes
        fleet.delete("k-04")  # created during the outage, never registered
        unavailable = _wait_unavailable(fleet, ["k-03", "k-05"])
        # then it answers again, but 503 to every GraphQL request (unhealthy behind its
        # load balancer), for a few more intervals
        d.store.set_faults(store_mod.Faults(http_status=503))
        d.server.start()
        down = False
        deadline = time.monotonic() + 3 * INTERVAL
        while time.monotonic() < deadline:
            assert not fleet.failed(), f"Failed while the Director is down: {fleet.failed()}"
            time.sleep(0.3)
        assert fleet.registered("k-00"), "unregistered while the Director was down?"
        d.store.set_faults(store_mod.Faults())
        healed = time.monotonic()

        deadline = healed + 60
        while diff := fleet.difference():
            assert time.monotonic() < deadline, (
                f"compass did not converge in 60s: {diff}\n{compass.log()}"
            )
            assert not fleet.failed(), f"Failed after the Director came back: {fleet.failed()}"
            time.sleep(0.25)
        converged = time.monotonic() - healed
        report(
            fault="Director down for several compass intervals",
            writes=fleet.writes,
            failed=0,
            retried=0,
            fault_seconds=round(healed - began, 1),
            after_fault_seconds=round(converged, 1),
            converged_seconds=round(converged, 1),
            intervals_down=int((healed - began) / INTERVAL),
            reasons_seen=",".join(sorted(unavailable)),
        )
        assert sorted(fleet.live) == ["k-01", "k-02", "k-03", "k-05"]
    finally:
        d.store.set_faults(store_mod.Faults())
        if down:
            d.server.start()
        rc = compass.stop()
        fleet.close()
    assert rc == 0, compass.log()


def _wait_unavailable(fleet: Fleet, names: list[str]) -> set[str]:
    """Until the mappings of ``names`` report the Director unavailable (Processing, never
    Failed); returns the condition reasons seen."""
    seen: set[str] = set()

    def reported() -> bool:
        assert not fleet.failed(), f"Failed while the Director is down: {fleet.failed()}"
        ok = True
        for n in names:
            st = (fleet.mapping(n) or {}).get("status") or {}
            reasons = {c.get("reason", "") for c in st.get("conditions", [])}
            seen.update(reasons & {"DirectorUnavailable", "DirectorCircuitOpen"})
            ok = (
                ok
                and st.get("state") == "Processing"
                and bool(reasons & {"DirectorUnavailable", "DirectorCircuitOpen"})
            )
        return ok

    wait_until(reported, 30, f"the mappings of {names} to report the Director unavailable")
    return seen
