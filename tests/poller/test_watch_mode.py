"""The poller in Watch mode against the real planes: the runtime's Watch list (a
tether-watches ConfigMap) and the KCP's Watches agree, as the enroller makes them; one run
delivers only what each Watch covers, as v2 records stored under their Watch (a custom
resource's among them), reduced in the runtime; objects that left get tombstones; a Watch of
a kind the runtime does not serve is skipped while the others run; without the list the run
is the environment's v1 run, stored under the compat Watch."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from poller import metrics, run, scan, watchrun
from testing import controlplane, watchenv
from testing.listenerenv import COMPAT_WATCH, Env, ListenerProcess, Runtime
from testing.pollerenv import (
    PollerProcess,
    client_settings,
    poller_env,
    unique_selector,
    wait_until,
)
from tether.kube import apitypes, gateway
from tether.runtime import sender
from tether.wire import filters, watches, watchset, watchwire

GROUP = "poller-watch.tether-test.example.com"
WIDGETS = watchenv.widgets(GROUP)
GADGETS = {
    "group": GROUP,
    "version": "v1",
    "resource": "gadgets",
    "kind": "Gadget",
}  # never installed


@pytest.fixture
def watch_bodies(
    listener_env: Env, runtime: Callable[..., Runtime], namespace: str
) -> Iterator[tuple[Runtime, list[dict[str, Any]]]]:
    rt = runtime()
    only_me = {
        "runtimes": {"selector": {"matchLabels": {apitypes.RUNTIME_ID_LABEL: rt.id}}},
        "namespaces": [namespace],
    }
    cm = {"group": "", "version": "v1", "resource": "configmaps", "kind": "ConfigMap"}
    tag = uuid.uuid4().hex[:8]
    bodies = [
        watchenv.watch(
            f"conf-{tag}",
            cm,
            listener_env.namespace,
            selector={"matchLabels": {"conf": "yes"}},
            **only_me,
        ),
        watchenv.watch(
            f"meta-{tag}",
            cm,
            listener_env.namespace,
            send={"mode": "metadata"},
            selector={"matchLabels": {"meta": "yes"}},
            **only_me,
        ),
        watchenv.watch(f"widgets-{tag}", WIDGETS, listener_env.namespace, **only_me),
        watchenv.watch(f"a-gadgets-{tag}", GADGETS, listener_env.namespace, **only_me),
    ]
    yield rt, bodies
    for b in bodies:
        watchenv.delete(listener_env.api, listener_env.namespace, b["metadata"]["name"])


def test_watch_mode_delivers_per_watch_tombstones_what_left_and_skips_an_unserved_kind(
    skr_api: client.ApiClient,
    namespace: str,
    listener_env: Env,
    listener: ListenerProcess,
    watch_bodies: tuple[Runtime, list[dict[str, Any]]],
) -> None:
    rt, bodies = watch_bodies
    controlplane.install_crds(skr_api, watchenv.widget_crd(GROUP))
    in_force = tuple(
        sorted(
            (watches.parse(watchenv.apply(listener_env.api, b)) for b in bodies),
            key=lambda w: w.name,
        )
    )
    conf, meta, widgets, gadgets = (
        next(w for w in in_force if w.name.startswith(p))
        for p in ("conf-", "meta-", "widgets-", "a-gadgets-")
    )
    core, co = client.CoreV1Api(skr_api), client.CustomObjectsApi(skr_api)
    wire = core.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=watchwire.WIRE_CONFIGMAP),
            data={watchwire.WIRE_KEY: watchwire.to_wire(in_force)},
        ),
    )
    assert wire.metadata.name == watchwire.WIRE_CONFIGMAP
    labels, selector = unique_selector()
    for name, extra, value in (
        ("app", {"conf": "yes"}, "v1"),
        ("plain", {}, "not-asked-for"),
        ("m1", {"meta": "yes"}, "meta-only-value"),
    ):
        core.create_namespaced_config_map(
            namespace,
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name=name, labels={**labels, **extra}),
                data={"k": value},
            ),
        )
    co.create_namespaced_custom_object(
        GROUP,
        "v1",
        namespace,
        "widgets",
        {
            "apiVersion": f"{GROUP}/v1",
            "kind": "Widget",
            "metadata": {"name": "w1"},
            "spec": {"size": 3},
            "status": {"ready": True},
        },
    )

    m = metrics.Metrics()
    lc = sender.ListenerClient(client_settings(rt, listener.url))
    kube = gateway.Kube(skr_api)
    flt = filters.ConfigMapFilter.build(filters.DEFAULT_IGNORED_NAMESPACES, selector)
    lister = scan.Lister(kube, flt, page_size=2, timeout=30, on_request=m.apiserver_requests.inc)
    source = watchset.WatchSet(kube, namespace, ttl=0)
    runner = run.Runner(
        rt.id,
        run.RunSettings(batch_items=2),
        flt,
        lister,
        lc,
        m,
        identity=lister.identity,
        watches=watchrun.Watching(source, lister),
    )

    def known() -> bool:  # the listener reads the Watches every few seconds
        try:
            return all(lc.state_page(10, watch=w.name) is not None for w in in_force)
        except sender.ListenerError:
            return False

    try:
        wait_until(known, 30, "the listener holds the Watches in force")
        first = runner.run()
        assert first.outcome == "ok", first
        app = listener_env.stored_one(rt.id, namespace, "app", conf.name)
        assert app is not None and app["spec"]["data"] == {"k": "v1"}
        assert (
            app["spec"]["source"] == "poller"
            and app["metadata"]["labels"][watches.WATCH_LABEL] == conf.name
        )
        m1 = listener_env.stored_one(rt.id, namespace, "m1", meta.name)
        assert (
            m1 is not None and not m1["spec"].get("data") and m1["spec"]["labels"]["meta"] == "yes"
        )
        w1 = listener_env.stored_one(rt.id, namespace, "w1", widgets.name)
        assert w1 is not None and w1["spec"]["resource"] == {
            "group": GROUP,
            "version": "v1",
            "kind": "Widget",
        }
        assert json.loads(w1["spec"]["data"]["spec"]) == {"size": 3}
        everything = json.dumps(listener_env.stored(rt.id))
        assert "not-asked-for" not in everything and "meta-only-value" not in everything
        assert all(
            listener_env.stored_one(rt.id, namespace, "plain", w) is None
            for w in (conf.name, meta.name, COMPAT_WATCH)
        )
        assert first.sent == 3 and first.differences["missing"] == 3
        assert (
            m.registry.get_sample_value(
                "tether_poller_watches_skipped_total", {"reason": "unserved"}
            )
            == 1
        )
        assert gadgets.name < conf.name  # skipped first: the Watches after it still ran

        def summarised() -> bool:  # the listener pod's view holds what the first run stored
            docs = [lc.watch_summary(w.name) or {} for w in (conf, meta, widgets)]
            return all(sum(d.get("counts") or []) >= 1 for d in docs)

        wait_until(summarised, 30, "the Watches' summaries hold the records")
        in_sync = runner.run()
        assert in_sync.outcome == "ok" and in_sync.sent == 0, in_sync
        by_summary = m.registry.get_sample_value(
            "tether_poller_watch_passes_total", {"way": "summary"}
        )
        assert by_summary == 3, by_summary  # no digest read; the unserved kind's pass skipped

        core.patch_namespaced_config_map("app", namespace, {"metadata": {"labels": {"conf": "no"}}})
        co.delete_namespaced_custom_object(GROUP, "v1", namespace, "widgets", "w1")
        left = runner.run()
        assert left.outcome == "ok" and left.differences["deleted"] == 2, left
        for name, w in (("app", conf), ("w1", widgets)):
            tomb = listener_env.stored_one(rt.id, namespace, name, w.name)
            assert (
                tomb is not None
                and tomb["spec"]["deleted"] is True
                and tomb["spec"]["source"] == "poller"
            )
        assert (
            listener_env.stored_one(rt.id, namespace, "m1", meta.name)["spec"]["deleted"] is False
        )  # type: ignore[index]

        # without the Watch list: the environment's run, v1 records under the compat Watch
        core.delete_namespaced_config_map(watchwire.WIRE_CONFIGMAP, namespace)
        legacy = runner.run()
        assert legacy.outcome == "ok" and legacy.sent == 3, legacy
        plain = listener_env.stored_one(rt.id, namespace, "plain", COMPAT_WATCH)
        assert plain is not None and plain["spec"]["data"] == {"k": "not-asked-for"}
    finally:
        lc.close()


def test_under_its_own_rbac_a_watch_of_a_kind_it_may_not_read_is_skipped_as_forbidden(
    skr_api: client.ApiClient,
    namespace: str,
    listener_env: Env,
    listener: ListenerProcess,
    runtime: Callable[..., Runtime],
    least_privilege: Any,
) -> None:
    """manifests/skr/poller/rbac.yaml grants read on ConfigMaps only: a Watch of a custom
    resource nobody granted the poller is skipped (forbidden), the ConfigMap Watch runs."""
    rt = runtime()
    controlplane.install_crds(skr_api, watchenv.widget_crd(GROUP))
    only_me = {
        "runtimes": {"selector": {"matchLabels": {apitypes.RUNTIME_ID_LABEL: rt.id}}},
        "namespaces": [namespace],
    }
    tag = uuid.uuid4().hex[:8]
    bodies = [
        watchenv.watch(
            f"conf-{tag}",
            {"group": "", "version": "v1", "resource": "configmaps", "kind": "ConfigMap"},
            listener_env.namespace,
            **only_me,
        ),
        watchenv.watch(f"widgets-{tag}", WIDGETS, listener_env.namespace, **only_me),
    ]
    core, co = client.CoreV1Api(skr_api), client.CustomObjectsApi(skr_api)
    co.create_namespaced_custom_object(
        GROUP,
        "v1",
        namespace,
        "widgets",
        {
            "apiVersion": f"{GROUP}/v1",
            "kind": "Widget",
            "metadata": {"name": "w9"},
            "spec": {"size": 9},
        },
    )
    core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c9"), data={"k": "v"})
    )
    lc = sender.ListenerClient(client_settings(rt, listener.url))
    kube = gateway.from_kubeconfig(str(least_privilege))
    try:
        in_force = tuple(
            sorted(
                (watches.parse(watchenv.apply(listener_env.api, b)) for b in bodies),
                key=lambda w: w.name,
            )
        )
        core.create_namespaced_config_map(
            namespace,
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name=watchwire.WIRE_CONFIGMAP),
                data={watchwire.WIRE_KEY: watchwire.to_wire(in_force)},
            ),
        )
        m = metrics.Metrics()
        flt = filters.ConfigMapFilter.build(filters.DEFAULT_IGNORED_NAMESPACES, "")
        lister = scan.Lister(kube, flt, page_size=50, timeout=30)
        runner = run.Runner(
            rt.id,
            run.RunSettings(),
            flt,
            lister,
            lc,
            m,
            identity=lister.identity,
            watches=watchrun.Watching(watchset.WatchSet(kube, namespace, ttl=0), lister),
        )

        def known() -> bool:
            try:
                return all(lc.state_page(10, watch=w.name) is not None for w in in_force)
            except sender.ListenerError:
                return False

        wait_until(known, 30, "the listener holds the Watches in force")
        result = runner.run()
        assert result.outcome == "ok", result
        assert (
            m.registry.get_sample_value(
                "tether_poller_watches_skipped_total", {"reason": "forbidden"}
            )
            == 1
        )
        assert listener_env.stored_one(rt.id, namespace, "c9", f"conf-{tag}") is not None
        assert listener_env.stored_one(rt.id, namespace, "w9", f"widgets-{tag}") is None
    finally:
        lc.close()
        kube.close()
        for b in bodies:
            watchenv.delete(listener_env.api, listener_env.namespace, b["metadata"]["name"])


def test_tether_poller_reads_the_watch_list_its_setting_names_and_runs_per_watch(
    skr: controlplane.ControlPlane,
    skr_api: client.ApiClient,
    namespace: str,
    listener_env: Env,
    listener: ListenerProcess,
    runtime: Callable[..., Runtime],
    pollers: Callable[[str, dict[str, str]], PollerProcess],
) -> None:
    """The process as deployed (main's wiring): TETHER_WATCHES_CONFIGMAP names the list; a
    relabelled ConfigMap's record is stored, then tombstoned, by interval runs alone."""
    rt = runtime()
    only_me = {
        "runtimes": {"selector": {"matchLabels": {apitypes.RUNTIME_ID_LABEL: rt.id}}},
        "namespaces": [namespace],
    }
    name = f"conf-{uuid.uuid4().hex[:8]}"
    body = watchenv.watch(
        name,
        {"group": "", "version": "v1", "resource": "configmaps", "kind": "ConfigMap"},
        listener_env.namespace,
        selector={"matchLabels": {"conf": "yes"}},
        **only_me,
    )
    core = client.CoreV1Api(skr_api)
    try:
        w = watches.parse(watchenv.apply(listener_env.api, body))
        core.create_namespaced_config_map(
            namespace,
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name="listed"),
                data={watchwire.WIRE_KEY: watchwire.to_wire((w,))},
            ),
        )
        core.create_namespaced_config_map(
            namespace,
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name="app", labels={"conf": "yes"}), data={"k": "v"}
            ),
        )
        p = pollers(
            "poller-watch",
            poller_env(
                rt,
                listener.url,
                skr,
                "",
                namespace,
                TETHER_WATCHES_CONFIGMAP=f"{namespace}/listed",
                TETHER_POLLER_INTERVAL_SECONDS="0.5",
                TETHER_POLLER_JITTER_SECONDS="0",
            ),
        )
        stored = wait_until(
            lambda: listener_env.stored_one(rt.id, namespace, "app", name),
            60,
            "the record under its Watch",
        )
        assert stored["metadata"]["labels"][watches.WATCH_LABEL] == name
        assert stored["spec"]["source"] == "poller" and stored["spec"]["data"] == {"k": "v"}
        assert p.metric("tether_poller_watches") == 1
        core.patch_namespaced_config_map("app", namespace, {"metadata": {"labels": {"conf": "no"}}})
        wait_until(
            lambda: (
                (listener_env.stored_one(rt.id, namespace, "app", name) or {})
                .get("spec", {})
                .get("deleted")
                is True
            ),
            60,
            "the tombstone under its Watch",
        )
        assert (
            listener_env.stored_one(rt.id, namespace, "listed", COMPAT_WATCH) is None
        )  # no v1 run
    finally:
        watchenv.delete(listener_env.api, listener_env.namespace, name)
