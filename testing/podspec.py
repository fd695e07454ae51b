"""What a kubelet makes of a pod template, as plain data: the command line of each
container (the image's entrypoint mapped to local executables), its environment (``env``
with ``valueFrom`` and ``$(VAR)`` references, ``envFrom``), the files of its volumes, and
the fields the pod runner honours, does not enforce, or refuses.

No I/O: Secrets, ConfigMaps and tokens come in through ``Lookups``; ``testing.podrunner``
does the rest. The rules follow the Kubernetes API reference (core/v1 Container, EnvVar,
Volume, Probe) for the subset Tether's manifests use; anything outside it raises
``Unsupported`` naming the field, so nothing is silently skipped.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import pathlib
import re
import shlex
from collections.abc import Callable, Mapping
from typing import Any


class Unsupported(ValueError):
    """A field of a manifest the pod runner cannot honour."""


class Invalid(ValueError):
    """A pod that a kubelet would not start (a missing Secret key, say): the message is
    what the kubelet would report (CreateContainerConfigError)."""


# -- what is honoured, what is accepted but not enforced on one machine ------------------

POD_FIELDS = {
    "containers",
    "serviceAccountName",
    "serviceAccount",
    "terminationGracePeriodSeconds",
    "securityContext",
    "volumes",
    "automountServiceAccountToken",
    "restartPolicy",
    "enableServiceLinks",
    "hostAliases",
    # API defaults of every pod: ClusterFirst names resolve through the pod's hosts file
    "dnsPolicy",
    "schedulerName",
}
# scheduling and isolation that one machine cannot give; reported, never silently dropped
POD_NOT_ENFORCED = {
    "topologySpreadConstraints": "one node: nothing to spread over",
    "affinity": "one node: nothing to schedule",
    "nodeSelector": "one node: nothing to schedule",
    "tolerations": "one node: nothing to schedule",
    "priorityClassName": "no preemption on one machine",
}
POD_SECURITY = {"runAsNonRoot", "runAsUser", "runAsGroup", "fsGroup", "supplementalGroups"}
POD_SECURITY_NOT_ENFORCED = {"seccompProfile": "no seccomp filter is installed"}
CONTAINER_FIELDS = {
    "name",
    "image",
    "imagePullPolicy",
    "command",
    "args",
    "env",
    "envFrom",
    "ports",
    "startupProbe",
    "livenessProbe",
    "readinessProbe",
    "securityContext",
    "volumeMounts",
    "workingDir",
    "terminationMessagePath",
    "terminationMessagePolicy",
}
CONTAINER_NOT_ENFORCED = {"resources": "no cgroup limits: requests and limits are not applied"}
CONTAINER_SECURITY = {
    "allowPrivilegeEscalation",
    "readOnlyRootFilesystem",
    "runAsNonRoot",
    "runAsUser",
    "runAsGroup",
    "capabilities",
    "privileged",
}
CONTAINER_SECURITY_NOT_ENFORCED = {"seccompProfile": "no seccomp filter is installed"}
PROBE_FIELDS = {
    "httpGet",
    "tcpSocket",
    "initialDelaySeconds",
    "periodSeconds",
    "timeoutSeconds",
    "successThreshold",
    "failureThreshold",
    "terminationGracePeriodSeconds",
}
MOUNT_FIELDS = {"name", "mountPath", "readOnly", "subPath"}
VOLUME_KINDS = {"secret", "configMap", "emptyDir", "projected"}


def check_pod(spec: Mapping[str, Any], where: str) -> list[str]:
    """Raise ``Unsupported`` for a field the runner cannot honour; return the list of
    fields accepted but not enforced here (with why), for the runner's report."""
    notes: list[str] = []
    for key in spec:
        if key in POD_NOT_ENFORCED:
            notes.append(f"{where}.spec.{key}: not enforced ({POD_NOT_ENFORCED[key]})")
        elif key not in POD_FIELDS:
            raise Unsupported(f"{where}.spec.{key} is not supported by the pod runner")
    if spec.get("dnsPolicy", "ClusterFirst") not in ("ClusterFirst", "Default"):
        raise Unsupported(
            f"{where}.spec.dnsPolicy {spec['dnsPolicy']!r}: only ClusterFirst, Default"
        )
    if spec.get("restartPolicy", "Always") != "Always":
        raise Unsupported(f"{where}.spec.restartPolicy {spec['restartPolicy']!r}: only Always")
    for key in spec.get("securityContext") or {}:
        if key in POD_SECURITY_NOT_ENFORCED:
            notes.append(
                f"{where}.spec.securityContext.{key}: not enforced "
                f"({POD_SECURITY_NOT_ENFORCED[key]})"
            )
        elif key not in POD_SECURITY:
            raise Unsupported(f"{where}.spec.securityContext.{key} is not supported")
    for vol in spec.get("volumes") or []:
        kinds = set(vol) - {"name"}
        if len(kinds) != 1 or not kinds <= VOLUME_KINDS:
            raise Unsupported(
                f"{where} volume {vol.get('name')!r}: {sorted(kinds)} is not "
                f"supported (only {sorted(VOLUME_KINDS)})"
            )
        if "projected" in vol:
            for src in vol["projected"].get("sources") or []:
                if set(src) - {"serviceAccountToken", "secret", "configMap", "downwardAPI"}:
                    raise Unsupported(
                        f"{where} volume {vol['name']!r}: projected source "
                        f"{sorted(src)} is not supported"
                    )
    names = {v["name"] for v in spec.get("volumes") or []}
    for c in spec.get("containers") or []:
        cw = f"{where} container {c.get('name')!r}"
        for key in c:
            if key in CONTAINER_NOT_ENFORCED:
                notes.append(f"{cw}.{key}: not enforced ({CONTAINER_NOT_ENFORCED[key]})")
            elif key not in CONTAINER_FIELDS:
                raise Unsupported(f"{cw}.{key} is not supported by the pod runner")
        for key in c.get("securityContext") or {}:
            if key in CONTAINER_SECURITY_NOT_ENFORCED:
                notes.append(
                    f"{cw}.securityContext.{key}: not enforced "
                    f"({CONTAINER_SECURITY_NOT_ENFORCED[key]})"
                )
            elif key not in CONTAINER_SECURITY:
                raise Unsupported(f"{cw}.securityContext.{key} is not supported")
        sc = c.get("securityContext") or {}
        if sc.get("privileged"):
            raise Unsupported(f"{cw}: privileged containers are not supported")
        caps = sc.get("capabilities") or {}
        if set(caps) - {"drop"} or (caps.get("drop") and caps["drop"] != ["ALL"]):
            raise Unsupported(
                f"{cw}.securityContext.capabilities: only drop [ALL] "
                "(a non-root process holds none)"
            )
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            p = c.get(probe)
            if p is None:
                continue
            extra = set(p) - PROBE_FIELDS
            if extra:
                raise Unsupported(
                    f"{cw}.{probe}: {sorted(extra)} is not supported (httpGet and tcpSocket are)"
                )
            if ("httpGet" in p) == ("tcpSocket" in p):
                raise Unsupported(f"{cw}.{probe}: needs exactly one of httpGet, tcpSocket")
        for m in c.get("volumeMounts") or []:
            if set(m) - MOUNT_FIELDS:
                raise Unsupported(
                    f"{cw} mount {m.get('name')!r}: {sorted(set(m) - MOUNT_FIELDS)} "
                    "is not supported"
                )
            if m["name"] not in names:
                raise Invalid(f"{cw} mounts volume {m['name']!r}, which the pod does not declare")
        for e in c.get("env") or []:
            src = e.get("valueFrom") or {}
            if set(src) - {"secretKeyRef", "configMapKeyRef", "fieldRef"}:
                raise Unsupported(f"{cw} env {e['name']}: valueFrom {sorted(src)} is not supported")
        for e in c.get("envFrom") or []:
            if set(e) - {"configMapRef", "secretRef", "prefix"}:
                raise Unsupported(f"{cw} envFrom {sorted(e)} is not supported")
    return notes


