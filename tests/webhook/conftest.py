"""Fixtures of the webhook tests: a runtime client certificate and the recording receiver."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from testing import receiver as receiver_mod
from testing.receiver import RUNTIME_ID, RuntimeCert
from tether.base import certs


@pytest.fixture
def runtime_cert(tmp_path: pathlib.Path) -> RuntimeCert:
    ca = certs.CertificateAuthority.create("kcp-runtime-ca")
    pair = ca.issue(RUNTIME_ID, dns_names=["c-4a1f.kyma.example.com"], client=True)
    cert, key = tmp_path / "runtime.crt", tmp_path / "runtime.key"
    pair.write(cert, key)
    return RuntimeCert(ca, cert, key)


@pytest.fixture
def receiver(tmp_path: pathlib.Path, runtime_cert: RuntimeCert) -> Iterator[receiver_mod.Receiver]:
    r = receiver_mod.Receiver(tmp_path, runtime_cert.ca).start()
    yield r
    r.stop()
