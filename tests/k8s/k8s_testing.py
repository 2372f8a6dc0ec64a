"""Helpers for the tests against a real Kubernetes (importable as `k8s_testing`).

- `prepare()`: builds the cluster's binaries once per machine (scripts/k8s-build, ~12 min the
  first time, at once when cached); raises ClusterUnavailable when that cannot be done here.
- `Cluster`: a single-node cluster started by scripts/k8s-up on a Docker engine (its kubelet's
  pods are that engine's containers), stopped by scripts/k8s-down (by pid).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from txd_testing import REPO, short_tmpdir

SCRIPTS = REPO / "scripts"
BUILD_TIMEOUT = 1800.0
UP_TIMEOUT = 240.0
DOWN_TIMEOUT = 180.0
KUBECTL_TIMEOUT = 60.0
CRDS = Path(__file__).resolve().parent / "crds"  # Volcano's Job, both AppWrappers


class ClusterUnavailable(Exception):
    """No Kubernetes can be built or started here (the reason is the message)."""


def _script(name: str, *args: str, env: dict[str, str] | None = None, timeout: float) -> str:
    proc = subprocess.run(
        [str(SCRIPTS / name), *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        raise RuntimeError(f"scripts/{name} failed ({proc.returncode}):\n{proc.stderr}")
    return proc.stdout


def prepare() -> None:
    """Builds (or finds cached) the Kubernetes binaries; without root and apt, only finds."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        try:
            _script("k8s-build", "--check", timeout=60)
        except RuntimeError as e:
            msg = f"building kubernetes needs root and apt (scripts/k8s-build): {e}"
            raise ClusterUnavailable(msg) from None
        return
    _script("k8s-build", timeout=BUILD_TIMEOUT)


def _exported(stdout: str, name: str) -> str:
    m = re.search(rf"^export {name}=(\S+)$", stdout, re.MULTILINE)
    assert m, f"no `export {name}=...` in:\n{stdout}"
    return m.group(1)


@dataclass
class Cluster:
    """A real single-node Kubernetes of this test run; the admin's credentials."""

    run_dir: Path
    docker_host: str
    kubeconfig: Path
    server: str  # https://127.0.0.1:PORT
    token: str  # bearer token of a system:masters user
    ca: Path  # the apiserver's self-signed certificate

    @classmethod
    def start_new(cls, docker_host: str) -> Cluster:
        run_dir = short_tmpdir("txd-k8s-")
        env = {**os.environ, "DOCKER_HOST": docker_host}
        try:
            out = _script("k8s-up", str(run_dir), env=env, timeout=UP_TIMEOUT)
        except BaseException:
            shutil.rmtree(run_dir, ignore_errors=True)
            raise
        return cls(
            run_dir,
            docker_host,
            Path(_exported(out, "KUBECONFIG")),
            _exported(out, "K8S_SERVER"),
            _exported(out, "K8S_TOKEN"),
            run_dir / "certs" / "apiserver.crt",
        )

    def close(self) -> None:
        env = {**os.environ, "DOCKER_HOST": self.docker_host}
        _script("k8s-down", str(self.run_dir), env=env, timeout=DOWN_TIMEOUT)
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def kubectl(
        self, *args: str, check: bool = True, timeout: float = KUBECTL_TIMEOUT
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            ["kubectl", "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check:
            assert proc.returncode == 0, (
                f"kubectl {' '.join(args)}: exit {proc.returncode}\n{proc.stdout}{proc.stderr}"
            )
        return proc

    def install_crds(self) -> list[str]:
        """Installs the CRDs of tests/k8s/crds (again: no change) and waits until the apiserver
        serves them (Established); returns their names."""
        out = self.kubectl("apply", "-f", str(CRDS), "-o", "name").stdout.split()
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", *out, timeout=90)
        return [name.removeprefix("customresourcedefinition.apiextensions.k8s.io/") for name in out]
