"""The Kubernetes API types Tether uses: one place for each group, version, kind and plural.

Like kubebuilder's ``groupversion_info.go``: every product module takes a resource type, its
kind and apiVersion, and the label and annotation keys shared by several parts from here.

    from tether.kube import apitypes
    kcp.list(apitypes.KYMAS, "kcp-system", label_selector=f"{apitypes.RUNTIME_ID_LABEL}=4a1f")

Pure data (no I/O, no Kubernetes client): ``Resource`` is what the gateway
(``tether.kube.gateway``) turns into request paths, so the decision modules may import it too.
A test (tests/tether/test_apitypes.py) fails when a product module writes one of these
groups or plurals itself.
"""

from __future__ import annotations

import urllib.parse
from typing import NamedTuple


class Resource(NamedTuple):
    """A resource type: ``group`` "" for the core API."""

    group: str
    version: str
    plural: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        """``group/version`` (``version`` alone for the core API), as in an object's apiVersion."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """The URL path; ``namespace`` None for a cluster-scoped type or across all namespaces."""
        out = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace is not None and self.namespaced:
            out += f"/namespaces/{_q(namespace)}"
        out += f"/{self.plural}"
        if name is not None:
            out += f"/{_q(name)}"
        if subresource:
            out += f"/{subresource}"
        return out


def _q(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")


def watched(group: str, version: str, plural: str) -> Resource:
    """The resource type a Watch names (``tether.wire.watches.Target``): any namespaced kind,
    built-in or custom, that the runtime's senders read (the one place it is built)."""
    return Resource(group, version, plural)


# Groups ---------------------------------------------------------------------------------
KYMA_GROUP = "operator.kyma-project.io"  # lifecycle-manager's (and compass-manager's)
TETHER_GROUP = "tether.kyma-project.io"  # Tether's own CRDs (manifests/kcp/crds/)

# The Kyma CR (lifecycle-manager): one per runtime; Tether reads it, the enroller and compass
# put their finalizers on it ----------------------------------------------------------------
KYMAS = Resource(KYMA_GROUP, "v1beta2", "kymas")
KYMA_KIND = "Kyma"

# CompassMapping: Tether's own record of a runtime's Compass registration, written by compass
# (not compass-manager's CompassManagerMapping, which Tether leaves alone; docs/compass.md)
COMPASS_MAPPINGS = Resource(TETHER_GROUP, "v1alpha1", "compassmappings")
COMPASS_MAPPING_KIND = "CompassMapping"
# compass-manager's own CompassManagerMapping: read only, and only with the opt-in overlay
# manifests/kcp/compass/compat-compass-manager (compass.legacy); Tether never writes it
COMPASS_MANAGER_LEGACY_MAPPINGS = Resource(KYMA_GROUP, "v1beta1", "compassmanagermappings")

# Tether's CRDs ----------------------------------------------------------------------------
RUNTIME_CONFIGMAPS = Resource(TETHER_GROUP, "v1", "runtimeconfigmaps")  # the listener's records
RUNTIME_CONFIGMAP_KIND = "RuntimeConfigMap"
RUNTIME_DELIVERIES = Resource(TETHER_GROUP, "v1alpha1", "runtimedeliveries")
RUNTIME_DELIVERY_KIND = "RuntimeDelivery"
RUNTIME_STATE_SUMMARIES = Resource(TETHER_GROUP, "v1alpha1", "runtimestatesummaries")
RUNTIME_STATE_SUMMARY_KIND = "RuntimeStateSummary"
RUNTIME_ENROLLMENTS = Resource(TETHER_GROUP, "v1alpha1", "runtimeenrollments")
# what consumers ask for (tether.wire.watches)
WATCHES = Resource(TETHER_GROUP, "v1alpha1", "watches")
RUNTIME_ENROLLMENT_KIND = "RuntimeEnrollment"
ADMIN_PAGES = "adminpages"  # no CRD: the resource the admin pages' access reviews name

