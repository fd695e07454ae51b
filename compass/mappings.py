"""KCP I/O: list Kyma CRs and mappings; create, label, patch status of, delete and
release mappings. Thin: every body is built by pure code elsewhere."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from compass import decide, model


class Kcp:
    def __init__(self, api: client.ApiClient, namespace: str, *, page_size: int = 500) -> None:
        self._co = client.CustomObjectsApi(api)
        self.namespace = namespace
        self._page = page_size

    def _list(self, group: str, version: str, plural: str) -> Iterator[dict[str, Any]]:
        cont: str | None = None
        while True:
            kwargs: dict[str, Any] = {"limit": self._page}
            if cont:
                kwargs["_continue"] = cont
            page: Any = self._co.list_namespaced_custom_object(group, version, self.namespace, plural,
                                                          **kwargs)
            yield from page.get("items") or []
            cont = (page.get("metadata") or {}).get("continue")
            if not cont:
                return

    def kymas(self) -> list[model.Kyma]:
        return [model.kyma_from(o) for o in
                self._list(model.KYMA_GROUP, model.KYMA_VERSION, model.KYMA_PLURAL)]

    def mappings(self) -> list[model.MappingView]:
        return [model.mapping_from(o) for o in
                self._list(model.MAPPING_GROUP, model.MAPPING_VERSION, model.MAPPING_PLURAL)]

    def get_mapping(self, name: str) -> model.MappingView | None:
        try:
            obj: Any = self._co.get_namespaced_custom_object(
                model.MAPPING_GROUP, model.MAPPING_VERSION, self.namespace, model.MAPPING_PLURAL, name)
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return model.mapping_from(obj)

    def create_mapping(self, kyma: model.Kyma, *, registering: bool) -> model.MappingView:
        body = {
            "apiVersion": f"{model.MAPPING_GROUP}/{model.MAPPING_VERSION}",
            "kind": model.MAPPING_KIND,
            "metadata": {
                "name": kyma.name, "namespace": self.namespace,
                "labels": decide.mapping_labels(kyma),
                "annotations": {model.REGISTERING: "true"} if registering else {},
                "finalizers": [model.FINALIZER],
            },
            "spec": {},
        }
        obj: Any = self._co.create_namespaced_custom_object(
            model.MAPPING_GROUP, model.MAPPING_VERSION, self.namespace, model.MAPPING_PLURAL, body)
        return model.mapping_from(obj)

    def patch_meta(self, name: str, *, labels: dict[str, str | None] | None = None,
                   annotations: dict[str, str | None] | None = None) -> model.MappingView:
        meta: dict[str, Any] = {}
        if labels is not None:
            meta["labels"] = labels
        if annotations is not None:
            meta["annotations"] = annotations
        obj: Any = self._co.patch_namespaced_custom_object(
            model.MAPPING_GROUP, model.MAPPING_VERSION, self.namespace, model.MAPPING_PLURAL, name,
            {"metadata": meta})
        return model.mapping_from(obj)

    def patch_status(self, name: str, status: dict[str, Any]) -> model.MappingView:
        obj: Any = self._co.patch_namespaced_custom_object_status(
            model.MAPPING_GROUP, model.MAPPING_VERSION, self.namespace, model.MAPPING_PLURAL, name,
            {"status": status})
        return model.mapping_from(obj)

    def delete_mapping(self, name: str) -> model.MappingView | None:
        try:
            self._co.delete_namespaced_custom_object(
                model.MAPPING_GROUP, model.MAPPING_VERSION, self.namespace, model.MAPPING_PLURAL, name)
        except ApiException as e:
            if e.status != 404:
                raise
        return self.get_mapping(name)

    def remove_finalizer(self, m: model.MappingView) -> None:
        rest = [f for f in m.finalizers if f != model.FINALIZER]
        try:
            self._co.patch_namespaced_custom_object(
                model.MAPPING_GROUP, model.MAPPING_VERSION, self.namespace, model.MAPPING_PLURAL,
                m.name, {"metadata": {"finalizers": rest or None}})
        except ApiException as e:
            if e.status != 404:
                raise
