"""Enroller settings: one dataclass, built once in the entry point. Every setting is declared
once, as a field with its option (``tether.base.config.setting``); ``SPEC`` collects them
(``tether enroller --help``, docs/enroller.md). A bad value stops the process with one line
naming it."""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import pathlib
from typing import Any

from enroller import render, rollout
from tether.base import auditwriter, config
from tether.kube import apitypes, skr_clients
from tether.wire import filters

E = "TETHER_ENROLLER_"
setting = config.setting
BACKOFF = config.backoff(E, 10.0, 600.0)
KCP_NAMESPACE = config.object_name(
    "TETHER_KCP_NAMESPACE",
    "kcp-system",
    "KCP namespace of the Kyma CRs, kubeconfig Secrets and RuntimeEnrollments",
)


def _duration(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=seconds)


def _lifetime(option: config.Option) -> Any:
    """A field of seconds given as a ``timedelta``."""
    return setting(option, convert=_duration)


def _kyma_selector(name: str, raw: str) -> tuple[filters.Requirement, ...]:
    try:
        return filters.parse_selector(raw)
    except filters.SelectorError as e:
        raise config.SettingError(f"{name}: {e}") from None


def _waves(name: str, raw: str) -> tuple[float, ...]:
    try:
        return rollout.parse_waves(raw)
    except ValueError as e:
        raise config.SettingError(f"{name}: {e}") from None