# Built-in types ---------------------------------------------------------------------------
CONFIGMAPS = Resource("", "v1", "configmaps")
SECRETS = Resource("", "v1", "secrets")
NAMESPACES = Resource("", "v1", "namespaces", namespaced=False)
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts")
SERVICES = Resource("", "v1", "services")
EVENTS = Resource("", "v1", "events")
LEASES = Resource("coordination.k8s.io", "v1", "leases")
DEPLOYMENTS = Resource("apps", "v1", "deployments")
ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles")
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings")
CLUSTER_ROLES = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", namespaced=False)
CLUSTER_ROLE_BINDINGS = Resource(
    "rbac.authorization.k8s.io", "v1", "clusterrolebindings", namespaced=False
)
POD_DISRUPTION_BUDGETS = Resource("policy", "v1", "poddisruptionbudgets")
NETWORK_POLICIES = Resource("networking.k8s.io", "v1", "networkpolicies")
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", namespaced=False)
VALIDATING_WEBHOOK_CONFIGURATIONS = Resource(
    "admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", namespaced=False
)
TOKEN_REVIEWS = Resource("authentication.k8s.io", "v1", "tokenreviews", namespaced=False)
SUBJECT_ACCESS_REVIEWS = Resource(
    "authorization.k8s.io", "v1", "subjectaccessreviews", namespaced=False
)

# Label and annotation keys read or written by several parts -------------------------------
# on the Kyma CR (lifecycle-manager's and the broker's)
RUNTIME_ID_LABEL = "kyma-project.io/runtime-id"  # also on Tether's objects and runtime pods
SKR_DOMAIN_ANNOTATION = "skr-domain"
# on a Kyma CR, set by an operator (``tether mute``): the listener answers the runtime 429
MUTED_ANNOTATION = "tether.kyma-project.io/muted"
MUTED_MAX = 200  # characters of its reason kept
GLOBAL_ACCOUNT_LABEL = "kyma-project.io/global-account-id"  # also on the mapping
SUBACCOUNT_LABEL = "kyma-project.io/subaccount-id"  # also on the mapping
SHOOT_NAME_LABEL = "kyma-project.io/shoot-name"
INSTANCE_ID_LABEL = "kyma-project.io/instance-id"
PLAN_ID_LABEL = "kyma-project.io/broker-plan-id"
PLAN_NAME_LABEL = "kyma-project.io/broker-plan-name"
# on the CompassMapping (and the runtime's compass Secret)
KYMA_NAME_LABEL = "operator.kyma-project.io/kyma-name"
COMPASS_RUNTIME_ID_LABEL = "kyma-project.io/compass-runtime-id"
# Tether's own
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
HEARTBEAT_LABEL = "tether.kyma-project.io/heartbeat"  # the listener's per-runtime Leases
EPOCH_ANNOTATION = "tether.kyma-project.io/epoch"  # on a heartbeat Lease and on records
# on a stored record (RuntimeConfigMap): the W3C traceparent of the listener's write of it
# (tether.base.tracing; its trace is the change's, from the admission or the poller's POST)
TRACEPARENT_ANNOTATION = "tether.kyma-project.io/traceparent"
# on the Lease of every leader-elected part (tether.runtime.elected writes them after each run, the
# admin pages read them)
LAST_RUN_AT_ANNOTATION = "tether.kyma-project.io/last-run-at"  # RFC 3339, UTC, seconds
LAST_RUN_RESULT_ANNOTATION = "tether.kyma-project.io/last-run-result"  # ok | failed
LAST_RUN_SECONDS_ANNOTATION = "tether.kyma-project.io/last-run-seconds"  # decimal, 3 places
# on compass's Lease (compass.lease_notes writes them, the admin pages read them)
BREAKER_ANNOTATION = "tether.kyma-project.io/breaker"
DIRECTOR_ERRORS_ANNOTATION = "tether.kyma-project.io/director-errors"
# the runtime bundle's staged rollout: its record in the enroller's namespace (enroller.rollouts
# writes it, the admin page /rollout reads it)
BUNDLE_ROLLOUT_CONFIGMAP = "tether-bundle-rollout"
