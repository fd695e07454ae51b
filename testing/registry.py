"""A real OCI registry on loopback: the CNCF distribution registry
(``github.com/distribution/distribution/v3``, ``cmd/registry``), built from its Go module by
``hack/build-registry.sh`` at the version in ``hack/registry-version.env`` and cached outside
the checkout like the control plane. It serves over TLS with a certificate for
``127.0.0.1``/``localhost`` from a CA made for it (``ca_file``), stores in a temporary folder
(filesystem driver), and has no authentication. The module tests push the Kyma module's OCM
component to it and read it back the way lifecycle-manager does (testing/ocidist.py).

    with registry.Registry(tmp_path).running() as reg:
        client = ocidist.Client(reg.url, reg.ca_file)

Environment:
    TETHER_REGISTRY_BIN    a registry binary (skips the build)
    TETHER_REGISTRY_CACHE  cache root of the build (default ~/.cache/tether/registry)
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import IO, Any

import yaml

from testing import controlplane, scriptbuilt
from tether.base import certs

BUILD_SCRIPT = controlplane.REPO_ROOT / "hack" / "build-registry.sh"
START_TIMEOUT = 60.0


class RegistryError(RuntimeError):
    """The registry could not be built or started."""


_built = scriptbuilt.ScriptBuilt(BUILD_SCRIPT, RegistryError, "TETHER_REGISTRY_BIN")


def binary() -> pathlib.Path:
    """The registry binary; built by hack/build-registry.sh if it is not cached (or the one
    ``TETHER_REGISTRY_BIN`` names)."""
    return _built.path()


def config(root: pathlib.Path, port: int, cert: pathlib.Path, key: pathlib.Path) -> dict[str, Any]:
    """The registry's configuration: loopback only, TLS, filesystem storage, deletes allowed."""
    return {
        "version": 0.1,
        "log": {"level": "info", "accesslog": {"disabled": False}},
        "storage": {
            "filesystem": {"rootdirectory": str(root)},
            "delete": {"enabled": True},
            "redirect": {"disable": True},
        },
        "http": {
            "addr": f"127.0.0.1:{port}",
            "tls": {"certificate": str(cert), "key": str(key)},
        },
    }


class Registry:
    """One registry process; its files (data, certificate, log) under ``work``."""

    def __init__(self, work: pathlib.Path) -> None:
        self.work = work
        self.port = 0
        self.url = ""
        self.ca_file = work / "registry-ca.crt"
        self.log_path = work / "registry.log"
        self._popen: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> Registry:
        exe = binary()
        self.work.mkdir(parents=True, exist_ok=True)
        ca = certs.CertificateAuthority.create("tether-test-registry-ca")
        ca.write(self.ca_file, self.work / "registry-ca.key")
        serving = ca.issue(
            "registry", dns_names=["localhost"], ip_addresses=["127.0.0.1"], server=True
        )
        serving.write(self.work / "registry.crt", self.work / "registry.key")
        self.port = controlplane.free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        cfg = self.work / "registry.yaml"
        cfg.write_text(
            yaml.safe_dump(
                config(
                    self.work / "data",
                    self.port,
                    self.work / "registry.crt",
                    self.work / "registry.key",
                )
            )
        )
        self._log = open(self.log_path, "ab")  # noqa: SIM115 (closed in stop)
        env = dict(os.environ, OTEL_TRACES_EXPORTER="none", OTEL_SDK_DISABLED="true")
        self._popen = subprocess.Popen(
            [str(exe), "serve", str(cfg)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            preexec_fn=controlplane.die_with_parent(),
        )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        assert self._popen is not None
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        deadline = time.monotonic() + START_TIMEOUT
        last = ""
        while time.monotonic() < deadline:
            if self._popen.poll() is not None:
                raise RegistryError(
                    f"registry exited with {self._popen.returncode}: {self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/v2/", context=ctx, timeout=2) as r:
                    if r.status == 200:
                        return
            except urllib.error.HTTPError as e:
                last = f"HTTP {e.code}"
            except (urllib.error.URLError, OSError) as e:
                last = str(e)
            time.sleep(0.2)
        raise RegistryError(f"registry not ready in {START_TIMEOUT}s ({last}): {self.log_tail()}")

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self._popen is not None:
            controlplane.stop_group(self._popen, timeout=10)
            self._popen = None
        if self._log is not None:
            self._log.close()
            self._log = None

    @contextlib.contextmanager
    def running(self) -> Iterator[Registry]:
        self.start()
        try:
            yield self
        finally:
            self.stop()
