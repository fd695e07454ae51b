"""The janitor's calls to the KCP API (the I/O of ``listener.janitor.sweep``)."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any, NamedTuple

from listener.fleet import heartbeat, statesummary
from listener.storage import records, rules
from tether.base import times
from tether.kube import apitypes, gateway, kyma
from tether.wire import watchuse

PAGE = 500
OWN_RECORDS = f"{apitypes.MANAGED_BY_LABEL}={records.MANAGED_BY}"


class LeaseFacts(NamedTuple):
    name: str
    runtime_id: str
    orphaned_since: str | None


class Kcp:
    """The janitor's calls to the KCP API (what its Roles and ClusterRole allow:
    manifests/kcp/janitor/rbac.yaml): records in every namespace, summaries and Kyma CRs in
    ``namespace``, the heartbeat Leases in ``heartbeat_namespace`` (by default the same)."""

    def __init__(
        self,
        kcp: gateway.Kube,
        namespace: str,
        timeout: float,
        heartbeat_namespace: str | None = None,
    ) -> None:
        self._kcp = kcp
        self.namespace = namespace
        self.heartbeat_namespace = heartbeat_namespace or namespace
        self._timeout = timeout

    def _metadata_list(
        self,
        res: gateway.Resource,
        selector: str,
        everywhere: bool = False,
    ) -> Iterator[dict[str, Any]]:
        for obj in self._kcp.list_items(
            res,
            None if everywhere else self.namespace,
            label_selector=selector,
            page_size=PAGE,
            metadata_only=True,
            timeout=self._timeout,
        ):
            yield obj.get("metadata") or {}

    def record_metadata(self) -> Iterator[dict[str, Any]]:
        """Metadata of every record a listener wrote, in every namespace."""
        return self._metadata_list(apitypes.RUNTIME_CONFIGMAPS, OWN_RECORDS, True)

    def kyma_runtime_ids(self) -> set[str]:
        """The runtime IDs that have a Kyma CR (label ``kyma-project.io/runtime-id``)."""
        out: set[str] = set()
        for meta in self._metadata_list(apitypes.KYMAS, apitypes.RUNTIME_ID_LABEL):
            rid = (meta.get("labels") or {}).get(apitypes.RUNTIME_ID_LABEL)
            if isinstance(rid, str):
                out.add(rid)
        return out

    def has_kyma(self, runtime_id: str) -> bool:
        return bool(
            kyma.list_by_runtime_id(self._kcp, self.namespace, runtime_id, timeout=self._timeout)
        )

    def watch_homes(self) -> dict[str, str] | None:
        """The Watches' names and where each stores its records (``spec.storage.namespace``,
        else ``namespace``); None without the Watch CRD (no Watch was deleted)."""
        out: dict[str, str] = {}
        try:
            for obj in self._kcp.list_items(
                apitypes.WATCHES, self.namespace, page_size=PAGE, timeout=self._timeout
            ):
                name = str((obj.get("metadata") or {}).get("name") or "")
                try:
                    out[name] = watchuse.storage_namespace(obj.get("spec") or {}) or self.namespace
                except watchuse.UseError:
                    out[name] = self.namespace
        except gateway.NotFound:
            return None
        return out

    def heartbeat_leases(self) -> dict[str, LeaseFacts]:
        out: dict[str, LeaseFacts] = {}
        for lease in self._kcp.list_items(
            gateway.LEASES,
            self.heartbeat_namespace,
            label_selector=f"{apitypes.HEARTBEAT_LABEL}=true",
            page_size=PAGE,
            timeout=self._timeout,
        ):
            meta = lease.get("metadata") or {}
            rid = (meta.get("labels") or {}).get(apitypes.RUNTIME_ID_LABEL) or (
                (lease.get("spec") or {}).get("holderIdentity")
            )
            if rid:
                out[rid] = LeaseFacts(
                    str(meta.get("name") or ""),
                    rid,
                    (meta.get("annotations") or {}).get(rules.ORPHANED_SINCE),
                )
        return out

    def delete_tombstone(self, t: rules.Tombstone) -> bool:
        """Delete one tombstone if it is unchanged since listed; False when it changed or
        is gone already."""
        try:
            self._kcp.delete(
                apitypes.RUNTIME_CONFIGMAPS,
                t.namespace or self.namespace,
                t.name,
                preconditions={"resourceVersion": t.resource_version, "uid": t.uid},
                timeout=self._timeout,
            )
        except (gateway.NotFound, gateway.Conflict):
            return False
        return True

    def delete_runtime_records(self, runtime_id: str, namespaces: set[str]) -> int | None:
        """Delete every record of a runtime in ``namespaces`` (where they were listed; the
        API deletes a collection in one namespace only); how many when the API says."""
        total: int | None = 0
        for ns in sorted(namespaces or {self.namespace}):
            resp = self._kcp.delete_collection(
                apitypes.RUNTIME_CONFIGMAPS,
                ns,
                label_selector=f"{apitypes.RUNTIME_ID_LABEL}={runtime_id},{OWN_RECORDS}",
                timeout=self._timeout,
            )
            items = resp.get("items")
            total = total + len(items) if isinstance(items, list) and total is not None else None
        return total

    def delivery_runtime_ids(self) -> set[str]:
        """The runtimes that have a ``RuntimeDelivery`` the listener wrote."""
        out: set[str] = set()
        for meta in self._metadata_list(apitypes.RUNTIME_DELIVERIES, OWN_RECORDS):
            rid = (meta.get("labels") or {}).get(apitypes.RUNTIME_ID_LABEL)
            if isinstance(rid, str):
                out.add(rid)
        return out

    def _delete(self, res: gateway.Resource, namespace: str, name: str) -> bool:
        """Delete one object; False when there is none."""
        try:
            self._kcp.delete(res, namespace, name, timeout=self._timeout)
        except gateway.NotFound:
            return False
        return True

    def delete_delivery(self, runtime_id: str) -> bool:
        """Delete the runtime's ``RuntimeDelivery``; False when there is none."""
        return self._delete(
            apitypes.RUNTIME_DELIVERIES, self.namespace, heartbeat.lease_name(runtime_id)
        )

    def delete_summary(self, runtime_id: str) -> bool:
        """Delete the runtime's ``RuntimeStateSummary``; False when there is none."""
        return self._delete(
            apitypes.RUNTIME_STATE_SUMMARIES, self.namespace, statesummary.name_of(runtime_id)
        )

    def has_records(self, runtime_id: str, namespaces: set[str]) -> bool:
        """Whether the runtime still has records in one of ``namespaces``."""
        for ns in sorted(namespaces or {self.namespace}):
            doc = self._kcp.list(
                apitypes.RUNTIME_CONFIGMAPS,
                ns,
                limit=1,
                metadata_only=True,
                label_selector=f"{apitypes.RUNTIME_ID_LABEL}={runtime_id},{OWN_RECORDS}",
                timeout=self._timeout,
            )
            if doc.get("items"):
                return True
        return False

    def mark(self, runtime_id: str, lease: LeaseFacts | None, since: datetime.datetime) -> None:
        value = times.format_time(since)
        if lease is not None:
            self._kcp.patch(
                gateway.LEASES,
                self.heartbeat_namespace,
                lease.name,
                {"metadata": {"annotations": {rules.ORPHANED_SINCE: value}}},
                strategic=True,
                timeout=self._timeout,
            )
            return
        body = {  # records without a Lease: the mark needs a durable home
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": heartbeat.lease_name(runtime_id),
                "namespace": self.heartbeat_namespace,
                "labels": {
                    apitypes.HEARTBEAT_LABEL: "true",
                    apitypes.RUNTIME_ID_LABEL: runtime_id,
                    apitypes.MANAGED_BY_LABEL: records.MANAGED_BY,
                },
                "annotations": {rules.ORPHANED_SINCE: value},
            },
            "spec": {"holderIdentity": runtime_id},
        }
        try:
            self._kcp.create(gateway.LEASES, self.heartbeat_namespace, body, timeout=self._timeout)
        except gateway.Conflict:  # the listener created it just now: marked next run
            pass

    def unmark(self, lease: LeaseFacts) -> None:
        self._kcp.patch(
            gateway.LEASES,
            self.heartbeat_namespace,
            lease.name,
            {"metadata": {"annotations": {rules.ORPHANED_SINCE: None}}},
            strategic=True,
            timeout=self._timeout,
        )

    def delete_lease(self, runtime_id: str) -> bool:
        """Delete the runtime's heartbeat Lease; False when there is none."""
        return self._delete(
            gateway.LEASES, self.heartbeat_namespace, heartbeat.lease_name(runtime_id)
        )
