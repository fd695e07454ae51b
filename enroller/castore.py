"""The watcher CA, kept in a KCP Secret (layout: ``enroller.pki``), and the trust bundle the
listener mounts (a ConfigMap, key ``ca.crt``).

``ensure`` creates the CA on first use, starts a rollover when the CA has used two thirds
of its life (a new CA issues from then on; the old certificate stays in ``previous.crt`` and
in the trust bundle; the Secret's annotation records when, so the rollover's propagation
time and deadline survive restarts), and keeps the ConfigMap equal to the bundle.
``finish_rollover`` drops the old CA when ``enroller.decide.rollover`` says so: every runtime
holds a certificate from the new one, or the rollover deadline has passed. Every change is an
audit line; key material never leaves the Secret.

A CA Secret of type ``kubernetes.io/tls`` (or with cert-manager's ``cert-manager.io/
certificate-name`` annotation) is its issuer's, e.g. cert-manager's (the overlay
``manifests/overlays/cert-manager``, docs/security.md): the enroller reads it and publishes
its certificate, but never writes it and starts no rollover (the issuer renews it; keeping
its key, certificates already issued stay valid).
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from cryptography import x509

from enroller import pki
from tether.base import certs, logs, times
from tether.kube import apitypes, gateway

ROLLOVER_STARTED = "tether.kyma-project.io/rollover-started"
CERT_MANAGER_CERTIFICATE = "cert-manager.io/certificate-name"


def issuer_managed(doc: Mapping[str, Any]) -> bool:
    """Whether the CA Secret is kept by its issuer (cert-manager), not by the enroller."""
    notes = (doc.get("metadata") or {}).get("annotations") or {}
    return doc.get("type") == "kubernetes.io/tls" or CERT_MANAGER_CERTIFICATE in notes


@dataclasses.dataclass(frozen=True)
class CA:
    current: certs.CertificateAuthority
    previous: x509.Certificate | None
    bundle: bytes  # what verifiers trust: current, then previous during a rollover
    rollover_started: datetime.datetime | None = None

    def trusted_everywhere(self, now: datetime.datetime, propagation: datetime.timedelta) -> bool:
        """Whether every verifier has had the time to load the bundle with the current CA
        (a mounted ConfigMap takes up to a minute or two to change in a pod): before that,
        certificates of the previous CA are kept, so that no runtime holds one nobody trusts."""
        return (
            self.previous is None
            or self.rollover_started is None
            or now >= self.rollover_started + propagation
        )


class CAStore:
    def __init__(
        self,
        kcp: gateway.Kube,
        namespace: str,
        secret: str,
        config_map: str,
        lifetime: datetime.timedelta,
        audit: logging.Logger,
        now: Callable[[], datetime.datetime],
    ) -> None:
        self.kcp, self.namespace, self.secret, self.config_map = kcp, namespace, secret, config_map
        self.lifetime, self.audit, self.now = lifetime, audit, now
        self._lock = threading.Lock()

    def ensure(self) -> CA:
        with self._lock:
            doc = self.kcp.get_or_none(gateway.SECRETS, self.namespace, self.secret)
            if doc is None:
                current = certs.CertificateAuthority.create(
                    "tether-watcher-ca", self.lifetime, self.now()
                )
                self._write(None, current, None)
                self._audit("ca_created", current)
                previous = None
            started = None
            if doc is not None and issuer_managed(doc):  # read only: its issuer renews it
                current, previous = pki.load_ca_secret(_decoded(doc))[0], None
            elif doc is not None:
                current, previous = pki.load_ca_secret(_decoded(doc))
                started = times.parse_time(
                    ((doc.get("metadata") or {}).get("annotations") or {}).get(ROLLOVER_STARTED, "")
                )
                if previous is not None and started is None:  # e.g. a hand-made previous.crt
                    started = self.now()  # the deadline counts from when the enroller saw it
                    self._write(doc, current, previous, started)
                elif previous is None and pki.ca_needs_rollover(current.cert, self.now()):
                    previous, current = (
                        current.cert,
                        certs.CertificateAuthority.create(
                            "tether-watcher-ca", self.lifetime, self.now()
                        ),
                    )
                    started = self.now()
                    self._write(doc, current, previous, started)
                    self._audit("ca_rollover_started", current)
            ca = CA(
                current,
                previous,
                pki.trust_bundle(current.cert, previous),
                started if previous is not None else None,
            )
            self._publish(ca.bundle)
            return ca

    def peek(self) -> tuple[CA, str]:
        """Read only (the enroller's dry run): the CA as it stands and "" or what ``ensure``
        would change; with no CA Secret, one made in memory (never written)."""
        doc = self.kcp.get_or_none(gateway.SECRETS, self.namespace, self.secret)
        if doc is None:
            current = certs.CertificateAuthority.create(
                "tether-watcher-ca", self.lifetime, self.now()
            )
            return CA(current, None, pki.trust_bundle(current.cert, None), None), (
                f"would create the watcher CA (Secret {self.namespace}/{self.secret})"
            )
        if issuer_managed(doc):
            current, previous = pki.load_ca_secret(_decoded(doc))[0], None
        else:
            current, previous = pki.load_ca_secret(_decoded(doc))
        note = ""
        if previous is None and not issuer_managed(doc):
            if pki.ca_needs_rollover(current.cert, self.now()):
                note = "would start a CA rollover (every runtime renewed)"
        started = times.parse_time(
            ((doc.get("metadata") or {}).get("annotations") or {}).get(ROLLOVER_STARTED, "")
        )
        bundle = pki.trust_bundle(current.cert, previous)
        return CA(current, previous, bundle, started if previous is not None else None), note

    def finish_rollover(self, ca: CA, cause: str, quarantined: int = 0) -> CA:
        """Drop the previous CA (the caller decided that the rollover ends: ``cause``
        ``complete`` or ``deadline``, with ``quarantined`` runtimes left behind)."""
        if ca.previous is None:
            return ca
        with self._lock:
            doc = self.kcp.get(gateway.SECRETS, self.namespace, self.secret)
            self._write(doc, ca.current, None)
            done = CA(ca.current, None, pki.trust_bundle(ca.current.cert, None), None)
            self._publish(done.bundle)
            self._audit(
                "ca_rollover_finished",
                ca.current,
                dropped=format(ca.previous.serial_number, "x"),
                cause=cause,
                quarantined=str(quarantined),
            )
            return done

    def _write(
        self,
        doc: Mapping[str, Any] | None,
        current: certs.CertificateAuthority,
        previous: x509.Certificate | None,
        started: datetime.datetime | None = None,
    ) -> None:
        data = {
            k: base64.b64encode(v).decode()
            for k, v in pki.ca_secret_data(current, previous).items()
        }
        meta: dict[str, Any] = {
            "name": self.secret,
            "namespace": self.namespace,
            "labels": {
                "app.kubernetes.io/part-of": "tether",
                apitypes.MANAGED_BY_LABEL: "tether-enroller",
            },
            "annotations": {ROLLOVER_STARTED: times.format_time(started)} if started else {},
        }
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": meta,
            "data": data,
        }
        if doc is None:
            self.kcp.create(gateway.SECRETS, self.namespace, body)
        else:
            meta["resourceVersion"] = (doc.get("metadata") or {}).get("resourceVersion")
            self.kcp.replace(gateway.SECRETS, self.namespace, self.secret, body)

    def _publish(self, bundle: bytes) -> None:
        doc = self.kcp.get_or_none(gateway.CONFIGMAPS, self.namespace, self.config_map)
        if doc is not None and (doc.get("data") or {}).get("ca.crt") == bundle.decode():
            return
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": self.config_map,
                "namespace": self.namespace,
                "labels": {
                    "app.kubernetes.io/part-of": "tether",
                    apitypes.MANAGED_BY_LABEL: "tether-enroller",
                },
            },
            "data": {"ca.crt": bundle.decode()},
        }
        if doc is None:
            self.kcp.create(gateway.CONFIGMAPS, self.namespace, body)
        else:
            body["metadata"]["resourceVersion"] = doc["metadata"]["resourceVersion"]
            self.kcp.replace(gateway.CONFIGMAPS, self.namespace, self.config_map, body)

    def _audit(self, event: str, ca: certs.CertificateAuthority, **extra: str) -> None:
        logs.audit(
            self.audit,
            event,
            serial=format(ca.cert.serial_number, "x"),
            not_after=times.format_time(certs.not_after(ca.cert)),
            **extra,
        )


def _decoded(doc: Mapping[str, Any]) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in (doc.get("data") or {}).items()}
