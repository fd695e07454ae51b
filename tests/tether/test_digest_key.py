"""Keyed digests (issue 38): a ``digest`` Watch's values are HMAC-SHA256 under the runtime's
own key (``tether.wire.digests.of``), the key read from the runtime's client Secret mount
(``tether.wire.watchset.read_digest_key``); without a key the unkeyed digest of earlier releases,
never a value; the KCP's check (``watches.violation``) takes both shapes for one release
(plain data)."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import logging
import pathlib
from typing import Any

import pytest

from tether.wire import changes, digests, watches, watchset

SECRET = {"group": "", "version": "v1", "resource": "secrets", "kind": "Secret"}
KEY_A, KEY_B = b"a" * 32, b"b" * 32
PORT = b"5432"  # a low-entropy value: a guesser tries every port


def digest_watch(key: bytes | None) -> watches.Watch:
    w = watches.parse(
        {
            "metadata": {"name": "creds", "generation": 1},
            "spec": {"resource": SECRET, "send": {"mode": "digest"}},
        }
    )
    return dataclasses.replace(w, digest_key=key)


def secret(value: bytes) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"namespace": "app", "name": "db", "uid": "u", "resourceVersion": "3"},
        "data": {"port": base64.b64encode(value).decode()},
    }


def sent(key: bytes | None, value: bytes = PORT) -> changes.ChangeRecord:
    return changes.from_object(
        secret(value), watch=digest_watch(key), runtime_id="rt-1", source="webhook"
    )


def test_a_keyed_digest_is_the_hmac_of_the_value_under_the_runtimes_key() -> None:
    d = sent(KEY_A)["data"]["port"]
    assert d == "hmac-sha256:" + hmac.new(KEY_A, PORT, hashlib.sha256).hexdigest()


def test_one_value_under_two_runtimes_keys_differs() -> None:
    """Equal values do not correlate across runtimes (tenants)."""
    assert sent(KEY_A)["data"]["port"] != sent(KEY_B)["data"]["port"]
    assert sent(KEY_A)["data"]["port"] == sent(KEY_A)["data"]["port"]  # stable in one runtime


def test_a_guess_without_the_key_does_not_match() -> None:
    """Whoever reads the KCP's records tries every port, unkeyed and under a wrong key:
    nothing matches the stored digest."""
    stored = sent(KEY_A)["data"]["port"]
    guesses = {digests.of(str(p).encode(), k) for p in range(65536) for k in (None, KEY_B)}
    assert stored not in guesses
    assert digests.of(PORT, KEY_A) == stored  # with the key (the runtime's own) it does


def test_without_a_key_the_digest_stays_unkeyed_never_the_value() -> None:
    rec = sent(None)
    assert rec["data"]["port"] == "sha256:" + hashlib.sha256(PORT).hexdigest()
    assert PORT.decode() not in json.dumps(rec["data"]) and rec["binaryData"] == {}


@pytest.mark.parametrize("key", [None, KEY_A])
def test_the_kcp_accepts_both_shapes_for_one_release(key: bytes | None) -> None:
    w = digest_watch(None)  # the KCP's Watch: no key
    assert watches.violation(w, sent(key)) is None


@pytest.mark.parametrize(
    "value",
    [
        "hmac-sha256:" + "0" * 63,
        "hmac-sha256:" + "A" * 64,
        "hmac-md5:" + "0" * 64,
        "hmac-sha256:" + "0" * 64 + "\n",
        base64.b64encode(PORT).decode(),
        PORT.decode(),
    ],
)
def test_anything_else_is_refused_as_a_digest(value: str) -> None:
    rec = sent(KEY_A)
    rec["data"] = {"port": value}
    assert watches.violation(digest_watch(None), rec) is not None


def test_the_key_never_shows_in_a_watchs_repr_nor_changes_its_equality() -> None:
    w = digest_watch(KEY_A)
    assert KEY_A.decode() not in repr(w) and w == digest_watch(None)


def test_the_key_file_is_read_and_a_missing_or_short_one_means_unkeyed(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    good, short = tmp_path / "digest-key", tmp_path / "short"
    good.write_bytes(KEY_A)
    short.write_bytes(b"s3cr3t-short")
    caplog.set_level(logging.WARNING)
    assert watchset.read_digest_key(str(good)) == KEY_A
    assert watchset.read_digest_key(None) is None
    assert watchset.read_digest_key(str(tmp_path / "absent")) is None
    assert watchset.read_digest_key(str(short)) is None
    assert "s3cr3t-short" not in caplog.text and KEY_A.decode() not in caplog.text
    assert "unkeyed" in caplog.text
