"""A Watch of a custom resource checked against the runtime's discovery before it is
rendered there (issue 38: a Watch's kind must be its resource's).

The groups Kubernetes serves are checked by ``tether.wire.watchkinds``'s table when a Watch is
parsed (and by the CRD). For any other group the answer is the runtime's own: ``GET
/apis/GROUP/VERSION`` (an ``APIResourceList``, through the runtime's bounded gateway: a
deadline and a size cap) must serve the Watch's resource with the Watch's kind, namespaced
(``watchkinds.discovered_problem``). A Watch that contradicts it is not rendered into that
runtime; its status lists the runtime with the reason. A resource the runtime does not serve
yet (404, or absent from the list) is rendered: nothing is listed or read for it until its
CRD comes, and then every object's own kind is checked before it is sent
(``watches.foreign``), and the next discovery read here checks the Watch again.

Cost: one GET per group version a runtime's Watches name, kept per runtime
(``Discoveries``, the enroller's, dropped with the runtime) for ``max_age`` seconds (the enroller's
resync interval). A read that fails keeps the last answer; with none, the Watch is left out of that
runtime until one answers (never rendered unchecked).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any

from tether.base import logs
from tether.kube import gateway
from tether.wire import watches, watchkinds

NOT_SERVED: Mapping[str, Any] = {"resources": []}
MAX_RESOURCES = 256  # of one group version, kept per runtime


Cache = dict[str, tuple[float, Mapping[str, Any]]]  # group version -> (read at, resources)


class Discoveries:
    """Per runtime (by Kyma CR name): its discovery answers and the Watches they refused."""

    def __init__(self) -> None:
        self._cache: dict[str, Cache] = {}
        self._refused: dict[str, dict[str, str]] = {}

    def check(
        self,
        name: str,
        skr: gateway.Kube,
        ws: Sequence[watches.Watch],
        now: float,
        max_age: float,
        timeout: float,
        on_request: Callable[[], None] = lambda: None,
    ) -> tuple[watches.Watch, ...]:
        """The Watches to render into the runtime of Kyma CR ``name`` (``check``)."""
        kept, self._refused[name] = check(
            skr, ws, self._cache.setdefault(name, {}), now, max_age, timeout, on_request
        )
        return kept

    def refused(self, name: str) -> Mapping[str, str]:
        return self._refused.get(name, {})

    def forget(self, name: str) -> None:
        self._cache.pop(name, None)
        self._refused.pop(name, None)


def check(
    skr: gateway.Kube,
    ws: Sequence[watches.Watch],
    cache: MutableMapping[str, tuple[float, Mapping[str, Any]]],
    now: float,
    max_age: float,
    timeout: float,
    on_request: Callable[[], None] = lambda: None,
) -> tuple[tuple[watches.Watch, ...], dict[str, str]]:
    """The Watches to render into the runtime, and those left out with why (by name)."""
    kept: list[watches.Watch] = []
    refused: dict[str, str] = {}
    for w in ws:
        if w.target.group in watchkinds.BUILTIN:
            kept.append(w)
            continue
        doc, failure = _served(skr, w.target, cache, now, max_age, timeout, on_request)
        problem = failure if doc is None else watchkinds.discovered_problem(w.target, doc)
        if problem is None:
            kept.append(w)
        else:
            refused[w.name] = problem
    return tuple(kept), refused


def _served(
    skr: gateway.Kube,
    target: watches.Target,
    cache: MutableMapping[str, tuple[float, Mapping[str, Any]]],
    now: float,
    max_age: float,
    timeout: float,
    on_request: Callable[[], None],
) -> tuple[Mapping[str, Any] | None, str | None]:
    """The runtime's APIResourceList of the target's group version (cached), or why not."""
    gv = target.api_version
    held = cache.get(gv)
    if held is not None and now - held[0] < max_age:
        return held[1], None
    on_request()
    try:
        doc: Mapping[str, Any] = skr.request(
            "GET", f"/apis/{gv}", timeout=timeout, what=f"discovery {gv}"
        )
    except gateway.NotFound:
        doc = NOT_SERVED
    except gateway.GatewayError as e:
        if held is not None:
            return held[1], None
        return None, f"the runtime's discovery of {gv} did not answer: {logs.bounded(e, 200)}"
    kept = _trim(doc)
    cache[gv] = (now, kept)
    return kept, None


def _trim(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    """What is kept of an APIResourceList: each resource's name, kind and scope (at most
    ``MAX_RESOURCES``), so that a runtime's answer costs the enroller a few hundred bytes."""
    out = [
        {"name": r.get("name"), "kind": r.get("kind"), "namespaced": r.get("namespaced")}
        for r in doc.get("resources") or ()
        if isinstance(r, Mapping)
    ]
    return {"resources": out[:MAX_RESOURCES]}
