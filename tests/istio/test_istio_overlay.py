"""The Istio overlays (``manifests/overlays/istio`` and its ``passthrough`` variant, issue 42
item 4), rendered with the plane's ``kubectl kustomize`` and checked as far as a plane
without Istio allows: Istio's CRDs (``istio.io/api``, ``testing/istio.py``) installed on the
session's KCP plane, every Istio object of both overlays applied server-side (so validated by
Istio's published schemas) and read back; a malformed one refused by the same schemas; the
listener's environment as rendered accepted by its own settings (XFCC mode, or its own mTLS)
and the wiring between the objects consistent (hosts, Service, ports, NetworkPolicy).

Not shown (no Istio control plane or Envoy runs here): that the gateway terminates mTLS,
sanitizes X-Forwarded-Client-Cert and routes as configured (docs/listener.md says so)."""

from __future__ import annotations

import copy
import pathlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client

from listener import settings as listener_settings
from testing import controlplane, istio, overlays

pytestmark = pytest.mark.processes

HOST = "listener.kcp.example.com"


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict[str, Any]]]:
    return {
        "xfcc": overlays.kustomize(istio.OVERLAY),
        "passthrough": overlays.kustomize(istio.PASSTHROUGH),
    }


@pytest.fixture(scope="module")
def istio_crds(kcp_api: client.ApiClient) -> list[str]:
    return controlplane.install_crds(kcp_api, *istio.crds())


@pytest.fixture
def namespaces(kcp_api: client.ApiClient) -> Iterator[dict[str, str]]:
    """Fresh namespaces standing in for tether-system and istio-system."""
    core = client.CoreV1Api(kcp_api)
    names = {
        ns: f"{ns.split('-')[0]}-{uuid.uuid4().hex[:6]}" for ns in ("tether-system", "istio-system")
    }
    for name in names.values():
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield names
    for name in names.values():
        core.delete_namespace(name)


def one(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} in the render"
    return found[0]


def apply(
    plane: controlplane.ControlPlane, objs: list[dict[str, Any]], folder: pathlib.Path
) -> Any:
    path = folder / f"objects-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump_all(objs, sort_keys=False))
    return plane.kubectl(
        "apply", "--server-side", "--field-manager", "tether-test", "-f", str(path)
    )


def test_every_istio_object_of_both_variants_passes_istios_schemas(
    kcp: controlplane.ControlPlane,
    kcp_api: client.ApiClient,
    istio_crds: list[str],
    rendered: dict[str, list[dict[str, Any]]],
    namespaces: dict[str, str],
    tmp_path: pathlib.Path,
) -> None:
    assert "gateways.networking.istio.io" in istio_crds
    plurals = {c["spec"]["names"]["kind"]: c["spec"]["names"]["plural"] for c in istio.crds()}
    kinds = {}
    for variant, objs in rendered.items():
        ours = [copy.deepcopy(o) for o in objs if istio.is_istio(o)]
        kinds[variant] = sorted(o["kind"] for o in ours)
        for o in ours:
            o["metadata"]["namespace"] = namespaces[o["metadata"]["namespace"]]
        # the variants share names: one variant per namespace pair at a time
        done = apply(kcp, ours, tmp_path)
        assert done.returncode == 0, done.stderr
        objects = client.CustomObjectsApi(kcp_api)
        for o in ours:
            group, version = o["apiVersion"].split("/")
            plural = plurals[o["kind"]]
            got = objects.get_namespaced_custom_object(
                group, version, o["metadata"]["namespace"], plural, o["metadata"]["name"]
            )
            assert got["spec"] == o["spec"], f"{variant}: {o['kind']} pruned or defaulted"
            objects.delete_namespaced_custom_object(
                group, version, o["metadata"]["namespace"], plural, o["metadata"]["name"]
            )
    assert kinds == {
        "xfcc": [
            "AuthorizationPolicy",
            "EnvoyFilter",
            "Gateway",
            "PeerAuthentication",
            "VirtualService",
        ],
        "passthrough": ["Gateway", "VirtualService"],
    }
    # the schemas are live: a TLS mode Istio does not know, a route without a destination
    bad_gw = copy.deepcopy(one(rendered["xfcc"], "Gateway", "tether-listener"))
    bad_gw["spec"]["servers"][0]["tls"]["mode"] = "MUTUALLY"
    bad_vs = copy.deepcopy(one(rendered["passthrough"], "VirtualService", "tether-listener"))
    del bad_vs["spec"]["tls"][0]["route"][0]["destination"]
    for bad in (bad_gw, bad_vs):
        bad["metadata"]["namespace"] = namespaces["tether-system"]
        done = apply(kcp, [bad], tmp_path)
        assert done.returncode != 0 and "Invalid" in done.stderr, done.stderr


def env_of(deployment: dict[str, Any], folder: pathlib.Path) -> dict[str, str]:
    """The listener container's env as rendered, its file paths pointed at files here."""
    (folder / "file.pem").write_text("x")
    env = {}
    for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]:
        if "value" in e:
            env[e["name"]] = e["value"]
    return {k: str(folder / "file.pem") if v.startswith("/etc/") else v for k, v in env.items()}


