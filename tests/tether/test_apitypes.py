"""The API types are declared once (tether.kube.apitypes): no other product module writes them."""

from __future__ import annotations

import pathlib
import re

from tether.kube import apitypes, gateway

ROOT = pathlib.Path(__file__).resolve().parents[2]
PRODUCT = (
    "command",
    "tether",
    "listener",
    "compass",
    "enroller",
    "admin",
    "webhook",
    "poller",
    "injector",
    "canary",
)
HOME = ROOT / "tether" / "kube" / "apitypes.py"

# a quoted group or plural of a type Tether declares, or a Resource built in place
DECLARED = [
    f'"{r.plural}"'
    for r in (
        apitypes.KYMAS,
        apitypes.COMPASS_MAPPINGS,
        apitypes.COMPASS_MANAGER_LEGACY_MAPPINGS,
        apitypes.RUNTIME_CONFIGMAPS,
        apitypes.RUNTIME_DELIVERIES,
        apitypes.RUNTIME_STATE_SUMMARIES,
        apitypes.RUNTIME_ENROLLMENTS,
        apitypes.EVENTS,
        apitypes.LEASES,
        apitypes.DEPLOYMENTS,
        apitypes.TOKEN_REVIEWS,
        apitypes.SUBJECT_ACCESS_REVIEWS,
        apitypes.VALIDATING_WEBHOOK_CONFIGURATIONS,
    )
]
DECLARED += [
    f'"{apitypes.KYMA_GROUP}"',
    f'"{apitypes.TETHER_GROUP}"',
    f'"{apitypes.KYMAS.version}"',
    "Resource(",
]


def product_sources() -> list[pathlib.Path]:
    return sorted(p for part in PRODUCT for p in (ROOT / part).rglob("*.py") if p != HOME)


def test_no_product_module_declares_an_api_type_itself() -> None:
    found = []
    for path in product_sources():
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            found += [f"{path.relative_to(ROOT)}:{n}: {word}" for word in DECLARED if word in code]
    assert not found, "declare API types in tether/kube/apitypes.py:\n" + "\n".join(found)


def test_the_scan_sees_the_product() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in product_sources()}
    assert {
        "tether/kube/kyma.py",
        "compass/model.py",
        "enroller/reconcile.py",
        "admin/snapshot.py",
        "listener/storage/records.py",
    } <= names


def test_the_gateway_re_exports_the_same_types() -> None:
    assert gateway.Resource is apitypes.Resource
    assert (gateway.CONFIGMAPS, gateway.SECRETS, gateway.NAMESPACES, gateway.LEASES) == (
        apitypes.CONFIGMAPS,
        apitypes.SECRETS,
        apitypes.NAMESPACES,
        apitypes.LEASES,
    )


def test_paths_and_api_versions() -> None:
    assert apitypes.KYMAS.path("kcp-system", "k1") == (
        "/apis/operator.kyma-project.io/v1beta2/namespaces/kcp-system/kymas/k1"
    )
    assert apitypes.KYMAS.api_version == "operator.kyma-project.io/v1beta2"
    assert apitypes.EVENTS.api_version == "v1"
    assert apitypes.NAMESPACES.path("ignored", "a/b") == "/api/v1/namespaces/a%2Fb"


def test_each_key_is_declared_once() -> None:
    values = [
        v
        for k, v in vars(apitypes).items()
        if re.fullmatch(r"[A-Z_]+", k) and isinstance(v, (str, apitypes.Resource))
    ]
    assert len(values) == len(set(values))
