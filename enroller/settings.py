"""Enroller settings: one dataclass, built once in the entry point from the options declared
in ``SPEC`` (``tether enroller --help``, docs/enroller.md). A bad value stops the process
with one line naming it."""

from __future__ import annotations

import dataclasses
import datetime
import math
import pathlib

from enroller import render
from tether import config, skr_clients


@dataclasses.dataclass(frozen=True)
class Settings:
    listener_url: str                      # what runtimes send to (the listener's ingress)
    listener_ca: bytes = dataclasses.field(repr=False)  # CA of the listener's serving certificate
    kcp_namespace: str = "kcp-system"      # Kyma CRs, kubeconfig Secrets, RuntimeEnrollments
    heartbeat_namespace: str = "kcp-system"  # the listener's heartbeat Leases (unset: kcp_namespace)
    namespace: str = "tether-system"       # the watcher CA Secret, the trust bundle, the Lease
    ca_secret: str = "tether-enroller-ca"
    trust_config_map: str = "tether-runtime-ca"  # what the listener mounts
    cert_lifetime: datetime.timedelta = datetime.timedelta(days=7)
    ca_lifetime: datetime.timedelta = datetime.timedelta(days=365)
    rollover_propagation: datetime.timedelta = datetime.timedelta(minutes=3)
    rollover_deadline: datetime.timedelta = datetime.timedelta(hours=1)  # then unrenewed runtimes are quarantined
    image: str | None = None               # None: the bundle's images
    bundle_file: str | None = None         # None: the packaged bundle (manifests/skr)
    interval: float = 60.0
    react_seconds: float = 5.0             # Kyma CR changes are noticed this fast
    resync: float = 3600.0                 # a full apply per runtime at least this often
    concurrency: int = 8
    skr_timeout: float = 10.0
    runtime_deadline: float = 60.0         # one runtime's work in a run, wall clock
    issuance_limit: int = 6                # certificates per runtime per hour
    backoff_base: float = 10.0
    backoff_cap: float = 600.0
    removal_timeout: float = 300.0
    lease_name: str = "tether-enroller"
    bind: str = "0.0.0.0:8080"
    log_level: str = "INFO"
    log_format: str = "json"
    audit_destination: str = "stdout"
    kubeconfig: str | None = None
    runtimes: skr_clients.Policy = dataclasses.field(default_factory=skr_clients.Policy)

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


E = "TETHER_ENROLLER_"
SPEC = config.Spec(
    part="enroller",
    summary="Enroller (KCP): certificates and Tether's installation in every runtime.",
    options=(
        config.https_url(E + "LISTENER_URL", config.REQUIRED,
                         "the listener's URL as runtimes reach it (its ingress)"),
        config.file(E + "LISTENER_CA_FILE", config.REQUIRED,
                    "CA of the listener's serving certificate, given to runtimes", "certificate"),
        config.kubeconfig(E + "KUBECONFIG", "kubeconfig of the KCP (unset: $KUBECONFIG, else "
                          "the in-cluster service account)", flag="--kubeconfig"),
        config.object_name("TETHER_KCP_NAMESPACE", "kcp-system",
                           "KCP namespace of the Kyma CRs, kubeconfig Secrets and RuntimeEnrollments"),
        config.object_name("TETHER_HEARTBEAT_NAMESPACE", None,
                           "KCP namespace of the listener's heartbeat Leases (the manifests: "
                           "tether-heartbeats)", shown="TETHER_KCP_NAMESPACE"),
        config.object_name(E + "NAMESPACE", "tether-system",
                           "KCP namespace of the watcher CA Secret, the trust bundle and the Lease"),
        config.object_name(E + "CA_SECRET", "tether-enroller-ca", "Secret holding the watcher CA"),
        config.object_name(E + "TRUST_CONFIGMAP", "tether-runtime-ca",
                           "ConfigMap of the CAs the listener trusts (key ca.crt)"),
        config.seconds(E + "CERT_LIFETIME_SECONDS", 7 * 86_400.0,
                       "lifetime of runtime certificates (renewed at two thirds)", minimum=60,
                       maximum=397 * 86_400),
        config.seconds(E + "CA_LIFETIME_SECONDS", 365 * 86_400.0,
                       "lifetime of a new watcher CA (rolled over at two thirds)", minimum=60,
                       maximum=20 * 365 * 86_400),
        config.seconds(E + "ROLLOVER_PROPAGATION_SECONDS", 180.0,
                       "after a CA rollover starts, how long certificates of the old CA are kept "
                       "(until every listener trusts the new one)", minimum=0, maximum=86_400),
        config.seconds(E + "ROLLOVER_DEADLINE_SECONDS", 3600.0,
                       "a CA rollover ends this long after it started at the latest, whatever any "
                       "runtime does; runtimes not renewed by then are quarantined (at least the "
                       "propagation time)", minimum=60, maximum=30 * 86_400),
        config.text(E + "IMAGE", None, "image of Tether's SKR containers (unset: the bundle's)"),
        config.file(E + "BUNDLE_FILE", None,
                    "the SKR bundle (kubectl kustomize of an overlay of manifests/skr; unset: "
                    "the packaged manifests/skr)"),
        config.seconds(E + "INTERVAL_SECONDS", 60.0, "time between runs over every runtime",
                       minimum=1, maximum=86_400),
        config.seconds(E + "REACT_SECONDS", 5.0, "how often Kyma CRs are listed for changes",
                       minimum=0.5, maximum=3600),
        config.seconds(E + "RESYNC_SECONDS", 3600.0,
                       "a full apply per runtime at least this often (repairs any drift)",
                       minimum=10, maximum=7 * 86_400),
        config.integer(E + "CONCURRENCY", 8, "runtimes worked on at once", minimum=1, maximum=64),
        config.seconds(E + "SKR_TIMEOUT_SECONDS", 10.0, "per runtime API request", minimum=0.1,
                       maximum=300),
        config.seconds(E + "RUNTIME_DEADLINE_SECONDS", 60.0,
                       "one runtime's work in a run (wall clock); past it the run goes on without "
                       "it and reports it (DeadlineExceeded)", minimum=0.1, maximum=3600),
        config.integer(E + "ISSUANCE_LIMIT", 6,
                       "certificates issued per runtime per hour beyond the scheduled renewals "
                       "(client and serving each count); past it the runtime is reported "
                       "(IssuanceRateLimited)",
                       minimum=2, maximum=1000),
        config.seconds(E + "BACKOFF_BASE_SECONDS", 10.0, "first per-runtime backoff", minimum=0,
                       maximum=86_400),
        config.seconds(E + "BACKOFF_CAP_SECONDS", 600.0, "longest per-runtime backoff", minimum=0,
                       maximum=86_400),
        config.seconds(E + "REMOVAL_TIMEOUT_SECONDS", 300.0,
                       "longest a Kyma CR's deletion waits for Tether's removal from its runtime",
                       minimum=0, maximum=86_400),
        config.object_name(E + "LEASE_NAME", "tether-enroller", "the Lease's name"),
        config.host_port(E + "BIND", "0.0.0.0:8080", "HOST:PORT of /healthz, /readyz and /metrics"),
        config.log_level(),
        config.log_format(),
        config.text("TETHER_AUDIT_LOG", "stdout", "stdout or a file path for the audit lines"),
        *skr_clients.OPTIONS,
    ),
)


