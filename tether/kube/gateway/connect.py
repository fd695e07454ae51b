"""Building gateways: from a kubeconfig file, kubeconfig content (a runtime's kubeconfig
Secret) or the in-cluster service account. Called in entry points; nothing is cached at
import time."""

from __future__ import annotations

import os
import ssl
import threading

from kubernetes import client, config

from tether.kube.gateway import bounded, kube, kubeconfig

# The kubernetes client writes certificate data of a kubeconfig to shared temporary files and
# hands the file name to other loads of the same content before the write has finished;
# concurrent loads then fail TLS with "PEM lib". Every load here is serialized.
_LOAD_LOCK = threading.Lock()


KubeConfigError = kubeconfig.KubeConfigError


def _gateway(cfg: client.Configuration, pool_size: int | None, timeout: float) -> kube.Kube:
    if pool_size is not None:
        cfg.connection_pool_maxsize = pool_size
    return kube.Kube(client.ApiClient(configuration=cfg), timeout=timeout)


def from_kubeconfig(
    kubeconfig: str | None = None,
    *,
    context: str | None = None,
    pool_size: int | None = None,
    timeout: float = kube.DEFAULT_TIMEOUT,
) -> kube.Kube:
    """A gateway from a kubeconfig file, else from the in-cluster service account.

    ``kubeconfig`` None means: $KUBECONFIG if set, else in-cluster. ``pool_size``: the most
    connections kept open to the API server (for as many threads calling at once)."""
    path = kubeconfig or os.environ.get("KUBECONFIG")
    cfg = client.Configuration()
    try:
        if path:
            with _LOAD_LOCK:
                config.load_kube_config(config_file=path, context=context, client_configuration=cfg)
        else:
            config.load_incluster_config(client_configuration=cfg)
    except config.ConfigException as e:
        where = path or "in-cluster service account"
        raise KubeConfigError(f"cannot load Kubernetes configuration from {where}: {e}") from None
    except (TypeError, KeyError, AttributeError) as e:  # valid YAML, not a kubeconfig
        raise KubeConfigError(
            f"cannot load Kubernetes configuration from {path}: not a kubeconfig "
            f"({type(e).__name__})"
        ) from None
    return _gateway(cfg, pool_size, timeout)


def from_runtime_kubeconfig(
    data: bytes | str,
    limits: bounded.Limits | None = None,
    *,
    timeout: float = kube.DEFAULT_TIMEOUT,
) -> kube.Kube:
    """A gateway to a runtime's API server from its kubeconfig (tenant input): parsed by the
    allow-list of ``kubeconfig.parse`` (``kubeconfig.Refused`` names a refused field), every
    call bounded by ``limits`` and ``timeout`` (wall clock, per call)."""
    limits = limits or bounded.Limits()
    conn = kubeconfig.parse(data, denied=limits.denied)
    try:
        pool = bounded.pool(conn, limits)
    except (ssl.SSLError, ValueError) as e:
        raise KubeConfigError(f"kubeconfig certificates do not load ({type(e).__name__})") from None
    return kube.Kube(
        timeout=timeout, runtime=kube.RuntimeTransport(pool, conn.server, conn.token, limits)
    )


def from_kubeconfig_bytes(
    data: bytes | str, *, pool_size: int | None = None, timeout: float = kube.DEFAULT_TIMEOUT
) -> kube.Kube:
    """A gateway from kubeconfig content the operator wrote (never a runtime's: that is
    ``from_runtime_kubeconfig``)."""
    loaded = kubeconfig.load(data)
    cfg = client.Configuration()
    try:
        with _LOAD_LOCK:
            config.load_kube_config_from_dict(loaded, client_configuration=cfg)
    except (config.ConfigException, KeyError, TypeError, AttributeError) as e:
        raise KubeConfigError(f"kubeconfig content is unusable: {type(e).__name__}") from None
    return _gateway(cfg, pool_size, timeout)