# -- the image ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Image:
    """What the runner needs of an image: its entrypoint, command, user, working folder and
    environment (from the Dockerfile's last stage) and where its executables are locally."""

    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]
    user: int | None
    group: int | None
    workdir: str
    env: tuple[tuple[str, str], ...]
    path: tuple[str, ...]  # local folders searched for the command (the image's PATH)

    @classmethod
    def from_dockerfile(cls, text: str, path: tuple[str, ...]) -> Image:
        """The final stage's ENTRYPOINT, CMD, USER, WORKDIR and ENV (JSON or shell form)."""
        stage = re.split(r"(?im)^FROM\s", _joined(text))[-1]
        entry: tuple[str, ...] = ()
        cmd: tuple[str, ...] = ()
        user = group = None
        workdir = "/"
        env: dict[str, str] = {}
        for line in stage.splitlines():
            word, _, rest = line.strip().partition(" ")
            word, rest = word.upper(), rest.strip()
            if word == "ENTRYPOINT":
                entry = _exec_form(rest)
            elif word == "CMD":
                cmd = _exec_form(rest)
            elif word == "USER":
                u, _, g = rest.partition(":")
                user, group = int(u), int(g) if g else None
            elif word == "WORKDIR":
                workdir = rest
            elif word == "ENV":
                for item in shlex.split(rest):
                    k, _, v = item.partition("=")
                    env[k] = v
        return cls(entry, cmd, user, group, workdir, tuple(env.items()), path)


