"""One runtime's installation: its Secrets read, the renewals and the apply decided
(``enroller.decide``), certificates issued within the runtime's budget, every object of the
rendered bundle server-side applied; and Tether's removal from it. ``enroller.reconcile``
calls it per runtime and writes the outcome to the runtime's RuntimeEnrollment.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import logging
import math
from collections.abc import Callable
from typing import Any

from cryptography import x509

from enroller import castore, decide, metrics, pki, render, sharding
from enroller import held as held_mod
from enroller import settings as settings_mod
from tether.base import certs, logs, times
from tether.kube import apitypes, gateway, kyma, skr_clients
from tether.wire import watches as watch_api
from tether.wire import watchwire

log = logging.getLogger("tether.enroller")


class Failure(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


@dataclasses.dataclass
class Memory:
    """What the enroller keeps per runtime between runs (lost on restart: the first run
    then re-applies everything once)."""

    failures: int = 0
    next_attempt: float = 0.0
    last_full: float = -math.inf
    status: dict[str, Any] | None = None
    resource_version: str = ""
    webhook_serving: bool | None = None
    not_after: datetime.datetime | None = None
    held: str | None = None  # CA serial of the client certificate the runtime holds ("" none)
    last_failure: Failure | None = None
    quarantined: bool = False
    # certificates issued and not applied yet (kind -> PEM certificate, key): reused until
    # applied, so that failing applies mint no new ones; when issued (the hourly limit)
    pending: dict[str, tuple[bytes, bytes]] = dataclasses.field(default_factory=dict)
    issued: tuple[datetime.datetime, ...] = ()
    # the Watches its installed registration holds, (name, generation); None: none rendered
    # (before Watches, or not known since this process started)
    watches_installed: frozenset[tuple[str, int]] | None = None
    watches_left_out: tuple[str, ...] = ()  # in force there but over watches.MAX_WATCHES


@dataclasses.dataclass
class Result:
    runtime_id: str
    applied: str | None  # the cause of a full apply, None when nothing was written
    renewed: list[str]  # "client", "serving"
    not_after: datetime.datetime
    webhook_serving: bool | None
    ca_serial: str  # of the CA that issued the client certificate now installed


class Installer:
    """What the enroller does in one runtime (its settings, clients and counters shared)."""

    def __init__(
        self,
        s: settings_mod.Settings,
        skrs: skr_clients.SkrClients,
        stats: metrics.Metrics,
        audit: logging.Logger,
        bundle: list[dict[str, Any]],
        *,
        clock: Callable[[], float],
        now: Callable[[], datetime.datetime],
    ) -> None:
        self.s, self.skrs, self.stats, self.audit, self.bundle = s, skrs, stats, audit, bundle
        self.clock, self.now = clock, now

    @property
    def module(self) -> bool:
        """Beside lifecycle-manager (``TETHER_ENROLLER_MODE=module``): only what is per
        runtime is written, never forced (``render.module_objects``)."""
        return self.s.mode == "module"

    def _read(
        self, skr: gateway.Kube, res: gateway.Resource, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        self.stats.requests.labels("read").inc()
        try:
            return skr.get_or_none(res, namespace, name, timeout=self.s.skr_timeout)
        except gateway.Forbidden as e:
            raise Failure(
                "Forbidden", f"the runtime's API refuses the kubeconfig: {logs.bounded(e, 200)}"
            ) from None
        except gateway.GatewayError as e:
            raise Failure(_unreachable(e), f"the runtime's API: {logs.bounded(e, 200)}") from None

    def _skr(self, view: kyma.KymaView) -> gateway.Kube:
        """The runtime's API client, once the Kyma CR names the runtime and its domain."""
        if not view.runtime_id or not kyma.valid_runtime_id(view.runtime_id):
            raise Failure(
                "RuntimeIdMissing", f"the Kyma CR has no valid {apitypes.RUNTIME_ID_LABEL} label"
            )
        if not view.domain:
            raise Failure(
                "DomainMissing", f"the Kyma CR has no {apitypes.SKR_DOMAIN_ANNOTATION} annotation"
            )
        try:
            return self.skrs.get(view.name)
        except skr_clients.SkrClientError as e:
            refused = getattr(skr_clients, "KubeconfigRefused", None)
            if refused is not None and isinstance(e, refused):
                raise Failure(
                    "KubeconfigRefused",
                    f"the kubeconfig's {getattr(e, 'field', 'content')} is "
                    f"refused: {logs.bounded(e, 300)}",
                ) from None
            raise Failure("KubeconfigMissing", str(e)) from None

    def enroll(
        self,
        view: kyma.KymaView,
        ca: castore.CA,
        mem: Memory,
        ws: tuple[watch_api.Watch, ...] | None = None,
        bundle: tuple[list[dict[str, Any]], str | None] | None = None,
        take_over_from: str | None = None,
        before_write: Callable[[str | None], None] | None = None,
    ) -> Result:
        """The runtime read (two reads), its renewals and apply decided (``decide.renewal``,
        ``decide.apply``), then performed. ``ws``: the Watches in force there (None: before
        Watches); a changed set changes the Watches' digest: the Watch list and the webhook
        configuration are applied. ``bundle``: the objects and image this runtime is given
        (``enroller.rollouts``; None: the enroller's own). A runtime another KCP installed is
        left alone unless ``take_over_from`` names that KCP's listener (``decide.ownership``).
        ``before_write``: called with the apply's cause (None: nothing to write) before
        anything is written into the runtime, and whenever the runtime already holds Tether
        (the enroller's finalizer goes on the Kyma CR then, and only then; the dry run stops
        there)."""
        objects, image = bundle or (self.bundle, self.s.image)
        skr = self._skr(view)
        now = self.now()
        held = held_mod.Held.of(
            self._read(skr, gateway.SECRETS, render.NAMESPACE, render.CLIENT_SECRET)
        )
        here = (issuer := held_mod.issuer(held.client_pem, ca, mem.held)) in (
            held_mod.serial_hex(ca.current.cert),
            held_mod.serial_hex(ca.previous),
        )  # ours
        if refused := sharding.check(
            self.s.listener_url, self.audit, view, held.data, take_over_from, here
        ):
            raise Failure("OwnedByAnotherKcp", refused)
        hook = self._read(
            skr, apitypes.VALIDATING_WEBHOOK_CONFIGURATIONS, None, render.WEBHOOK_CONFIG
        )
        if self.module and hook is None:
            raise Failure(
                "ModuleNotInstalled",
                f"the Kyma module's webhook configuration {render.WEBHOOK_CONFIG} is not in "
                "the runtime (TETHER_ENROLLER_MODE=module: lifecycle-manager installs it)",
            )
        mem.held = issuer  # what it holds, whatever happens next
        plan = decide.renewal(self._cert_facts(held, view, ca, now))
        client_cert, client_key = self._client_pair(plan.client, held, view, ca, mem, now)
        serving = (
            self._new_serving(plan.serving, view, ca, mem, now)
            if plan.serving is not None
            else held_mod.Serving.annotated(held.notes)
        )
        renewed = [
            kind
            for kind, why in (("client", plan.client), ("serving", plan.serving))
            if why is not None
        ]
        parsed = x509.load_pem_x509_certificate(client_cert)
        client_ca = held_mod.issuer(client_cert, ca, None)
        client = (client_cert, client_key, format(parsed.serial_number, "x"))
        # the runtime's digest key: kept once there (a re-apply or renewal never changes it)
        kept_key = render.kept_digest_key(held.data)
        key = kept_key or render.new_digest_key()
        objs = render.render(
            objects, self._inputs(view, ca, client, serving, ws, image, key), module=self.module
        )
        want = next(o for o in objs if o["kind"] == "ValidatingWebhookConfiguration")["metadata"][
            "annotations"
        ]
        have = ((hook or {}).get("metadata") or {}).get("annotations") or {}
        act = decide.apply(
            decide.ApplyFacts(
                client_secret=held.secret is not None,
                webhook_config=hook is not None,
                applied_before=mem.last_full != -math.inf,
                renewed=bool(renewed),
                serving_renewed=plan.serving is not None,
                installed_current=decide.installed_current(
                    want=want[render.DIGEST],
                    webhook=have.get(render.DIGEST),
                    secret=held.notes.get(render.DIGEST),
                    digest_key=kept_key is not None,
                ),
                resync_due=self.clock() - mem.last_full >= self.s.resync,
                webhook_serving=mem.webhook_serving,
                watches_current=have.get(render.WATCHES_DIGEST) == want.get(render.WATCHES_DIGEST),
                watch_list_stale=ws is None and mem.watches_installed is not None,
            )
        )
        if before_write is not None:  # a write follows, or Tether is there (``decide.apply``)
            before_write(act.cause)
        if act.cause == "watches":
            self._apply_watches(skr, view, objs)
        elif act.cause is not None:
            if act.read_serving:  # kept: its Secret is needed for the apply
                serving = self._kept_serving(skr, serving, view, ca, mem, now, renewed)
                objs = render.render(
                    objects,
                    self._inputs(view, ca, client, serving, ws, image, key),
                    module=self.module,
                )
            self._apply_all(skr, view, mem, objs, act.cause, serving.ca, client_ca)
        if act.delete_watch_list:  # the Watch CRD went: back to before
            self._delete_watch_list(skr)
        mem.watches_installed = (
            None if ws is None else frozenset((w.name, w.generation) for w in ws)
        )
        if act.check_webhook:
            dep = self._read(skr, apitypes.DEPLOYMENTS, render.NAMESPACE, "tether-webhook")
            mem.webhook_serving = bool(
                dep and ((dep.get("status") or {}).get("availableReplicas") or 0) > 0
            )
        return Result(
            view.runtime_id or "",
            act.cause,
            renewed,
            certs.not_after(parsed),
            mem.webhook_serving,
            client_ca,
        )

    def _cert_facts(
        self, held: held_mod.Held, view: kyma.KymaView, ca: castore.CA, now: datetime.datetime
    ) -> decide.CertFacts:
        """What ``decide.renewal`` needs of the certificates the runtime holds."""
        pem = held.client_pem
        rid, domain = view.runtime_id, view.domain
        return decide.CertFacts(
            now=now,
            current=format(ca.current.cert.serial_number, "x"),
            previous=held_mod.serial_hex(ca.previous),
            settled=ca.trusted_everywhere(now, self.s.rollover_propagation),
            client_due=pki.needs_renewal(pem, ca.current, now, runtime_id=rid, domain=domain),
            client_previous_ok=ca.previous is not None
            and bool(pem)
            and pki.needs_renewal(pem, [ca.previous], now, runtime_id=rid, domain=domain) is None,
            client_key_matches=pem is not None
            and held_mod.key_matches(pem, held.data.get("tls.key")),
            serving_ca=held.notes.get(held_mod.CA_SERIAL, ""),
            serving_renew_at=times.parse_time(held.notes.get(render.SERVING_RENEW_AT, "")),
        )

    def _client_pair(
        self,
        why: str | None,
        held: held_mod.Held,
        view: kyma.KymaView,
        ca: castore.CA,
        mem: Memory,
        now: datetime.datetime,
    ) -> tuple[bytes, bytes]:
        """The client certificate and key to install: the runtime's own, or a new pair."""
        if why is None and held.client_pem is not None:
            return held.client_pem, base64.b64decode(held.data["tls.key"])
        rid, domain = view.runtime_id or "", view.domain or ""

        def client_pair() -> certs.KeyPair:
            try:
                return pki.client_certificate(ca.current, rid, domain, self.s.cert_lifetime, now)
            except pki.PKIError as e:
                raise Failure("InvalidDomain", str(e)) from None

        return self._certificate(
            "client",
            view,
            ca,
            mem,
            now,
            why or "missing_key",
            client_pair,
            runtime_id=rid,
            domain=domain,
        )

    def _new_serving(
        self, why: str, view: kyma.KymaView, ca: castore.CA, mem: Memory, now: datetime.datetime
    ) -> held_mod.Serving:
        def serving_pair() -> certs.KeyPair:
            return pki.serving_certificate(
                ca.current, list(render.WEBHOOK_SERVICE_NAMES), self.s.cert_lifetime, now
            )

        cert, key = self._certificate("serving", view, ca, mem, now, why, serving_pair)
        return held_mod.Serving.issued(cert, key, format(ca.current.cert.serial_number, "x"))

    def _kept_serving(
        self,
        skr: gateway.Kube,
        serving: held_mod.Serving,
        view: kyma.KymaView,
        ca: castore.CA,
        mem: Memory,
        now: datetime.datetime,
        renewed: list[str],
    ) -> held_mod.Serving:
        """The kept serving certificate's pair, from its Secret in the runtime; a new one
        when the Secret lost it (``decide.kept_serving``)."""
        secret = self._read(skr, gateway.SECRETS, render.NAMESPACE, render.SERVING_SECRET)
        data = (secret or {}).get("data") or {}
        why = decide.kept_serving("tls.crt" in data and "tls.key" in data)
        if why is None:
            return dataclasses.replace(
                serving,
                cert=base64.b64decode(data["tls.crt"]),
                key=base64.b64decode(data["tls.key"]),
            )
        renewed.append("serving")
        return self._new_serving(why, view, ca, mem, now)

    def _apply_watches(
        self, skr: gateway.Kube, view: kyma.KymaView, objs: list[dict[str, Any]]
    ) -> None:
        """Only the Watches in force changed: the Watch list and the webhook configuration."""
        self._apply(skr, render.watch_objects(objs))
        self.stats.applies.labels("watches").inc()
        log.info("runtime %s (Kyma %s): its Watches applied", view.runtime_id, view.name)

    def _delete_watch_list(self, skr: gateway.Kube) -> None:
        """The runtime's ``tether-watches`` ConfigMap deleted: it sends as before Watches."""
        self.stats.requests.labels("write").inc()
        try:
            skr.delete(
                apitypes.CONFIGMAPS,
                render.NAMESPACE,
                watchwire.WIRE_CONFIGMAP,
                timeout=self.s.skr_timeout,
            )
        except gateway.NotFound:
            pass
        except gateway.GatewayError as e:
            raise Failure(
                _unreachable(e), f"deleting the Watch list: {logs.bounded(e, 200)}"
            ) from None

    def _inputs(
        self,
        view: kyma.KymaView,
        ca: castore.CA,
        client: tuple[bytes, bytes, str],
        serving: held_mod.Serving,
        ws: tuple[watch_api.Watch, ...] | None = None,
        image: str | None = None,
        digest_key: bytes = b"",
    ) -> render.Inputs:
        """What the bundle is rendered with: the client certificate (PEM, key, serial), the
        serving certificate (its pair empty while kept and not read)."""
        return render.Inputs(
            runtime_id=view.runtime_id or "",
            listener_url=self.s.listener_url,
            listener_ca=self.s.listener_ca,
            client_cert=client[0],
            client_key=client[1],
            client_serial=client[2],
            serving_cert=serving.cert,
            serving_key=serving.key,
            serving_serial=serving.serial,
            serving_not_after=times.format_time(serving.not_after) if serving.not_after else "",
            serving_renew_at=times.format_time(serving.renew_at) if serving.renew_at else "",
            ca_bundle=ca.bundle,
            image=image,
            image_pull_secret=self.s.image_pull_secret,
            watches=ws,
            digest_key=digest_key,
        )

    def _apply_all(
        self,
        skr: gateway.Kube,
        view: kyma.KymaView,
        mem: Memory,
        objs: list[dict[str, Any]],
        cause: str,
        serving_ca: str,
        client_ca: str,
    ) -> None:
        """Every object applied; what was issued is in the runtime from then on."""
        for o in objs:
            if o["kind"] == "Secret" and o["metadata"]["name"] == render.CLIENT_SECRET:
                o["metadata"]["annotations"][held_mod.CA_SERIAL] = (
                    serving_ca  # the serving certificate's issuer
                )
        self._apply(skr, objs)
        mem.pending.clear()  # applied: what was issued is in the runtime now
        mem.held = client_ca
        mem.last_full = self.clock()
        self.stats.applies.labels(cause).inc()
        log.info(
            "runtime %s (Kyma %s): applied %d objects (%s)",
            view.runtime_id,
            view.name,
            len(objs),
            cause,
        )

    def _certificate(
        self,
        kind: str,
        view: kyma.KymaView,
        ca: castore.CA,
        mem: Memory,
        now: datetime.datetime,
        cause: str,
        make: Callable[[], certs.KeyPair],
        *,
        runtime_id: str | None = None,
        domain: str | None = None,
    ) -> tuple[bytes, bytes]:
        """A new certificate for the runtime (PEM certificate, key): the one issued earlier and
        not applied yet while it is still good, else a new one within the hourly limit."""
        pending = mem.pending.get(kind)
        usable = (
            pending is not None
            and pki.needs_renewal(pending[0], ca.current, now, runtime_id=runtime_id, domain=domain)
            is None
        )
        mem.issued = decide.recent(mem.issued, now)
        action = decide.certificate(
            decide.CertificateFacts(cause, usable, len(mem.issued), self.s.issuance_budget)
        )
        if action == "reuse":
            assert pending is not None
            return pending
        if action == "rate_limited":
            self.stats.rate_limited.inc()
            at = decide.next_issuance(mem.issued, now, self.s.issuance_budget)
            raise Failure(
                "IssuanceRateLimited",
                f"{len(mem.issued)} certificates were issued for this runtime "
                f"in the last hour (the limit is {self.s.issuance_budget}); "
                f"no new {kind} certificate "
                f"before {times.format_time(at)}",
            )
        pair = make()
        self._issued(kind, view, pair, cause)
        mem.issued = (*mem.issued, now)
        mem.pending[kind] = (pair.cert_pem, pair.key_pem)
        return pair.cert_pem, pair.key_pem

    def _issued(self, kind: str, view: kyma.KymaView, pair: certs.KeyPair, cause: str) -> None:
        self.stats.issued.labels(kind, cause).inc()
        logs.audit(
            self.audit,
            "certificate_issued",
            kind=kind,
            runtime=view.runtime_id,
            kyma=view.name,
            serial=format(pair.cert.serial_number, "x"),
            not_after=times.format_time(certs.not_after(pair.cert)),
            cause=cause,
        )

    def _apply(self, skr: gateway.Kube, objs: list[dict[str, Any]]) -> None:
        for o in objs:
            res = render.resource(o)
            meta = o["metadata"]
            self.stats.requests.labels("write").inc()
            try:
                skr.apply(
                    res,
                    meta.get("namespace"),
                    meta["name"],
                    o,
                    field_manager=render.MANAGER,
                    timeout=self.s.skr_timeout,
                    force=not self.module,  # beside the module: a conflict is reported
                )
            except gateway.Forbidden as e:
                raise Failure(
                    "Forbidden", f"applying {o['kind']} {meta['name']}: {logs.bounded(e, 200)}"
                ) from None
            except gateway.Rejected as e:
                raise Failure(
                    "Rejected", f"applying {o['kind']} {meta['name']}: {logs.bounded(e, 200)}"
                ) from None
            except gateway.Conflict as e:  # not forced (module mode): another manager's field
                raise Failure(
                    "FieldConflict",
                    f"applying {o['kind']} {meta['name']}: {logs.bounded(e, 200)}",
                ) from None
            except gateway.GatewayError as e:
                raise Failure(
                    _unreachable(e), f"applying {o['kind']} {meta['name']}: {logs.bounded(e, 200)}"
                ) from None

    def remove_objects(self, name: str, runtime_id: str) -> str | None:
        """Every object of the bundle deleted from the runtime (the webhook configuration
        first); beside the module only the enroller's own (its Secrets, the Watch list).
        None when done, else why not."""
        try:
            skr = self.skrs.get(name)
            if sharding.moved_away(skr, self.s.listener_url, name, self.s.skr_timeout):
                return None
            inputs = dataclasses.replace(
                _placeholder(runtime_id),
                image_pull_secret=self.s.image_pull_secret,
                watches=() if self.module else None,  # beside the module: its Watch list too
            )
            for o in reversed(render.render(self.bundle, inputs, module=self.module)):
                if self.module and o["kind"] == "ValidatingWebhookConfiguration":
                    continue  # the module's (lifecycle-manager removes it)
                res = render.resource(o)
                self.stats.requests.labels("write").inc()
                try:
                    skr.delete(
                        res,
                        o["metadata"].get("namespace"),
                        o["metadata"]["name"],
                        timeout=self.s.skr_timeout,
                    )
                except gateway.NotFound:
                    pass
        except (skr_clients.SkrClientError, gateway.GatewayError) as e:
            return logs.bounded(e, 200)
        return None


def _unreachable(e: gateway.GatewayError) -> str:
    """The failure reason of a runtime call that failed: the bound it broke (the runtime's
    API server trickled, answered too much, redirected, resolved inside), else Unreachable."""
    return e.reason if isinstance(e, gateway.Bounded) else "Unreachable"


def _placeholder(runtime_id: str) -> render.Inputs:
    """Inputs enough to name the objects to delete (no certificate is needed for that)."""
    return render.Inputs(
        runtime_id=runtime_id,
        listener_url="",
        listener_ca=b"",
        client_cert=b"",
        client_key=b"",
        client_serial="",
        serving_cert=b"",
        serving_key=b"",
        serving_serial="",
        serving_not_after="",
        ca_bundle=b"",
    )
