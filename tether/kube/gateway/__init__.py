"""The Kubernetes gateway: the only product code that imports ``kubernetes`` (and urllib3).

    from tether.kube import gateway
    k = gateway.from_kubeconfig(path)                 # or from_kubeconfig_bytes(content)
    try:
        cm = k.get(gateway.CONFIGMAPS, "team-a", "app-config")
    except gateway.NotFound: ...
    except gateway.Unavailable: ...                    # retry later (Forbidden: RBAC)

    for event in k.watch(RECORDS, ns, resource_version=rv, timeout_seconds=300):
        ...                                           # streamed; gateway.Gone on 410

``kube`` holds the calls (``Kube``, resource types), ``stream`` reads a watch event by event
(bounded), ``connect`` builds gateways from kubeconfigs, ``errors`` the error tree. Results
are plain dicts, as served.
"""

from tether.kube.gateway.bounded import Limits
from tether.kube.gateway.connect import (
    KubeConfigError,
    from_kubeconfig,
    from_kubeconfig_bytes,
    from_runtime_kubeconfig,
)
from tether.kube.gateway.errors import (
    AddressRefused,
    Bounded,
    Conflict,
    DeadlineExceeded,
    Forbidden,
    GatewayError,
    Gone,
    NotFound,
    Redirected,
    Rejected,
    TooLarge,
    Unavailable,
)
from tether.kube.gateway.kube import (
    CONFIGMAPS,
    LEASES,
    NAMESPACES,
    SECRETS,
    Kube,
    Resource,
    identify,
)
from tether.kube.gateway.kubeconfig import Refused as KubeconfigRefused

__all__ = [
    "AddressRefused",
    "Bounded",
    "DeadlineExceeded",
    "KubeconfigRefused",
    "Limits",
    "Redirected",
    "TooLarge",
    "from_runtime_kubeconfig",
    "CONFIGMAPS",
    "LEASES",
    "NAMESPACES",
    "SECRETS",
    "Conflict",
    "Forbidden",
    "GatewayError",
    "Gone",
    "Kube",
    "KubeConfigError",
    "NotFound",
    "Rejected",
    "Resource",
    "Unavailable",
    "from_kubeconfig",
    "from_kubeconfig_bytes",
    "identify",
]
