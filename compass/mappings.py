"""KCP I/O: list Kyma CRs and mappings; create, label, patch status of, delete and
release mappings. Thin: every body is built by pure code elsewhere."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from compass import decide, model
from tether.kube import apitypes, gateway


class Kcp:
    """Raises ``gateway.GatewayError`` (e.g. ``gateway.Conflict``) when the KCP API fails."""

    def __init__(self, kcp: gateway.Kube, namespace: str, *, page_size: int = 500) -> None:
        self._kcp = kcp
        self.namespace = namespace
        self._page = page_size

    def _list(self, res: gateway.Resource) -> Iterator[dict[str, Any]]:
        return self._kcp.list_items(res, self.namespace, page_size=self._page)

    def kymas(self) -> list[model.Kyma]:
        return [model.kyma_from(o) for o in self._list(apitypes.KYMAS)]

    def mappings(self) -> list[model.MappingView]:
        return [model.mapping_from(o) for o in self._list(apitypes.COMPASS_MAPPINGS)]

    def get_mapping(self, name: str) -> model.MappingView | None:
        obj = self._kcp.get_or_none(apitypes.COMPASS_MAPPINGS, self.namespace, name)
        return None if obj is None else model.mapping_from(obj)

    def create_mapping(self, kyma: model.Kyma, *, registering: bool) -> model.MappingView:
        body = {
            "apiVersion": f"{apitypes.COMPASS_MAPPINGS.group}/{apitypes.COMPASS_MAPPINGS.version}",
            "kind": apitypes.COMPASS_MAPPING_KIND,
            "metadata": {
                "name": kyma.name,
                "namespace": self.namespace,
                "labels": decide.mapping_labels(kyma),
                "annotations": {model.REGISTERING: "true"} if registering else {},
                "finalizers": [model.FINALIZER],
            },
            "spec": {},
        }
        return model.mapping_from(self._kcp.create(apitypes.COMPASS_MAPPINGS, self.namespace, body))

    def patch_meta(
        self,
        name: str,
        *,
        labels: dict[str, str | None] | None = None,
        annotations: dict[str, str | None] | None = None,
    ) -> model.MappingView:
        meta: dict[str, Any] = {}
        if labels is not None:
            meta["labels"] = labels
        if annotations is not None:
            meta["annotations"] = annotations
        return model.mapping_from(
            self._kcp.patch(apitypes.COMPASS_MAPPINGS, self.namespace, name, {"metadata": meta})
        )

    def patch_status(self, name: str, status: dict[str, Any]) -> model.MappingView:
        return model.mapping_from(
            self._kcp.patch(
                apitypes.COMPASS_MAPPINGS,
                self.namespace,
                name,
                {"status": status},
                subresource="status",
            )
        )

    def delete_mapping(self, name: str) -> model.MappingView | None:
        try:
            self._kcp.delete(apitypes.COMPASS_MAPPINGS, self.namespace, name)
        except gateway.NotFound:
            pass
        return self.get_mapping(name)

    def remove_finalizer(self, m: model.MappingView) -> None:
        rest = [f for f in m.finalizers if f != model.FINALIZER]
        try:
            self._kcp.patch(
                apitypes.COMPASS_MAPPINGS,
                self.namespace,
                m.name,
                {"metadata": {"finalizers": rest or None}},
            )
        except gateway.NotFound:
            pass
