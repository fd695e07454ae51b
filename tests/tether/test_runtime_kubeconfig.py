"""A runtime's kubeconfig parsed by the allow-list (``tether.kube.gateway.kubeconfig``) and the
denied networks (``tether.kube.gateway.addresses``): plain data, no file read, nothing run."""

from __future__ import annotations

import base64
import copy
import ipaddress
from typing import Any

import pytest
import yaml

from tether.kube.gateway import addresses, kubeconfig

PEM = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
KEY = b"-----BEGIN EC PRIVATE KEY-----\nMHc\n-----END EC PRIVATE KEY-----\n"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def good() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "rt",
        "clusters": [
            {
                "name": "c",
                "cluster": {
                    "server": "https://api.rt.example.com:6443",
                    "certificate-authority-data": b64(PEM),
                },
            }
        ],
        "users": [
            {
                "name": "u",
                "user": {"client-certificate-data": b64(PEM), "client-key-data": b64(KEY)},
            }
        ],
        "contexts": [{"name": "rt", "context": {"cluster": "c", "user": "u"}}],
    }


def parse(doc: dict[str, Any]) -> kubeconfig.Connection:
    return kubeconfig.parse(yaml.safe_dump(doc))


def test_a_well_formed_kubeconfig_gives_its_connection() -> None:
    conn = parse(good())
    assert conn.server == "https://api.rt.example.com:6443" and conn.port == 6443
    assert conn.ca_pem == PEM and conn.cert_pem == PEM and conn.key_pem == KEY
    assert conn.token is None
    assert "MIIB" not in repr(conn)


def test_a_static_token_and_the_only_context_without_current_context() -> None:
    doc = good()
    del doc["current-context"]
    doc["users"][0]["user"] = {"token": "abc.def"}
    doc["clusters"][0]["cluster"]["server"] = "https://api.rt.example.com/prefix/"
    conn = parse(doc)
    assert conn.token == "abc.def" and conn.server == "https://api.rt.example.com:443/prefix"


@pytest.mark.parametrize(
    ("where", "key", "value", "field"),
    [
        ("user", "exec", {"command": "/bin/sh", "args": ["-c", "id"]}, "users[0].user.exec"),
        (
            "user",
            "auth-provider",
            {"name": "gcp", "config": {"cmd-path": "/bin/sh"}},
            "users[0].user.auth-provider",
        ),
        (
            "user",
            "tokenFile",
            "/var/run/secrets/kubernetes.io/serviceaccount/token",
            "users[0].user.tokenFile",
        ),
        ("user", "client-certificate", "/etc/tether/tls.crt", "users[0].user.client-certificate"),
        ("user", "client-key", "/etc/tether/tls.key", "users[0].user.client-key"),
        ("user", "username", "admin", "users[0].user.username"),
        ("user", "as", "system:admin", "users[0].user.as"),
        (
            "cluster",
            "certificate-authority",
            "/etc/ssl/ca.crt",
            "clusters[0].cluster.certificate-authority",
        ),
        (
            "cluster",
            "insecure-skip-tls-verify",
            True,
            "clusters[0].cluster.insecure-skip-tls-verify",
        ),
        ("cluster", "proxy-url", "http://10.0.0.1:3128", "clusters[0].cluster.proxy-url"),
        ("cluster", "some-future-field", "x", "clusters[0].cluster.some-future-field"),
    ],
)
def test_each_field_outside_the_allow_list_is_refused_by_name(
    where: str, key: str, value: Any, field: str
) -> None:
    doc = good()
    section = doc["users" if where == "user" else "clusters"][0][where]
    section[key] = value
    with pytest.raises(kubeconfig.Refused) as e:
        parse(doc)
    assert e.value.field == field and field in str(e.value)
    assert str(value) not in str(e.value) or isinstance(value, bool)  # no value in the message


@pytest.mark.parametrize(
    ("server", "why"),
    [
        ("http://api.rt.example.com", "not an https"),
        ("https://127.0.0.1:6443", "denied network"),
        ("https://[::1]:6443", "denied network"),
        ("https://169.254.169.254", "denied network"),
        ("https://10.96.0.1", "denied network"),
        ("https://100.64.0.1", "denied network"),
        ("https://[::ffff:127.0.0.1]", "denied network"),
        ("https://user:pw@api.rt.example.com", "only https://host"),
        ("https://api.rt.example.com/?x=1", "only https://host"),
        ("https://", "has no host"),
        ("https://api.rt.example.com:99999", "not a URL"),
    ],
)
def test_a_server_outside_https_or_in_a_denied_network_is_refused(server: str, why: str) -> None:
    doc = good()
    doc["clusters"][0]["cluster"]["server"] = server
    with pytest.raises(kubeconfig.Refused, match=why) as e:
        parse(doc)
    assert e.value.field == "clusters[0].cluster.server"


def test_the_deny_list_is_a_setting() -> None:
    doc = good()
    doc["clusters"][0]["cluster"]["server"] = "https://10.1.2.3"
    assert kubeconfig.parse(yaml.safe_dump(doc), denied=()).host == "10.1.2.3"


def test_several_contexts_need_a_current_context() -> None:
    doc = good()
    del doc["current-context"]
    doc["contexts"].append({"name": "other", "context": {"cluster": "c", "user": "u"}})
    with pytest.raises(kubeconfig.Refused) as e:
        parse(doc)
    assert e.value.field == "current-context"


def test_a_missing_or_half_credential_is_refused() -> None:
    doc = good()
    del doc["users"][0]["user"]["client-key-data"]
    with pytest.raises(kubeconfig.Refused, match="client-key-data"):
        parse(doc)
    doc["users"][0]["user"] = {}
    with pytest.raises(kubeconfig.Refused, match="no credential"):
        parse(doc)


def test_not_yaml_not_a_mapping_or_too_large() -> None:
    for data in (b"{[", b"- a\n- b\n", b"a: " + b"x" * (kubeconfig.MAX_BYTES + 1)):
        with pytest.raises(kubeconfig.KubeConfigError):
            kubeconfig.parse(data)


def test_undefined_cluster_or_user_is_refused() -> None:
    doc = copy.deepcopy(good())
    doc["contexts"][0]["context"]["user"] = "nobody"
    with pytest.raises(kubeconfig.Refused, match="users"):
        parse(doc)


def test_denied_networks() -> None:
    deny = addresses.DEFAULT_DENIED
    for ip in (
        "127.0.0.1",
        "169.254.169.254",
        "fd00:ec2::254",
        "::1",
        "10.0.0.1",
        "192.168.1.1",
        "172.20.0.1",
        "100.96.0.5",
        "0.0.0.0",
        "::ffff:10.0.0.1",
        "fe80::1",
    ):
        assert addresses.denied(ip, deny), ip
    for ip in ("8.8.8.8", "52.1.2.3", "2600:1f18::1"):
        assert not addresses.denied(ip, deny), ip
    assert addresses.networks(["10.0.0.0/8", " ", "::1"]) == (
        ipaddress.ip_network("10.0.0.0/8"),
        ipaddress.ip_network("::1/128"),
    )
    with pytest.raises(addresses.NetworkError):
        addresses.networks(["10.0.0.0/33"])
