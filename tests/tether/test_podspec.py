"""The pod runner's reading of pod templates (``testing.podspec``), with plain data."""

from __future__ import annotations

import pytest

from testing import controlplane, podspec

FACTS = podspec.PodFacts(
    name="web-1",
    namespace="ns",
    uid="u-1",
    node="local",
    pod_ip="127.200.0.9",
    host_ip="127.0.0.1",
    service_account="sa",
    labels={"app": "web"},
    annotations={},
)
SECRETS = {"creds": {"user": b"alice", "tls.crt": b"CERT"}}
MAPS = {"cfg": {"MODE": b"fast", "LEVEL": b"3"}}
LOOK = podspec.Lookups(secret=SECRETS.get, config_map=MAPS.get)
IMAGE = podspec.Image(
    entrypoint=("tini", "--"),
    cmd=("tether", "--help"),
    user=65532,
    group=65532,
    workdir="/",
    env=(),
    path=("/venv/bin",),
)


def test_references_expand_in_order_with_the_kubernetes_escapes() -> None:
    env = {"A": "x"}
    assert podspec.expand("$(A)-$(B)-$$(A)-$$", env) == "x-$(B)-$(A)-$"
    c = {
        "name": "c",
        "env": [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "BIND", "value": "$(POD_IP):8443"},
            {"name": "EARLY", "value": "$(LATE)"},
            {"name": "LATE", "value": "y"},
        ],
    }
    got = podspec.environment(c, FACTS, LOOK, {})
    assert got["BIND"] == "127.200.0.9:8443"
    assert got["EARLY"] == "$(LATE)"  # defined after it: left as written


def test_env_from_secrets_config_maps_and_fields() -> None:
    c = {
        "name": "c",
        "envFrom": [
            {"configMapRef": {"name": "cfg"}, "prefix": "APP_"},
            {"secretRef": {"name": "absent", "optional": True}},
        ],
        "env": [
            {"name": "USER", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "user"}}},
            {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "MODE"}}},
            {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "APPL", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {
                "name": "OPT",
                "valueFrom": {"secretKeyRef": {"name": "creds", "key": "no", "optional": True}},
            },
        ],
    }
    got = podspec.environment(c, FACTS, LOOK, {"PATH": "/bin"})
    assert got == {
        "PATH": "/bin",
        "APP_MODE": "fast",
        "APP_LEVEL": "3",
        "USER": "alice",
        "MODE": "fast",
        "NAME": "web-1",
        "APPL": "web",
    }


@pytest.mark.parametrize(
    "env, message",
    [
        (
            [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}}],
            "secret 'creds' has no key 'password'",
        ),
        (
            [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "k"}}}],
            "configmap 'gone' not found",
        ),
    ],
)
def test_a_missing_reference_is_what_the_kubelet_reports(
    env: list[dict[str, object]], message: str
) -> None:
    with pytest.raises(podspec.Invalid, match=message):
        podspec.environment({"name": "c", "env": env}, FACTS, LOOK, {})


def test_command_and_args_replace_entrypoint_and_cmd() -> None:
    env = {"PART": "webhook"}
    assert podspec.command_line({"command": ["tether", "$(PART)"]}, IMAGE, env) == [
        "tether",
        "webhook",
    ]
    assert podspec.command_line({"args": ["tether", "compass"]}, IMAGE, env) == [
        "tini",
        "--",
        "tether",
        "compass",
    ]
    assert podspec.command_line({}, IMAGE, env) == ["tini", "--", "tether", "--help"]
    bare = podspec.Image((), (), None, None, "/", (), ())
    with pytest.raises(podspec.Invalid, match="no command"):
        podspec.command_line({"name": "c"}, bare, env)


def test_the_dockerfile_gives_the_images_user_and_commands() -> None:
    image = podspec.Image.from_dockerfile(
        (controlplane.REPO_ROOT / "Dockerfile").read_text(), ("/x",)
    )
    assert (image.user, image.entrypoint, image.cmd) == (65532, (), ("tether", "--help"))
    parsed = podspec.Image.from_dockerfile(
        'FROM a AS b\nUSER 1\nFROM c\n# CMD ["no"]\nENV A=1 B="two words"\nUSER 7:8\nWORKDIR /app\n'
        'ENTRYPOINT ["/bin/run", \\\n "x"]\nCMD serve now\n',
        (),
    )
    assert (parsed.user, parsed.group, parsed.workdir) == (7, 8, "/app")
    assert parsed.entrypoint == ("/bin/run", "x") and parsed.cmd == ("/bin/sh", "-c", "serve now")
    assert dict(parsed.env) == {"A": "1", "B": "two words"}


