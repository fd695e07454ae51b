"""Volume contents written the way the kubelet's AtomicWriter writes them, so that a part
reading a certificate pair while it is renewed never sees half of each."""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import time
import uuid

from testing import podspec


def atomic_write(vdir: pathlib.Path, files: list[podspec.File], fs_group: int | None) -> None:
    """The kubelet's AtomicWriter: files in a timestamped folder, ``..data`` switched to it
    in one rename, each top-level name a symlink through ``..data``; unchanged content is
    not rewritten."""
    want = {str(podspec.safe_relative(f.path)): f for f in files}
    data = vdir / "..data"
    if data.exists():
        have = {str(p.relative_to(data)): p for p in data.rglob("*") if p.is_file()}
        if set(have) == set(want) and all(
            have[k].read_bytes() == want[k].data
            and (have[k].stat().st_mode & 0o777) == want[k].mode
            for k in want
        ):
            return
    vdir.mkdir(parents=True, exist_ok=True)
    vdir.chmod(0o755)
    stamp = vdir / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{uuid.uuid4().hex[:6]}"
    stamp.mkdir()
    stamp.chmod(0o755)
    for rel, f in want.items():
        path = stamp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(f.data)
        path.chmod(f.mode)
        if fs_group is not None:
            os.chown(path, 0, fs_group)
    old = os.readlink(data) if data.is_symlink() else None
    tmp = vdir / "..data_tmp"
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    tmp.symlink_to(stamp.name)
    os.replace(tmp, data)
    for top in {rel.split("/", 1)[0] for rel in want}:
        link = vdir / top
        if not link.is_symlink():
            link.symlink_to(f"..data/{top}")
    for entry in vdir.iterdir():
        if (
            entry.is_symlink()
            and not entry.name.startswith("..")
            and entry.name not in {rel.split("/", 1)[0] for rel in want}
        ):
            entry.unlink()
    if old:
        shutil.rmtree(vdir / old, ignore_errors=True)