@dataclasses.dataclass(frozen=True)
class Settings:
    listener_url: str = setting(
        config.https_url(  # what runtimes send to (its ingress)
            E + "LISTENER_URL",
            config.REQUIRED,
            "the listener's URL as runtimes reach it (its ingress)",
        )
    )
    listener_ca: bytes = config.inputs(
        config.file(  # CA of the listener's serving certificate
            E + "LISTENER_CA_FILE",
            config.REQUIRED,
            "CA of the listener's serving certificate, given to runtimes",
            "certificate",
        ),
        repr=False,
    )
    kubeconfig: str | None = setting(config.kcp_kubeconfig(E + "KUBECONFIG", flag="--kubeconfig"))
    kcp_namespace: str = setting(KCP_NAMESPACE)  # Kyma CRs, kubeconfig Secrets, enrollments
    heartbeat_namespace: str = setting(config.heartbeat_namespace(), otherwise=KCP_NAMESPACE)
    namespace: str = setting(
        config.object_name(  # the watcher CA Secret, trust bundle, Lease
            E + "NAMESPACE",
            "tether-system",
            "KCP namespace of the watcher CA Secret, the trust bundle and the Lease",
        )
    )
    ca_secret: str = setting(
        config.object_name(E + "CA_SECRET", "tether-enroller-ca", "Secret holding the watcher CA")
    )
    trust_config_map: str = setting(
        config.object_name(  # what the listener mounts
            E + "TRUST_CONFIGMAP",
            "tether-runtime-ca",
            "ConfigMap of the CAs the listener trusts (key ca.crt)",
        )
    )
    cert_lifetime: datetime.timedelta = _lifetime(
        config.seconds(
            E + "CERT_LIFETIME_SECONDS",
            7 * 86_400.0,
            "lifetime of runtime certificates (renewed at two thirds)",
            minimum=60,
            maximum=397 * 86_400,
        )
    )
    ca_lifetime: datetime.timedelta = _lifetime(
        config.seconds(
            E + "CA_LIFETIME_SECONDS",
            365 * 86_400.0,
            "lifetime of a new watcher CA (rolled over at two thirds)",
            minimum=60,
            maximum=20 * 365 * 86_400,
        )
    )
    rollover_propagation: datetime.timedelta = _lifetime(
        config.seconds(
            E + "ROLLOVER_PROPAGATION_SECONDS",
            180.0,
            "after a CA rollover starts, how long "
            "certificates of the old CA are kept (until every listener trusts the new one)",
            minimum=0,
            maximum=86_400,
        )
    )
    rollover_deadline: datetime.timedelta = _lifetime(
        config.seconds(  # then: quarantined
            E + "ROLLOVER_DEADLINE_SECONDS",
            3600.0,
            "a CA rollover ends this long after it started "
            "at the latest, whatever any runtime does; "
            "runtimes not renewed by then are quarantined "
            "(at least the propagation time)",
            minimum=60,
            maximum=30 * 86_400,
        )
    )
    image: str | None = setting(
        config.text(  # None: the bundle's images
            E + "IMAGE", None, "image of Tether's SKR containers (unset: the bundle's)"
        )
    )
    image_pull_secret: bytes | None = config.inputs(
        config.file(  # None: no imagePullSecrets
            E + "IMAGE_PULL_SECRET_FILE",
            None,
            "a .dockerconfigjson (a mounted Secret of type "
            "kubernetes.io/dockerconfigjson), copied into every runtime as the Secret "
            "tether-system/tether-image-pull that Tether's pods pull with, readable by every "
            "runtime's admins: a per-landscape, pull-only credential only (unset: none)",
        ),
        default=None,
        repr=False,
    )
    mode: str = setting(
        config.choice(
            E + "MODE",
            "bundle",
            "bundle: the enroller installs Tether's SKR bundle into every runtime; module: "
            "lifecycle-manager installs the Kyma module and the enroller writes only what is "
            "per runtime (the Secrets, the webhook's caBundle, the Watch list), never the "
            'module\'s objects (docs/enroller.md, "Beside lifecycle-manager")',
            ("bundle", "module"),
        )
    )
    bundle_file: str | None = setting(
        config.file(  # None: the packaged bundle (manifests/skr)
            E + "BUNDLE_FILE",
            None,
            "the SKR bundle (kubectl kustomize of an overlay of "
            "manifests/skr; unset: the packaged manifests/skr)",
        )
    )
    interval: float = setting(
        config.seconds(
            E + "INTERVAL_SECONDS",
            60.0,
            "time between runs over every runtime",
            minimum=1,
            maximum=86_400,
        )
    )
    react_seconds: float = setting(
        config.seconds(  # Kyma CR changes are noticed this fast
            E + "REACT_SECONDS",
            5.0,
            "how often Kyma CRs are listed for changes",
            minimum=0.5,
            maximum=3600,
        )
    )
    resync: float = setting(
        config.seconds(  # a full apply per runtime at least this often
            E + "RESYNC_SECONDS",
            3600.0,
            "a full apply per runtime at least this often (repairs any drift)",
            minimum=10,
            maximum=7 * 86_400,
        )
    )
    concurrency: int = setting(
        config.integer(E + "CONCURRENCY", 8, "runtimes worked on at once", minimum=1, maximum=64)
    )
    skr_timeout: float = setting(
        config.seconds(
            E + "SKR_TIMEOUT_SECONDS", 10.0, "per runtime API request", minimum=0.1, maximum=300
        )
    )
    runtime_deadline: float = setting(
        config.seconds(  # one runtime's work in a run
            E + "RUNTIME_DEADLINE_SECONDS",
            60.0,
            "one runtime's work in a run (wall clock); past "
            "it the run goes on without it and reports it (DeadlineExceeded)",
            minimum=0.1,
            maximum=3600,
        )
    )
    issuance_limit: int = setting(
        config.integer(  # certificates per runtime per hour
            E + "ISSUANCE_LIMIT",
            6,
            "certificates issued per runtime per hour beyond the scheduled "
            "renewals (client and serving each count); past it the runtime is reported "
            "(IssuanceRateLimited)",
            minimum=2,
            maximum=1000,
        )
    )
    backoff_base: float = setting(BACKOFF[0])
    backoff_cap: float = setting(BACKOFF[1])
    kyma_selector: tuple[filters.Requirement, ...] = setting(
        config.custom(
            E + "KYMA_SELECTOR",
            (),
            "label selector over the Kyma CRs to enroll (a pilot before the fleet); "
            "the others get no finalizer, no RuntimeEnrollment and no install, except one "
            "installed into before (it keeps the enroller's finalizer); empty: every Kyma CR",
            _kyma_selector,
            shown="(empty: every Kyma CR)",
        )
    )
    removal_timeout: float = setting(
        config.seconds(
            E + "REMOVAL_TIMEOUT_SECONDS",
            300.0,
            "longest a Kyma CR's deletion waits for Tether's removal from its runtime",
            minimum=0,
            maximum=86_400,
        )
    )
    rollout_waves: tuple[float, ...] = setting(
        config.custom(  # cumulative percentages
            E + "ROLLOUT_WAVES",
            rollout.DEFAULT_WAVES,
            "a new bundle's waves: cumulative percentages of the "
            "runtimes (ordered by the hash of their ID; at least one runtime per wave)",
            _waves,
        )
    )
    rollout_gate_timeout: datetime.timedelta = _lifetime(
        config.seconds(
            E + "ROLLOUT_GATE_TIMEOUT_SECONDS",
            900.0,
            "how long a wave's runtimes may take to pass "
            "the health gate before the rollout halts and rolls back",
            minimum=1,
            maximum=7 * 86_400,
        )
    )
    rollout_max_refusals: int = setting(
        config.integer(
            E + "ROLLOUT_MAX_REFUSALS",
            50,
            "refusals the listener may record for a runtime of a "
            "wave since the wave began; more fail the gate at once",
            minimum=0,
            maximum=1_000_000,
        )
    )
    rollout_heartbeat: bool = setting(
        config.boolean(
            E + "ROLLOUT_HEARTBEAT",
            True,
            "the gate waits for a heartbeat of each runtime of the wave after the wave began",
        )
    )
    rollout_max_unhealthy: int = setting(
        config.integer(
            E + "ROLLOUT_MAX_UNHEALTHY",
            0,
            "runtimes of a wave that may fail the gate while the wave still passes",
            minimum=0,
            maximum=1000,
        )
    )
    rollout_config_map: str = setting(
        config.object_name(
            E + "ROLLOUT_CONFIGMAP",
            apitypes.BUNDLE_ROLLOUT_CONFIGMAP,
            "ConfigMap of the rollout's state and the last good bundle",
        )
    )
    lease_name: str = setting(
        config.object_name(E + "LEASE_NAME", "tether-enroller", "the Lease's name")
    )
    bind: str = setting(
        config.host_port(E + "BIND", "0.0.0.0:8080", "HOST:PORT of /healthz, /readyz and /metrics")
    )
    log_level: str = setting(config.log_level())
    log_format: str = setting(config.log_format())
    audit_destination: str = setting(config.audit_log())
    audit_queue_lines: int = setting(auditwriter.queue_lines(E + "AUDIT_QUEUE_LINES"))
    runtimes: skr_clients.Policy = config.inputs(
        *skr_clients.OPTIONS, default_factory=skr_clients.Policy
    )

    @property
    def issuance_budget(self) -> int:
        """Certificates a runtime may be issued per hour: ``issuance_limit`` beyond the
        scheduled renewals (two kinds, each at two thirds of ``cert_lifetime``), so that short
        certificate lifetimes still renew while a failing runtime cannot mint more."""
        renew_every = max(1.0, self.cert_lifetime.total_seconds() * 2 / 3)
        return self.issuance_limit + 2 * math.ceil(3600 / renew_every)

    @property
    def workers(self) -> int:
        """The most threads working on runtimes at once, stragglers included: a run uses
        ``concurrency``; the rest is room for work that outlived its deadline."""
        return 4 * self.concurrency

    def bundle_text(self) -> str:
        return pathlib.Path(self.bundle_file or render.BUNDLE_FILE).read_text()


