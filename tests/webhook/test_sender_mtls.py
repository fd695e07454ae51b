"""The shared ListenerClient over real mTLS against the recording receiver."""

from __future__ import annotations

import os
import pathlib
import time

import pytest

from testing import receiver as receiver_mod
from testing.receiver import Receiver
from tether.base import certs
from tether.runtime import sender
from tether.wire import changes, conversion


def _rec(name: str) -> changes.ChangeRecord:
    return conversion.from_configmap(
        {
            "metadata": {"namespace": "ns", "name": name, "uid": "u", "resourceVersion": "7"},
            "data": {"k": "v"},
        },
        runtime_id=receiver_mod.RUNTIME_ID,
        source="poller",
    )


def _client(
    receiver: Receiver,
    rc: receiver_mod.RuntimeCert,
    runtime_id: str = receiver_mod.RUNTIME_ID,
    reload_check: float = 0.0,
) -> sender.ListenerClient:
    return sender.ListenerClient(
        sender.ClientSettings(
            base_url=receiver.url,
            runtime_id=runtime_id,
            ca_file=str(receiver.ca_file),
            cert_file=str(rc.cert_file),
            key_file=str(rc.key_file),
            read_timeout=2.0,
            reload_check_seconds=reload_check,
        )
    )


def test_send_single_and_batch_over_one_connection(
    receiver: Receiver, runtime_cert: receiver_mod.RuntimeCert
) -> None:
    client = _client(receiver, runtime_cert)
    try:
        out = client.send([_rec("a")])
        assert out.verdict == "ok" and out.results[0]["outcome"] == "persisted"
        out = client.send([_rec("b"), _rec("c")])
        assert out.verdict == "ok" and [r["name"] for r in out.results] == ["b", "c"]
    finally:
        client.close()
    assert [r["name"] for r in receiver.records()] == ["a", "b", "c"]
    assert {r["cn"] for r in receiver.requests} == {receiver_mod.RUNTIME_ID}
    assert receiver.connections == 1  # keep-alive


def test_errors_are_classified(receiver: Receiver, runtime_cert: receiver_mod.RuntimeCert) -> None:
    client = _client(receiver, runtime_cert)
    try:
        receiver.mode, receiver.status, receiver.retry_after = "error", 429, "4"
        out = client.send([_rec("a")])
        assert (out.verdict, out.status, out.retry_after) == ("retryable", 429, 4.0)
        receiver.status, receiver.retry_after = 400, None
        out = client.send([_rec("a")])
        assert (out.verdict, out.error) == ("permanent", "injected")
        receiver.mode = "ok"
        out = _client(receiver, runtime_cert, runtime_id="other").send([_rec("a")])
        assert (out.verdict, out.status, out.error) == ("permanent", 403, "runtime mismatch")
        receiver.mode, receiver.delay = "slow", 3.0
        out = client.send([_rec("a")], timeout=(1.0, 0.5))
        assert (out.verdict, out.reason) == ("retryable", "timeout")
        receiver.stop()
        out = client.send([_rec("a")])
        assert (out.verdict, out.reason, out.status) == ("retryable", "connection", 0)
    finally:
        client.close()


def test_untrusted_server_is_a_tls_failure(
    receiver: Receiver, runtime_cert: receiver_mod.RuntimeCert, tmp_path: pathlib.Path
) -> None:
    other = tmp_path / "other-ca.crt"
    other.write_bytes(certs.CertificateAuthority.create("other").cert_pem)
    client = sender.ListenerClient(
        sender.ClientSettings(
            base_url=receiver.url,
            runtime_id=receiver_mod.RUNTIME_ID,
            ca_file=str(other),
            cert_file=str(runtime_cert.cert_file),
            key_file=str(runtime_cert.key_file),
        )
    )
    try:
        assert client.send([_rec("a")]).reason == "tls"
    finally:
        client.close()
    assert receiver.records() == []


def test_state_pages(receiver: Receiver, runtime_cert: receiver_mod.RuntimeCert) -> None:
    receiver.state_items = [
        {
            "namespace": "ns",
            "name": f"n{i}",
            "uid": "u",
            "resourceVersion": str(i),
            "observedAt": "2026-11-30T10:00:00.000000Z",
            "deleted": False,
        }
        for i in range(5)
    ]
    client = _client(receiver, runtime_cert)
    try:
        assert [i["name"] for i in client.iter_state(limit=2)] == [f"n{i}" for i in range(5)]
    finally:
        client.close()


def test_certificate_rotation_is_picked_up(
    receiver: Receiver, runtime_cert: receiver_mod.RuntimeCert
) -> None:
    client = _client(receiver, runtime_cert)
    try:
        assert client.send([_rec("a")]).verdict == "ok"
        # rotate to a certificate for another CN: requests must now present it
        pair = runtime_cert.ca.issue("rotated", client=True)
        pair.write(runtime_cert.cert_file, runtime_cert.key_file)
        st = os.stat(runtime_cert.cert_file)
        os.utime(runtime_cert.cert_file, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
        out = client.send([_rec("b")])
        assert (out.status, receiver.requests[-1]["cn"]) == (403, "rotated")
        # a broken rotation (key does not match) keeps the working one
        runtime_cert.key_file.write_bytes(runtime_cert.ca.issue("x", client=True).key_pem)
        time.sleep(0.01)
        assert client.send([_rec("c")]).status == 403  # still the loaded "rotated" pair
        assert client.certs_loaded()
    finally:
        client.close()


def test_missing_files_are_reported(receiver: Receiver, tmp_path: pathlib.Path) -> None:
    client = sender.ListenerClient(
        sender.ClientSettings(
            base_url=receiver.url,
            runtime_id="rt",
            ca_file=str(tmp_path / "nope"),
            cert_file=str(tmp_path / "nope.crt"),
            key_file=str(tmp_path / "nope.key"),
        )
    )
    assert not client.certs_loaded()
    out = client.send([_rec("a")])
    assert (out.verdict, out.reason) == ("retryable", "tls")
    assert "nope" in out.details
    with pytest.raises(sender.ListenerError):
        client.state_page()