def _joined(text: str) -> str:
    """Dockerfile text with line continuations joined and comments dropped."""
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    return re.sub(r"\\\n", " ", "\n".join(lines))


def _exec_form(rest: str) -> tuple[str, ...]:
    if rest.startswith("["):
        return tuple(json.loads(rest))
    return ("/bin/sh", "-c", rest)


def command_line(container: Mapping[str, Any], image: Image, env: Mapping[str, str]) -> list[str]:
    """Kubernetes' rule: ``command`` replaces the image's ENTRYPOINT and ``args`` its CMD
    (``args`` alone keeps the ENTRYPOINT); ``$(VAR)`` in both is expanded from the
    container's environment."""
    if "command" in container:
        argv = list(container["command"]) + list(container.get("args") or [])
    elif "args" in container:
        argv = list(image.entrypoint) + list(container["args"])
    else:
        argv = list(image.entrypoint) + list(image.cmd)
    if not argv:
        raise Invalid(f"container {container.get('name')!r}: no command (image has none)")
    return [expand(a, env) for a in argv]


# -- environment -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PodFacts:
    """What fieldRef can name."""

    name: str
    namespace: str
    uid: str
    node: str
    pod_ip: str
    host_ip: str
    service_account: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]

    def field(self, path: str) -> str:
        simple = {
            "metadata.name": self.name,
            "metadata.namespace": self.namespace,
            "metadata.uid": self.uid,
            "spec.nodeName": self.node,
            "spec.serviceAccountName": self.service_account,
            "status.podIP": self.pod_ip,
            "status.podIPs": self.pod_ip,
            "status.hostIP": self.host_ip,
            "status.hostIPs": self.host_ip,
        }
        if path in simple:
            return simple[path]
        m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
        if m:
            return (self.labels if m.group(1) == "labels" else self.annotations).get(m.group(2), "")
        raise Unsupported(f"fieldRef {path!r} is not supported")


@dataclasses.dataclass
class Lookups:
    """Reads of the pod's namespace: a Secret's or ConfigMap's data (decoded), None when
    it does not exist."""

    secret: Callable[[str], Mapping[str, bytes] | None]
    config_map: Callable[[str], Mapping[str, bytes] | None]


