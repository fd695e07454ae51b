"""A Watch's storage namespace and injector target (tether.wire.watchuse, through watches.parse)."""

from __future__ import annotations

from typing import Any

import pytest

from tether.wire import watches

CM = {"group": "", "version": "v1", "resource": "configmaps", "kind": "ConfigMap"}
INJECT = {
    "resource": {"group": "example.kyma-project.io", "version": "v1alpha1", "resource": "samples"},
    "namespace": "kcp-system",
    "field": "spec.configuration",
}


def _watch(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "w"}, "spec": {"resource": CM, **spec}}


def test_absent_fields_keep_the_listeners_namespace_and_no_target() -> None:
    w = watches.parse(_watch())
    assert w.storage_namespace == "" and w.inject is None


def test_storage_namespace_and_target_are_read() -> None:
    w = watches.parse(_watch(storage={"namespace": "tether-configuration"}, inject=INJECT))
    assert w.storage_namespace == "tether-configuration"
    assert w.inject is not None and w.inject.field == ("spec", "configuration")
    assert w.inject.resource.path("kcp-system") == (
        "/apis/example.kyma-project.io/v1alpha1/namespaces/kcp-system/samples"
    )


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"storage": {"namespace": "Not_A_Name"}}, "spec.storage.namespace"),
        ({"storage": "x"}, "spec.storage"),
        ({"inject": {**INJECT, "field": "status.x"}}, "spec.inject.field"),
        ({"inject": {**INJECT, "field": "spec"}}, "spec.inject.field"),
        ({"inject": {**INJECT, "field": "spec.a.b.c.d"}}, "spec.inject.field"),
        ({"inject": {**INJECT, "namespace": ""}}, "spec.inject.namespace"),
        ({"inject": {**INJECT, "resource": {"version": "v1"}}}, "spec.inject.resource.resource"),
        ({"inject": INJECT, "send": {"mode": "digest"}}, "spec.inject"),
    ],
)
def test_unusable_fields_are_named(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(watches.WatchError, match=field.replace(".", r"\.")):
        watches.parse(_watch(**spec))


def test_a_target_needs_configmaps() -> None:
    secret = {"group": "", "version": "v1", "resource": "secrets", "kind": "Secret"}
    with pytest.raises(watches.WatchError, match="only for a Watch of ConfigMaps"):
        watches.parse(
            {
                "metadata": {"name": "w"},
                "spec": {"resource": secret, "send": {"mode": "metadata"}, "inject": INJECT},
            }
        )
