"""The history check of the fault suite: the KCP's records of a runtime never go back.

``History`` lists the KCP's records of one runtime (one SKR namespace) every ``interval``
seconds in a thread while a fault test runs, and keeps, per key, the highest version it
has seen (``tether.wire.changes.Version``: epoch, resourceVersion, observedAt, deleted). Every
later sample of the key is compared with it by the listener's own ordering rule
(``tether.wire.changes.compare``): a sample that rule calls ``stale`` (an older
resourceVersion or epoch, a tombstone back to the live object it deleted) is a
regression. A key that vanishes (a pruned tombstone) is no regression, but its highest
version is kept: it may not come back older.

A list that fails (the KCP apiserver is down: the point of some faults) is counted as a
missed sample, not an error. ``stop()`` fails the test with every regression seen.

    hist = History(env.api, env.namespace, runtime_id, skr_namespace).start()
    ...  # the fault
    hist.stop()  # AssertionError if any key went back; hist.samples, hist.missed
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from kubernetes import client

from tether.kube import apitypes
from tether.wire import changes

Key = tuple[str, str]  # (namespace, name) in the runtime


def versions(items: Iterable[Mapping[str, Any]], namespace: str) -> dict[Key, changes.Version]:
    """The version of every record of ``namespace`` among stored RuntimeConfigMaps."""
    out: dict[Key, changes.Version] = {}
    for obj in items:
        spec = obj.get("spec") or {}
        if spec.get("namespace") != namespace:
            continue
        out[(str(spec["namespace"]), str(spec.get("name", "")))] = changes.version_of(spec)
    return out


def regressions(
    seen: dict[Key, changes.Version],
    sample: Mapping[Key, changes.Version],
) -> list[str]:
    """The keys of ``sample`` older than the highest version ``seen`` of them (pure);
    ``seen`` is updated in place with every newer version."""
    out = []
    for key, version in sample.items():
        before = seen.get(key)
        verdict = changes.compare(before, version)
        if verdict == "stale" and before is not None:
            out.append(f"{key[1]}: {_show(before)} -> {_show(version)}")
        elif verdict == "newer":
            seen[key] = version
    return out


def _show(v: changes.Version) -> str:
    state = "tombstone" if v.deleted else "live"
    return f"{state} rv {v.resource_version} epoch {v.epoch} at {v.observed_at}"


class History:
    """Samples a runtime's records in the KCP in a thread (see the module)."""

    def __init__(
        self,
        api: client.ApiClient,
        kcp_namespace: str,
        runtime_id: str,
        namespace: str,
        interval: float = 0.5,
    ) -> None:
        config = copy.copy(api.configuration)
        config.retries = False  # a failed list is a missed sample, not three retries logged
        self.api, self.kcp_namespace = client.ApiClient(config), kcp_namespace
        self.runtime_id, self.namespace, self.interval = runtime_id, namespace, interval
        self.seen: dict[Key, changes.Version] = {}
        self.found: list[str] = []  # every regression, in order
        self.samples = 0  # lists that answered
        self.missed = 0  # lists that failed (the KCP apiserver down)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.crashed: BaseException | None = None

    def start(self) -> History:
        self._thread = threading.Thread(target=self._run, name="history", daemon=True)
        self._thread.start()
        return self

    def sample(self) -> None:
        """One sample: list, compare, remember (also callable without the thread)."""
        try:
            resp: Any = client.CustomObjectsApi(self.api).list_namespaced_custom_object(
                apitypes.RUNTIME_CONFIGMAPS.group,
                apitypes.RUNTIME_CONFIGMAPS.version,
                self.kcp_namespace,
                apitypes.RUNTIME_CONFIGMAPS.plural,
                label_selector=f"{apitypes.RUNTIME_ID_LABEL}={self.runtime_id}",
                _request_timeout=(2, 10),
            )
        except Exception:  # noqa: BLE001 - the KCP apiserver down or restarting: no sample
            self.missed += 1
            return
        self.samples += 1
        self.found += regressions(self.seen, versions(resp["items"], self.namespace))

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                began = time.monotonic()
                self.sample()
                self._stop.wait(max(0.0, self.interval - (time.monotonic() - began)))
        except BaseException as e:  # noqa: BLE001 - reported by stop()
            self.crashed = e

    def stop(self, min_samples: int = 2) -> str:
        """Stops sampling (after one last sample); fails on any regression, on fewer than
        ``min_samples`` answered samples (a check that saw nothing asserts nothing).
        Returns a summary for the report."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
            assert not self._thread.is_alive(), "the history sampler did not stop"
        if self.crashed is not None:
            raise AssertionError("the history sampler crashed") from self.crashed
        self.sample()
        self.api.close()
        assert not self.found, (
            f"{len(self.found)} records of the KCP went back to an older state: {self.found[:10]}"
        )
        assert self.samples >= min_samples, (
            f"the history check sampled the KCP {self.samples} times ({self.missed} failed)"
        )
        assert self.seen, "the history check never saw a record"
        return self.summary()

    def summary(self) -> str:
        return (
            f"{self.samples} samples ({self.missed} missed), {len(self.seen)} keys, "
            f"{len(self.found)} went back"
        )