_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(value: str, env: Mapping[str, str]) -> str:
    """``$(VAR)`` from ``env``; ``$$`` is a literal ``$``; an unknown reference stays as
    written (the Kubernetes rule)."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)

    return _REF.sub(sub, value)


def environment(
    container: Mapping[str, Any], pod: PodFacts, look: Lookups, base: Mapping[str, str]
) -> dict[str, str]:
    """The container's environment: ``base`` (the image's ENV and what the kubelet adds),
    then ``envFrom`` in order, then ``env`` in order, each ``$(VAR)`` resolved against what
    is defined before it."""
    out = dict(base)
    cname = container.get("name")
    for src in container.get("envFrom") or []:
        prefix = src.get("prefix", "")
        kind, ref = (
            ("Secret", src["secretRef"])
            if "secretRef" in src
            else ("ConfigMap", src["configMapRef"])
        )
        data = (look.secret if kind == "Secret" else look.config_map)(ref["name"])
        if data is None:
            if ref.get("optional"):
                continue
            raise Invalid(f"container {cname!r}: {kind.lower()} {ref['name']!r} not found")
        for k, v in data.items():
            out[prefix + k] = v.decode()
    for e in container.get("env") or []:
        name = e["name"]
        if "value" in e or "valueFrom" not in e:
            out[name] = expand(e.get("value", ""), out)
            continue
        src = e["valueFrom"]
        if "fieldRef" in src:
            out[name] = pod.field(src["fieldRef"]["fieldPath"])
            continue
        kind, ref = (
            ("Secret", src["secretKeyRef"])
            if "secretKeyRef" in src
            else ("ConfigMap", src["configMapKeyRef"])
        )
        data = (look.secret if kind == "Secret" else look.config_map)(ref["name"])
        if data is None or ref["key"] not in data:
            if ref.get("optional"):
                continue
            what = "not found" if data is None else f"has no key {ref['key']!r}"
            raise Invalid(f"container {cname!r} env {name}: {kind.lower()} {ref['name']!r} {what}")
        out[name] = data[ref["key"]].decode()
    return out


# -- volumes -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class File:
    path: str  # relative to the volume's root
    data: bytes
    mode: int


TokenSource = Callable[[str, int], str]  # (audience, expirationSeconds) -> token


def volume_files(
    volume: Mapping[str, Any], pod: PodFacts, look: Lookups, token: TokenSource, ca_pem: bytes
) -> list[File] | None:
    """The files of a Secret, ConfigMap or projected volume (None for an emptyDir).
    ``items`` select and rename keys; ``defaultMode``/``mode`` set permissions (0644 by
    default); ``optional`` allows a missing object."""
    if "emptyDir" in volume:
        return None
    name = volume["name"]
    if "secret" in volume:
        v = volume["secret"]
        return _keyed(
            look.secret(v["secretName"]),
            v,
            f"volume {name!r}: secret {v['secretName']!r}",
            v.get("defaultMode", 0o644),
        )
    if "configMap" in volume:
        v = volume["configMap"]
        return _keyed(
            look.config_map(v["name"]),
            v,
            f"volume {name!r}: configmap {v['name']!r}",
            v.get("defaultMode", 0o644),
        )
    proj = volume["projected"]
    mode = proj.get("defaultMode", 0o644)
    files: list[File] = []
    for src in proj.get("sources") or []:
        if "serviceAccountToken" in src:
            t = src["serviceAccountToken"]
            files.append(
                File(
                    t["path"],
                    token(t.get("audience", ""), int(t.get("expirationSeconds", 3600))).encode(),
                    mode,
                )
            )
        elif "secret" in src:
            s = src["secret"]
            files += _keyed(
                look.secret(s["name"]), s, f"volume {name!r}: secret {s['name']!r}", mode
            )
        elif "configMap" in src:
            s = src["configMap"]
            files += _keyed(
                look.config_map(s["name"]), s, f"volume {name!r}: configmap {s['name']!r}", mode
            )
        else:
            for item in src["downwardAPI"].get("items") or []:
                if "fieldRef" not in item:
                    raise Unsupported(
                        f"volume {name!r}: downwardAPI {sorted(item)} is not supported"
                    )
                files.append(
                    File(
                        item["path"],
                        pod.field(item["fieldRef"]["fieldPath"]).encode(),
                        item.get("mode", mode),
                    )
                )
    return files


def _keyed(
    data: Mapping[str, bytes] | None, ref: Mapping[str, Any], what: str, mode: int
) -> list[File]:
    if data is None:
        if ref.get("optional"):
            return []
        raise Invalid(f"{what} not found")
    items = ref.get("items")
    if not items:
        return [File(k, v, mode) for k, v in sorted(data.items())]
    out = []
    for item in items:
        if item["key"] not in data:
            if ref.get("optional"):
                continue
            raise Invalid(f"{what} has no key {item['key']!r}")
        out.append(File(item["path"], data[item["key"]], item.get("mode", mode)))
    return out


def service_account_files(token: str, ca_pem: bytes, namespace: str) -> list[File]:
    """What the ServiceAccount admission plugin and the kubelet mount at
    /var/run/secrets/kubernetes.io/serviceaccount (kube-api-access-*)."""
    return [
        File("token", token.encode(), 0o644),
        File("ca.crt", ca_pem, 0o644),
        File("namespace", namespace.encode(), 0o644),
    ]


SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def decode(data: Mapping[str, str] | None, binary: bool) -> dict[str, bytes]:
    """A Secret's base64 ``data`` (binary) or a ConfigMap's ``data`` as bytes."""
    if not data:
        return {}
    if binary:
        return {k: base64.b64decode(v) for k, v in data.items()}
    return {k: v.encode() for k, v in data.items()}


def port_number(container: Mapping[str, Any], port: int | str) -> int:
    """A probe's or Service's port: a number, or the name of a container port."""
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for p in container.get("ports") or []:
        if p.get("name") == port:
            return int(p["containerPort"])
    raise Invalid(f"container {container.get('name')!r} has no port named {port!r}")


def safe_relative(path: str) -> pathlib.PurePosixPath:
    """A volume item's path: relative, without '..' (the API server validates the same)."""
    p = pathlib.PurePosixPath(path)
    if p.is_absolute() or ".." in p.parts or not p.parts:
        raise Invalid(f"volume item path {path!r} must be relative without '..'")
    return p