def build(v: config.Values) -> Settings:
    ca_file = v[E + "LISTENER_CA_FILE"]
    try:
        listener_ca = pathlib.Path(ca_file).read_bytes()
    except OSError as e:
        raise config.SettingError(f"{E}LISTENER_CA_FILE: cannot read {ca_file}: {type(e).__name__}") from None
    if v[E + "ROLLOVER_DEADLINE_SECONDS"] < v[E + "ROLLOVER_PROPAGATION_SECONDS"]:
        raise config.SettingError(f"{E}ROLLOVER_DEADLINE_SECONDS: shorter than "
                                  f"{E}ROLLOVER_PROPAGATION_SECONDS")
    bundle = v[E + "BUNDLE_FILE"]
    try:
        render.load_bundle(pathlib.Path(bundle or render.BUNDLE_FILE).read_text())
    except (OSError, render.BundleError) as e:
        raise config.SettingError(f"{E}BUNDLE_FILE: {bundle or render.BUNDLE_FILE}: {e}") from None
    return Settings(
        listener_url=v[E + "LISTENER_URL"],
        listener_ca=listener_ca,
        kcp_namespace=v["TETHER_KCP_NAMESPACE"],
        heartbeat_namespace=v["TETHER_HEARTBEAT_NAMESPACE"] or v["TETHER_KCP_NAMESPACE"],
        namespace=v[E + "NAMESPACE"],
        ca_secret=v[E + "CA_SECRET"],
        trust_config_map=v[E + "TRUST_CONFIGMAP"],
        cert_lifetime=datetime.timedelta(seconds=v[E + "CERT_LIFETIME_SECONDS"]),
        ca_lifetime=datetime.timedelta(seconds=v[E + "CA_LIFETIME_SECONDS"]),
        rollover_propagation=datetime.timedelta(seconds=v[E + "ROLLOVER_PROPAGATION_SECONDS"]),
        rollover_deadline=datetime.timedelta(seconds=v[E + "ROLLOVER_DEADLINE_SECONDS"]),
        image=v[E + "IMAGE"],
        bundle_file=bundle,
        interval=v[E + "INTERVAL_SECONDS"],
        react_seconds=v[E + "REACT_SECONDS"],
        resync=v[E + "RESYNC_SECONDS"],
        concurrency=v[E + "CONCURRENCY"],
        skr_timeout=v[E + "SKR_TIMEOUT_SECONDS"],
        runtime_deadline=v[E + "RUNTIME_DEADLINE_SECONDS"],
        issuance_limit=v[E + "ISSUANCE_LIMIT"],
        backoff_base=v[E + "BACKOFF_BASE_SECONDS"],
        backoff_cap=v[E + "BACKOFF_CAP_SECONDS"],
        removal_timeout=v[E + "REMOVAL_TIMEOUT_SECONDS"],
        lease_name=v[E + "LEASE_NAME"],
        bind=v[E + "BIND"],
        log_level=v["TETHER_LOG_LEVEL"],
        log_format=v["TETHER_LOG_FORMAT"],
        audit_destination=v["TETHER_AUDIT_LOG"],
        kubeconfig=v[E + "KUBECONFIG"],
        runtimes=skr_clients.policy(v, v[E + "SKR_TIMEOUT_SECONDS"]),
    )
