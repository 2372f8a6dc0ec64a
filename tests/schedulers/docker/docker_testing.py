"""Helpers for the tests against a real Docker engine (importable as `docker_testing`).

- `Engine`: a dockerd started by scripts/docker-up, stopped by scripts/docker-down (by pid), and
  restartable on the same socket and data root.
- `Registry`: a local image registry on 127.0.0.1 (scripts/registry-up / registry-down).
- `EngineClient`: inspects containers, networks and images straight from the engine (aiodocker),
  for assertions; `EngineClient.events()` waits for engine events instead of sleeping.

The test images (scripts/docker-images) are BUSYBOX (most tests) and PYTHON (Python inside).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiodocker
from txd_testing import REPO, Daemon, short_tmpdir

BUSYBOX = "txd-test/busybox:latest"
PYTHON = "txd-test/python:3"
# Building the Python image's rootfs (debootstrap) takes ~30 s once; a cached start of the
# engine well under a second.
UP_TIMEOUT = 900.0
DOWN_TIMEOUT = 90.0
CLI_TIMEOUT = 60.0
EVENT_TIMEOUT = 30.0
SCRIPTS = REPO / "scripts"


class EngineUnavailable(Exception):
    """No Docker engine can be installed or started here (the reason is the message)."""


def _script(name: str, *args: str, env: dict[str, str] | None = None, timeout: float) -> str:
    proc = subprocess.run(
        [str(SCRIPTS / name), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"scripts/{name} failed ({proc.returncode}):\n{proc.stderr}")
    return proc.stdout


def _exported(stdout: str, name: str) -> str:
    m = re.search(rf"^export {name}=(\S+)$", stdout, re.MULTILINE)
    assert m, f"no `export {name}=...` in:\n{stdout}"
    return m.group(1)


def prepare() -> None:
    """Installs Debian's docker.io and the rest when missing (scripts/install-backends) and
    builds the test images' rootfs when not cached (scripts/docker-images --rootfs). Raises
    EngineUnavailable when the engine cannot be installed (that needs root)."""
    if not shutil.which("dockerd", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin"):
        if os.geteuid() != 0:
            raise EngineUnavailable(
                "dockerd is not installed and installing it needs root: "
                "run scripts/install-backends as root"
            )
        try:
            _script("install-backends", timeout=900)
        except RuntimeError as e:
            raise EngineUnavailable(str(e)) from None
    _script("docker-images", "--rootfs", timeout=UP_TIMEOUT)


@dataclass
class Engine:
    """A real dockerd of this test run. `host` stays the same across restart()."""

    run_dir: Path
    host: str = ""
    images: list[str] = field(default_factory=lambda: [BUSYBOX, PYTHON])
    # The process the engine runs for: should it die without stopping the engine, the next
    # docker-up stops the engine (see scripts/docker-up).
    owner: int = field(default_factory=os.getpid)

    @classmethod
    def start_new(cls) -> Engine:
        engine = cls(short_tmpdir("txd-docker-"))
        engine.start()
        return engine

    @classmethod
    def attach(cls, run_dir: Path, host: str, owner: int) -> Engine:
        """An engine another process started (scripts/test, for several test processes in
        turn) and stops; restart() keeps it that process's."""
        return cls(run_dir, host, owner=owner)

    @property
    def pid(self) -> int:
        return int((self.run_dir / "dockerd.pid").read_text())

    def env(self, **extra: str) -> dict[str, str]:
        """This process's environment with DOCKER_HOST pointing at this engine."""
        return {**os.environ, "DOCKER_HOST": self.host, **extra}

    def start(self) -> None:
        # TXD_DOCKER_OWNER: should this process be killed, the next docker-up stops the engine.
        env = {**os.environ, "TXD_DOCKER_OWNER": str(self.owner)}
        out = _script("docker-up", str(self.run_dir), env=env, timeout=UP_TIMEOUT)
        self.host = _exported(out, "DOCKER_HOST")

    def stop(self, keep_containers: bool = False) -> None:
        """Stops dockerd (and its containerd) by pid. Unless keep_containers (a restart to
        come), first removes every container and network, and unmounts what dockerd left."""
        env = {**os.environ, "KEEP_CONTAINERS": "1" if keep_containers else "0"}
        _script("docker-down", str(self.run_dir), env=env, timeout=DOWN_TIMEOUT)

    def restart(self) -> None:
        """Stops the engine and starts it again on the same socket and data root. Containers
        are still there, and running ones keep running meanwhile (live-restore): the engine's
        event stream and API are what goes away and comes back."""
        self.stop(keep_containers=True)
        self.start()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def clean(self) -> None:
        """Removes every container and network, as stop() does, leaving the engine running: an
        engine shared with the next test process hands it what a fresh one would."""
        ids = self.docker("ps", "-aq").stdout.split()
        if ids:
            self.docker("rm", "-f", *ids)
        self.docker("network", "prune", "-f")

    def docker(
        self, *args: str, check: bool = True, input: str | None = None, timeout: float = CLI_TIMEOUT
    ) -> subprocess.CompletedProcess[str]:
        """Runs the docker CLI against this engine."""
        proc = subprocess.run(
            ["docker", *args],
            env=self.env(),
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check:
            assert proc.returncode == 0, (
                f"docker {' '.join(args)}: exit {proc.returncode}\n{proc.stdout}{proc.stderr}"
            )
        return proc

    def client(self) -> aiodocker.Docker:
        return aiodocker.Docker(url=self.host)


@dataclass
class Registry:
    run_dir: Path
    address: str = ""  # 127.0.0.1:PORT

    @classmethod
    def attach(cls, run_dir: Path, address: str) -> Registry:
        """A registry another process started (scripts/test) and stops."""
        return cls(run_dir, address)

    @classmethod
    def start_new(cls) -> Registry:
        registry = cls(short_tmpdir("txd-registry-"))
        out = _script("registry-up", str(registry.run_dir), timeout=60)
        registry.address = _exported(out, "REGISTRY")
        return registry

    def close(self) -> None:
        _script("registry-down", str(self.run_dir), timeout=30)
        shutil.rmtree(self.run_dir, ignore_errors=True)


def make_docker_daemon(engine: Engine, args: Sequence[str] = (), **kw: Any) -> Daemon:
    """A txd (not started) whose Docker host is this engine: through DOCKER_HOST, and through
    the local_docker scheduler's `docker_host` setting when that scheduler exists."""
    from txd.schedulers.plugins import BUILTIN

    settings: list[str] = []
    if "local_docker" in BUILTIN:
        settings = ["--set", f"local_docker.docker_host={engine.host}"]
    env = {"DOCKER_HOST": engine.host, **kw.pop("env", {})}
    return Daemon(short_tmpdir("txdd-"), env=env, args=[*settings, *args], **kw)


def _filters(labels: dict[str, str] | None, **more: str | list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    if labels:
        out["label"] = [f"{k}={v}" if v else k for k, v in labels.items()]
    for key, value in more.items():
        out[key] = [value] if isinstance(value, str) else list(value)
    return out


class EngineClient:
    """The engine's own view, for assertions: what exists, as the engine reports it."""

    def __init__(self, host: str, docker: aiodocker.Docker) -> None:
        self.host = host
        self.docker = docker

    async def containers(self, labels: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """Inspect data of every container (running or not) with these labels ("" = any
        value)."""
        found = await self.docker.containers.list(all=True, filters=_filters(labels))
        return [await c.show() for c in found]

    async def container(self, name_or_id: str) -> dict[str, Any] | None:
        try:
            return await (await self.docker.containers.get(name_or_id)).show()
        except aiodocker.DockerError as e:
            if e.status == 404:
                return None
            raise

    async def networks(self, labels: dict[str, str] | None = None) -> list[dict[str, Any]]:
        return await self.docker.networks.list(filters=_filters(labels))

    async def network(self, name_or_id: str) -> dict[str, Any] | None:
        try:
            return await (await self.docker.networks.get(name_or_id)).show()
        except aiodocker.DockerError as e:
            if e.status == 404:
                return None
            raise

    async def image_tags(self) -> set[str]:
        return {t for i in await self.docker.images.list() for t in i.get("RepoTags") or []}

    async def image(self, name: str) -> dict[str, Any] | None:
        try:
            return await self.docker.images.inspect(name)
        except aiodocker.DockerError as e:
            if e.status == 404:
                return None
            raise

    @asynccontextmanager
    async def events(
        self, labels: dict[str, str] | None = None, **filters: str | list[str]
    ) -> AsyncIterator[Events]:
        """Engine events from the moment of entering (the engine replays from that time, so
        nothing done inside the block is missed), filtered as the engine's /events API does
        (type=, event=, container=, ...)."""
        async with Events.open(self.host, time.time(), _filters(labels, **filters)) as ev:
            yield ev


class Events:
    """A stream of engine events on a connection of its own."""

    def __init__(self, docker: aiodocker.Docker, queue: Any) -> None:
        self._docker = docker
        self._queue = queue

    @classmethod
    @asynccontextmanager
    async def open(
        cls, host: str, since: float, filters: dict[str, list[str]]
    ) -> AsyncIterator[Events]:
        docker = aiodocker.Docker(url=host)
        try:
            queue = docker.events.subscribe(since=f"{since:.9f}", filters=json.dumps(filters))
            yield cls(docker, queue)
        finally:
            await docker.events.stop()
            await docker.close()

    async def next(self, timeout: float = EVENT_TIMEOUT) -> dict[str, Any]:
        async with asyncio.timeout(timeout):
            event = await self._queue.get()
        if event is None:
            raise AssertionError("the engine's event stream ended")
        return event

    async def wait_for(self, timeout: float = EVENT_TIMEOUT, **match: str) -> dict[str, Any]:
        """The next event whose top-level fields (Type, Action, id, ...) or, for other keys,
        actor attributes (labels, name, exitCode) equal `match`; AssertionError after timeout
        seconds, listing what was seen."""
        seen: list[str] = []
        try:
            async with asyncio.timeout(timeout):
                while True:
                    event = await self.next(timeout)
                    attrs = event.get("Actor", {}).get("Attributes", {})
                    if all(event.get(k, attrs.get(k)) == v for k, v in match.items()):
                        return event
                    seen.append(f"{event.get('Type')} {event.get('Action')} {attrs.get('name')}")
        except TimeoutError:
            raise AssertionError(
                f"no engine event {match} within {timeout}s; saw: {seen}"
            ) from None