POD = {
    "containers": [
        {
            "name": "c",
            "image": "tether:0.1.0",
            "resources": {"limits": {"memory": "1Gi"}},
            "ports": [{"name": "https", "containerPort": 8443}],
            "readinessProbe": {"httpGet": {"path": "/readyz", "port": "https"}},
            "securityContext": {"capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": True},
            "volumeMounts": [{"name": "v", "mountPath": "/v"}],
        }
    ],
    "volumes": [{"name": "v", "emptyDir": {}}],
    "topologySpreadConstraints": [],
    "dnsPolicy": "ClusterFirst",
}


def test_what_one_machine_cannot_enforce_is_listed() -> None:
    notes = podspec.check_pod(POD, "deployment d")
    assert any("topologySpreadConstraints: not enforced" in n for n in notes)
    assert any("container 'c'.resources: not enforced (no cgroup limits" in n for n in notes)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"hostNetwork": True}, r"deployment d\.spec\.hostNetwork is not supported"),
        (
            {"volumes": [{"name": "v", "hostPath": {"path": "/"}}]},
            r"volume 'v': \['hostPath'\] is not supported",
        ),
        ({"restartPolicy": "Never"}, "only Always"),
        (
            {"containers": [{"name": "c", "lifecycle": {}}]},
            r"container 'c'\.lifecycle is not supported",
        ),
        (
            {"containers": [{"name": "c", "livenessProbe": {"exec": {"command": ["true"]}}}]},
            r"livenessProbe: \['exec'\] is not supported",
        ),
        (
            {
                "containers": [
                    {"name": "c", "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}
                ]
            },
            "only drop",
        ),
        (
            {
                "containers": [
                    {"name": "c", "env": [{"name": "X", "valueFrom": {"resourceFieldRef": {}}}]}
                ]
            },
            r"valueFrom \['resourceFieldRef'\] is not supported",
        ),
    ],
)
def test_what_the_runner_cannot_honour_is_refused_by_name(
    change: dict[str, object], message: str
) -> None:
    with pytest.raises(podspec.Unsupported, match=message):
        podspec.check_pod({**POD, **change}, "deployment d")


def test_volume_files_follow_items_modes_and_optional() -> None:
    vol = {
        "name": "s",
        "secret": {
            "secretName": "creds",
            "defaultMode": 0o440,
            "items": [{"key": "tls.crt", "path": "certs/tls.crt"}],
        },
    }
    files = podspec.volume_files(vol, FACTS, LOOK, lambda a, s: "tok", b"CA")
    assert files == [podspec.File("certs/tls.crt", b"CERT", 0o440)]
    proj = {
        "name": "p",
        "projected": {
            "sources": [
                {
                    "serviceAccountToken": {
                        "path": "token",
                        "audience": "kcp",
                        "expirationSeconds": 600,
                    }
                },
                {"configMap": {"name": "cfg", "items": [{"key": "MODE", "path": "mode"}]}},
                {"secret": {"name": "absent", "optional": True}},
                {
                    "downwardAPI": {
                        "items": [{"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]
                    }
                },
            ]
        },
    }
    asked: list[tuple[str, int]] = []
    got = podspec.volume_files(proj, FACTS, LOOK, lambda a, s: asked.append((a, s)) or "tok", b"CA")
    assert got == [
        podspec.File("token", b"tok", 0o644),
        podspec.File("mode", b"fast", 0o644),
        podspec.File("name", b"web-1", 0o644),
    ]
    assert asked == [("kcp", 600)]
    assert (
        podspec.volume_files({"name": "e", "emptyDir": {}}, FACTS, LOOK, lambda a, s: "", b"")
        is None
    )
    with pytest.raises(podspec.Invalid, match="secret 'gone' not found"):
        podspec.volume_files(
            {"name": "g", "secret": {"secretName": "gone"}}, FACTS, LOOK, lambda a, s: "", b""
        )
    with pytest.raises(podspec.Invalid, match="relative without"):
        podspec.safe_relative("../etc/passwd")
