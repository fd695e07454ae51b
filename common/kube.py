"""Kubernetes client factory: the one place that builds ``kubernetes`` API clients.

Clients are built in entry points and passed down; nothing is cached at import time.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import yaml
from kubernetes import client, config

# The kubernetes client writes certificate data of a kubeconfig to shared temporary files and
# hands the file name to other loads of the same content before the write has finished;
# concurrent loads then fail TLS with "PEM lib". Every load here is serialized.
_LOAD_LOCK = threading.Lock()


class KubeConfigError(ValueError):
    """A kubeconfig could not be loaded; the message says which and why."""


def api_client(kubeconfig: str | None = None, *, context: str | None = None) -> client.ApiClient:
    """An ApiClient from a kubeconfig file, else from the in-cluster service account.

    ``kubeconfig`` None means: $KUBECONFIG if set, else in-cluster."""
    path = kubeconfig or os.environ.get("KUBECONFIG")
    try:
        if path:
            with _LOAD_LOCK:
                    made: client.ApiClient = config.new_client_from_config(config_file=path, context=context)
            return made
        cfg = client.Configuration()
        config.load_incluster_config(client_configuration=cfg)
        return client.ApiClient(configuration=cfg)
    except config.ConfigException as e:
        where = path or "in-cluster service account"
        raise KubeConfigError(f"cannot load Kubernetes configuration from {where}: {e}") from None
    except (TypeError, KeyError, AttributeError) as e:  # valid YAML, not a kubeconfig
        raise KubeConfigError(
            f"cannot load Kubernetes configuration from {path}: not a kubeconfig "
            f"({type(e).__name__})") from None


def api_client_from_kubeconfig_bytes(data: bytes | str) -> client.ApiClient:
    """An ApiClient from kubeconfig content (e.g. a runtime's kubeconfig Secret)."""
    try:
        loaded: Any = yaml.safe_load(data)
    except yaml.YAMLError:
        raise KubeConfigError("kubeconfig content is not valid YAML") from None
    if not isinstance(loaded, dict):
        raise KubeConfigError("kubeconfig content is not a mapping")
    try:
        with _LOAD_LOCK:
            made: client.ApiClient = config.new_client_from_config_dict(loaded)
        return made
    except (config.ConfigException, KeyError, TypeError) as e:
        raise KubeConfigError(f"kubeconfig content is unusable: {type(e).__name__}") from None