def test_the_xfcc_variant_runs_the_listener_behind_its_sidecar_in_xfcc_mode(
    rendered: dict[str, list[dict[str, Any]]], tmp_path: pathlib.Path
) -> None:
    objs = rendered["xfcc"]
    dep = one(objs, "Deployment", "tether-listener")
    pod = dep["spec"]["template"]
    assert pod["metadata"]["labels"]["sidecar.istio.io/inject"] == "true"
    proxy = yaml.safe_load(pod["metadata"]["annotations"]["proxy.istio.io/config"])
    assert proxy == {"proxyHeaders": {"forwardedClientCert": "FORWARD_ONLY"}}
    s = listener_settings.from_env(env_of(dep, tmp_path))
    assert not s.tls and s.xfcc_trusted_proxies == ("127.0.0.6/32",)
    assert s.bind == "0.0.0.0:8443"  # the sidecar delivers to the pod address, not loopback
    # no serving certificate mounted (the base's Secret is not needed)
    assert "serving" not in {v["name"] for v in pod["spec"]["volumes"]}
    gw = one(objs, "Gateway", "tether-listener")["spec"]["servers"][0]
    assert (gw["tls"]["mode"], gw["hosts"]) == ("MUTUAL", [HOST])
    ef = one(objs, "EnvoyFilter", "tether-listener-xfcc")["spec"]["configPatches"][0]
    assert ef["match"]["listener"]["filterChain"]["sni"] == HOST
    hcm = ef["patch"]["value"]["typed_config"]
    assert hcm["forward_client_cert_details"] == "SANITIZE_SET"
    assert hcm["set_current_client_cert_details"]["cert"] is True
    svc = one(objs, "Service", "tether-listener")
    data = next(p for p in svc["spec"]["ports"] if p["port"] == 443)
    assert data["appProtocol"] == "http"
    ports = {p["name"]: p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}
    rules = one(objs, "AuthorizationPolicy", "tether-listener")["spec"]["rules"]
    gated = [r for r in rules if "from" in r]
    assert [r["to"][0]["operation"]["ports"] for r in gated] == [[str(ports["https"])]]
    pa = one(objs, "PeerAuthentication", "tether-listener")["spec"]
    assert pa["mtls"]["mode"] == "STRICT" and pa["portLevelMtls"] == {
        str(ports["ops"]): {"mode": "DISABLE"}
    }
    check_route_and_policy(objs, data)


def test_the_passthrough_variant_keeps_the_listeners_own_mtls(
    rendered: dict[str, list[dict[str, Any]]], tmp_path: pathlib.Path
) -> None:
    objs = rendered["passthrough"]
    dep = one(objs, "Deployment", "tether-listener")
    assert dep["spec"]["template"]["metadata"]["labels"]["sidecar.istio.io/inject"] == "false"
    s = listener_settings.from_env(env_of(dep, tmp_path))
    assert s.tls and s.xfcc_trusted_proxies == ()
    gw = one(objs, "Gateway", "tether-listener")["spec"]["servers"][0]
    assert (gw["tls"]["mode"], gw["port"]["protocol"], gw["hosts"]) == (
        "PASSTHROUGH",
        "TLS",
        [HOST],
    )
    vs = one(objs, "VirtualService", "tether-listener")["spec"]
    assert vs["tls"][0]["match"][0]["sniHosts"] == [HOST]
    svc = one(objs, "Service", "tether-listener")
    data = next(p for p in svc["spec"]["ports"] if p["port"] == 443)
    assert "appProtocol" not in data
    check_route_and_policy(objs, data)


def check_route_and_policy(objs: list[dict[str, Any]], port: dict[str, Any]) -> None:
    """The VirtualService routes to the listener's Service and port through this Gateway;
    the NetworkPolicy admits the gateway's namespace to the port the Service targets."""
    vs = one(objs, "VirtualService", "tether-listener")
    svc = one(objs, "Service", "tether-listener")
    gw = one(objs, "Gateway", "tether-listener")
    spec = vs["spec"]
    assert spec["hosts"] == [HOST]
    assert spec["gateways"] == [f"{gw['metadata']['namespace']}/{gw['metadata']['name']}"]
    routes = spec.get("http") or spec.get("tls")
    dest = routes[0]["route"][0]["destination"]
    meta = svc["metadata"]
    assert dest["host"] == f"{meta['name']}.{meta['namespace']}.svc.cluster.local"
    assert dest["port"]["number"] == port["port"]
    dep = one(objs, "Deployment", "tether-listener")
    named = {
        p["name"]: p["containerPort"]
        for p in dep["spec"]["template"]["spec"]["containers"][0]["ports"]
    }
    target = named[port["targetPort"]]
    np = one(objs, "NetworkPolicy", "tether-listener")["spec"]
    admitted = [r for r in np["ingress"] if any(p["port"] == target for p in r["ports"])]
    assert [r["from"][0]["namespaceSelector"]["matchLabels"] for r in admitted] == [
        {"kubernetes.io/metadata.name": "istio-system"}
    ]
