"""The last step of starting a container, inside its own mount namespace:

    unshare --mount --uts --propagation private -- python -m testing.podexec SPEC.json

Sets the pod's host name (its own UTS namespace: ``gethostname()`` is the pod name, as in
a pod), bind-mounts each volume at its ``mountPath`` (read-only where the mount says so), the
pod's hosts file at /etc/hosts, makes every other mount read-only when the container asks
for ``readOnlyRootFilesystem``, drops to the pod's user and groups, sets no_new_privs when
privilege escalation is not allowed, and executes the container's command with exactly its
environment. The runner (``testing.podrunner``) writes SPEC.json; nothing here decides.

A mount point that does not exist on this machine is created as an empty folder (a
container's image would hold it); the folder stays, empty, on the host.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import sys

_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38
_SKIP_READONLY = ("/proc", "/sys", "/dev")


_MS_RDONLY, _MS_REMOUNT, _MS_BIND = 1, 32, 4096
_libc = ctypes.CDLL("libc.so.6", use_errno=True)


def _sys_mount(
    source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None
) -> None:
    """mount(2) itself: a source under /proc/self/fd is resolved by the kernel, not
    canonicalized to a path a previous mount has hidden (as mount(8) would)."""
    enc = [None if s is None else s.encode() for s in (source, target, fstype, data)]
    if _libc.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]) != 0:
        err = ctypes.get_errno()
        raise SystemExit(f"podexec: mount {source} on {target}: {os.strerror(err)}")


def _bind(source: str, target: str, read_only: bool = False) -> None:
    _sys_mount(source, target, None, _MS_BIND)
    if read_only:
        _sys_mount(None, target, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY)


def _mount_points() -> list[str]:
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4].replace("\\040", " ") for line in f]
    return sorted(set(points), key=len)


def _held(path: str) -> str:
    """A path to ``path`` that stays valid when a later mount hides it (an emptyDir at
    /tmp over the volumes' own folder): this process's open descriptor of it."""
    fd = os.open(path, os.O_PATH)
    return f"/proc/self/fd/{fd}"


def _closed_ancestor(path: str) -> str | None:
    """The first folder above ``path`` that other users cannot enter (0700 /root, say)."""
    parts = os.path.abspath(path).split("/")[1:]
    for i in range(1, len(parts)):
        folder = "/" + "/".join(parts[:i])
        if not os.stat(folder).st_mode & 0o001:
            return folder
    return None


def main(path: str) -> None:
    with open(path) as f:
        spec = json.load(f)
    socket.sethostname(spec["hostname"])
    # the image's files (interpreter, venv, checkout) readable by the pod's user, as they
    # are in the image: a closed folder above one is replaced by an empty tmpfs holding
    # only that path (the rest of the folder is hidden, as it is from a container)
    all_exposed = [(p, _held(p)) for p in spec.get("expose", [])]
    exposed = [(p, held) for p, held in all_exposed if spec["uid"] and _closed_ancestor(p)]
    sources = [(m, _held(m["source"])) for m in spec["mounts"]]
    hosts = _held(spec["hosts"]) if spec.get("hosts") else None
    covered: set[str] = set()
    for p, held in exposed:
        closed = _closed_ancestor(p)
        if closed is not None and closed not in covered:
            _sys_mount("tmpfs", closed, "tmpfs", 0, "mode=0755,size=1m")
            covered.add(closed)
        os.makedirs(p, exist_ok=True)
        _bind(held, p, read_only=True)
    mounted = []
    for m, held in sources:
        os.makedirs(m["target"], exist_ok=True)
        _bind(held, m["target"], read_only=m["readOnly"])
        mounted.append(m["target"])
    if hosts:
        _bind(hosts, "/etc/hosts", read_only=True)
        mounted.append("/etc/hosts")
    # the image's files stay visible under a volume mounted above them (an emptyDir at /tmp
    # over a checkout in /tmp): bound again inside the volume's mount
    for p, held in all_exposed:  # descriptors opened before any mount: the original folders
        if any(p == t or p.startswith(t.rstrip("/") + "/") for t in mounted):
            os.makedirs(p, exist_ok=True)
            _bind(held, p, read_only=True)
    if spec["readOnlyRoot"]:
        for point in _mount_points():
            if point in mounted or point.startswith(_SKIP_READONLY):
                continue
            if any(point.startswith(t.rstrip("/") + "/") for t in mounted):
                continue
            _sys_mount(None, point, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY)
    if spec["groups"] is not None:
        os.setgroups(spec["groups"])
    if spec["gid"] is not None:
        os.setgid(spec["gid"])
    if spec["uid"] is not None:
        os.setuid(spec["uid"])
    if spec["noNewPrivs"] and _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise SystemExit("podexec: prctl(PR_SET_NO_NEW_PRIVS) failed")
    # after the user change, which clears it: die with the runner's thread
    _libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))
    os.chdir(spec["workdir"])
    argv, env = spec["argv"], spec["env"]
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as e:
        raise SystemExit(
            f"podexec: exec {argv[0]!r}: {e.strerror} (PATH={env.get('PATH', '')})"
        ) from None


if __name__ == "__main__":
    main(sys.argv[1])
