"""Helpers for the tests against a real Kubernetes (importable as `k8s_testing`).

- `prepare()`: builds the cluster's binaries once per machine (scripts/k8s-build, ~12 min the
  first time, at once when cached); raises ClusterUnavailable when that cannot be done here.
- `Cluster`: a single-node cluster started by scripts/k8s-up on a Docker engine (its kubelet's
  pods are that engine's containers), stopped by scripts/k8s-down (by pid). Its apiserver
  runs without a watch cache; `compact_etcd()` makes every older resourceVersion 410 Gone,
  `restart_apiserver()` stops and starts the apiserver under running clients
  (`stop_apiserver()` and `start_apiserver()` apart: the backend down for a while).
- `make_k8s_daemon(cluster, namespace)`: a txd (not started) whose kubernetes and
  kubernetes_mcad schedulers use the cluster's kubeconfig and run in `namespace` by default.
- `K8S_CFG`: the run options every end-to-end job passes (host network, local images);
  `sh_role` and `gated_role`: roles of such jobs.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from docker_testing import BUSYBOX
from txd.v1 import BindMount, Mount, Role
from txd_testing import REPO, Daemon, short_tmpdir

SCRIPTS = REPO / "scripts"
BUILD_TIMEOUT = 1800.0
UP_TIMEOUT = 240.0
DOWN_TIMEOUT = 180.0
KUBECTL_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
# On SIGTERM the 1.20 apiserver stops accepting, then lets open watches (the kubelet's, the
# controllers') run for up to its request timeout, 1 min, before it exits.
APISERVER_GRACE = 5.0
READY_TIMEOUT = 60.0
CRDS = Path(__file__).resolve().parent / "crds"  # Volcano's Job, both AppWrappers
SCHEDULERS = ("kubernetes", "kubernetes_mcad")
# Pods share the node's network (no traffic to private-range addresses) and run the engine's
# own test images (there is no registry to pull from).
K8S_CFG: dict[str, str | bool] = {"host_network": True, "image_pull_policy": "IfNotPresent"}


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

    @property
    def etcd_url(self) -> str:
        return (self.run_dir / "etcd-url").read_text().strip()

    def _etcd(self, call: str, body: dict[str, Any]) -> Any:
        req = urllib.request.Request(
            f"{self.etcd_url}/v3/{call}", data=json.dumps(body).encode(), method="POST"
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())

    def compact_etcd(self, advance: int = 0) -> int:
        """Compacts etcd to its current revision (through its v3 HTTP gateway): every older
        resourceVersion is gone, so a watch from one answers 410. Returns the revision.
        `advance`: first writes a key outside the apiserver's prefix this many times, so that
        even the newest version a client has seen is gone (a watch from version v starts at
        v + 1: 2 makes that compacted too)."""
        key = base64.b64encode(b"/txd-test/advance").decode()
        for i in range(advance):
            self._etcd("kv/put", {"key": key, "value": base64.b64encode(str(i).encode()).decode()})
        # Any range answers with the store's current revision in its header.
        header = self._etcd("kv/range", {"key": base64.b64encode(b"/").decode()})["header"]
        revision = int(header["revision"])
        self._etcd("kv/compaction", {"revision": str(revision), "physical": True})
        return revision

    def restart_apiserver(
        self, grace: float = APISERVER_GRACE, while_down: Callable[[], object] | None = None
    ) -> None:
        """Stops the apiserver (stop_apiserver), calls `while_down` if given, and starts it
        again (start_apiserver)."""
        argv = self.stop_apiserver(grace)
        if while_down is not None:
            while_down()
        self.start_apiserver(argv)

    def stop_apiserver(self, grace: float = APISERVER_GRACE) -> list[bytes]:
        """Stops the apiserver (SIGTERM by pid; SIGKILL if it still runs `grace` seconds later,
        as it would while draining the cluster's watches); returns its command line."""
        pid = int((self.run_dir / "kube-apiserver.pid").read_text())
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        os.kill(pid, signal.SIGTERM)
        if not _wait(lambda: not _running(pid), grace):
            os.kill(pid, signal.SIGKILL)
            assert _wait(lambda: not _running(pid), STOP_TIMEOUT), f"apiserver {pid} did not exit"
        return argv

    def start_apiserver(self, argv: list[bytes]) -> None:
        """Starts the apiserver stopped by stop_apiserver with the same command line, log and
        pid files; returns once /readyz answers ok."""
        # As scripts/k8s-up starts it: its own session, stdin closed, appending to its log.
        log = self.run_dir / "log" / "kube-apiserver.log"
        started = subprocess.run(
            ["bash", "-c", 'setsid "$@" </dev/null >>"$0" 2>&1 & echo $!', str(log), *argv],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        new_pid = int(started.stdout)
        (self.run_dir / "kube-apiserver.pid").write_text(f"{new_pid}\n")
        assert _wait(lambda: self._ready(new_pid), READY_TIMEOUT), (
            f"the restarted apiserver was not ready within {READY_TIMEOUT} s; see {log}"
        )

    def _ready(self, pid: int) -> bool:
        assert _running(pid), "the restarted apiserver exited"
        req = urllib.request.Request(
            f"{self.server}/readyz", headers={"Authorization": f"Bearer {self.token}"}
        )
        try:
            with urllib.request.urlopen(
                req, timeout=5, context=ssl.create_default_context(cafile=str(self.ca))
            ) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def install_crds(self) -> list[str]:
        """Installs the CRDs of tests/schedulers/kubernetes/crds (again: no change) and waits
        until the apiserver serves them (Established); returns their names."""
        out = self.kubectl("apply", "-f", str(CRDS), "-o", "name").stdout.split()
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", *out, timeout=90)
        return [name.removeprefix("customresourcedefinition.apiextensions.k8s.io/") for name in out]


def _running(pid: int) -> bool:
    """Whether a process runs (a zombie has exited: its reaper may take a moment)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return not re.search(r"^State:\s*Z", status, re.MULTILINE)


def _wait(done: Callable[[], bool], timeout: float) -> bool:
    """Polls `done` until it holds (True) or `timeout` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def make_k8s_daemon(
    cluster: Cluster, namespace: str, kubeconfig: Path | None = None, args: Sequence[str] = ()
) -> Daemon:
    """A txd (not started) whose kubernetes schedulers use `kubeconfig` (the cluster's by
    default) and run jobs in `namespace` unless a run names another."""
    settings: list[str] = []
    for name in SCHEDULERS:
        settings += [
            "--set",
            f"{name}.kubeconfig={kubeconfig or cluster.kubeconfig}",
            "--set",
            f"{name}.namespace={namespace}",
        ]
    # No KUBECONFIG of the caller's leaks in: the settings are the only way to the cluster.
    return Daemon(short_tmpdir("txdk-"), env={"KUBECONFIG": ""}, args=[*settings, *args])


# A pod's shell is its container's first process, which SIGTERM does not end by default: without
# this, deleting a pod (cancel, delete) waits out its 30 s grace period for the SIGKILL.
EXIT_ON_TERM = "trap 'exit 143' TERM; "


def sh_role(name: str, script: str, replicas: int = 1, image: str = BUSYBOX) -> Role:
    return Role(name=name, image=image, entrypoint="sh", args=["-c", script], num_replicas=replicas)


def gated_role(name: str, gate: Path, first: str = "up", then: str = "", replicas: int = 1) -> Role:
    """Writes `first`, waits until the test creates <gate>/go (a hostPath mount: the pod runs
    on this machine), writes `then` if given, exits 0."""
    script = f"{EXIT_ON_TERM}echo {first}; while [ ! -e /gate/go ]; do sleep 0.05; done"
    if then:
        script += f"; echo {then}"
    role = sh_role(name, script, replicas=replicas)
    role.mounts.append(Mount(bind=BindMount(src_path=str(gate), dst_path="/gate")))
    return role