SPEC = config.Spec.of(
    Settings,
    part="enroller",
    summary="Enroller (KCP): certificates and Tether's installation in every runtime.",
)


def build(v: config.Values) -> Settings:
    ca_file = v[E + "LISTENER_CA_FILE"]
    try:
        listener_ca = pathlib.Path(ca_file).read_bytes()
    except OSError as e:
        raise config.SettingError(
            f"{E}LISTENER_CA_FILE: cannot read {ca_file}: {type(e).__name__}"
        ) from None
    if v[E + "ROLLOVER_DEADLINE_SECONDS"] < v[E + "ROLLOVER_PROPAGATION_SECONDS"]:
        raise config.SettingError(
            f"{E}ROLLOVER_DEADLINE_SECONDS: shorter than {E}ROLLOVER_PROPAGATION_SECONDS"
        )
    bundle = v[E + "BUNDLE_FILE"]
    try:
        render.load_bundle(pathlib.Path(bundle or render.BUNDLE_FILE).read_text())
    except (OSError, render.BundleError) as e:
        raise config.SettingError(f"{E}BUNDLE_FILE: {bundle or render.BUNDLE_FILE}: {e}") from None
    return config.fill(
        Settings,
        v,
        listener_ca=listener_ca,
        image_pull_secret=_pull_secret(v[E + "IMAGE_PULL_SECRET_FILE"]),
        runtimes=skr_clients.policy(v, v[E + "SKR_TIMEOUT_SECONDS"]),
    )


def _pull_secret(path: str | None) -> bytes | None:
    """The file's bytes, when it is a Docker config JSON (an object with ``auths``); never
    quoted in an error (it holds credentials)."""
    if not path:
        return None
    name = f"{E}IMAGE_PULL_SECRET_FILE"
    try:
        content = pathlib.Path(path).read_bytes()
    except OSError as e:
        raise config.SettingError(f"{name}: cannot read {path}: {type(e).__name__}") from None
    try:
        doc = json.loads(content)
    except ValueError:
        raise config.SettingError(f"{name}: {path} is not JSON (a .dockerconfigjson)") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("auths"), dict):
        raise config.SettingError(f'{name}: {path} has no "auths" object (a .dockerconfigjson)')
    return content
