"""What the files a setting names hold, checked at start (``config.Spec.check_files``):
certificates and keys parse as PEM, a key matches its certificate, a kubeconfig has a
cluster, a user and a context. Each problem is a ``SettingError`` naming the variable."""

from __future__ import annotations

import pathlib
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

from tether.base.parsers import SettingError


def _read(name: str, path: str) -> bytes:
    try:
        return pathlib.Path(path).read_bytes()
    except OSError as e:
        raise SettingError(f"{name}: cannot read {path}: {e.strerror or e}") from None


def check_certificates(name: str, path: str) -> list[x509.Certificate]:
    """PEM certificates (a chain or a CA bundle), at least one."""
    try:
        found = x509.load_pem_x509_certificates(_read(name, path))
    except ValueError:
        raise SettingError(f"{name}: {path} holds no PEM certificate") from None
    return found


def check_key(name: str, path: str) -> None:
    _private_key(name, path)


def _private_key(name: str, path: str) -> PrivateKeyTypes:
    try:
        return serialization.load_pem_private_key(_read(name, path), password=None)
    except (ValueError, TypeError) as e:
        raise SettingError(
            f"{name}: {path} is not an unencrypted PEM private key ({type(e).__name__})"
        ) from None


def check_pair(cert_name: str, cert_path: str, key_name: str, key_path: str) -> None:
    """The key's public half is the first certificate's (named by the key's variable)."""
    cert = check_certificates(cert_name, cert_path)[0]
    key = _private_key(key_name, key_path)
    der = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(*der) != cert.public_key().public_bytes(*der):
        raise SettingError(f"{key_name}: {key_path} does not match the certificate of {cert_name}")


def check_kubeconfig(name: str, path: str) -> None:
    """A kubeconfig as the Kubernetes client reads it: a cluster with a server, a user and
    a current (or only) context naming them. Read only: building a client in a gunicorn
    master would write its certificates to temporary files the forked workers share."""
    try:
        doc = yaml.safe_load(_read(name, path))
    except yaml.YAMLError:
        raise SettingError(f"{name}: {path} is not YAML, so not a kubeconfig") from None

    def named(key: str) -> dict[str, Any]:
        items = doc.get(key) if isinstance(doc, dict) else None
        if not isinstance(items, list) or not items:
            raise SettingError(f"{name}: {path} is not a kubeconfig (no {key})")
        return {i["name"]: i.get(key[:-1]) for i in items if isinstance(i, dict) and "name" in i}

    clusters, users, contexts = named("clusters"), named("users"), named("contexts")
    current = doc.get("current-context") or (next(iter(contexts)) if len(contexts) == 1 else None)
    ctx = contexts.get(current) if current else None
    if not isinstance(ctx, dict):
        raise SettingError(f"{name}: {path} has no current context")
    cluster = clusters.get(str(ctx.get("cluster")))
    if not isinstance(cluster, dict) or not cluster.get("server"):
        raise SettingError(f"{name}: {path}: context {current!r} names no cluster with a server")
    if ctx.get("user") not in users:
        raise SettingError(f"{name}: {path}: context {current!r} names no user")


def check(kind: str, name: str, path: str) -> None:
    """The check of a file option's kind (``file``: it exists, checked when read)."""
    if kind == "kubeconfig":
        check_kubeconfig(name, path)
    elif kind == "certificate":
        check_certificates(name, path)
    elif kind == "key":
        check_key(name, path)
