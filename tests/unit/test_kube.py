"""Kubeconfig errors are clear, whatever the file holds."""

from __future__ import annotations

import pathlib

import pytest

from common import kube


@pytest.mark.parametrize("content", ["- a\n- b\n", "just text\n", "{}\n", "clusters: 5\n"])
def test_not_a_kubeconfig(tmp_path: pathlib.Path, content: str) -> None:
    path = tmp_path / "config"
    path.write_text(content)
    with pytest.raises(kube.KubeConfigError, match="cannot load Kubernetes configuration"):
        kube.api_client(str(path))
    with pytest.raises(kube.KubeConfigError):
        kube.api_client_from_kubeconfig_bytes(content)


def test_missing_file(tmp_path: pathlib.Path) -> None:
    with pytest.raises(kube.KubeConfigError):
        kube.api_client(str(tmp_path / "nope"))
