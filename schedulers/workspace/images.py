"""Workspaces for container schedulers (TorchX's DockerWorkspaceMixin): an image built FROM a
role's image with the workspace in it, through the Docker engine's build API.

- **The build.** The workspace's own `Dockerfile.txd` (or TorchX's `Dockerfile.torchx`) when
  it has one, built with the workspace as its context and the build args `IMAGE` (the role's
  image) and `WORKSPACE` (the workspace's path), as TorchX passes them. Otherwise
  `ARG IMAGE / FROM $IMAGE / COPY . .`-alike: the workspace is copied into the image's working
  directory (`/` when it sets none), as TorchX's default Dockerfile does; the generated
  Dockerfile sits outside the copied directory, so it never lands in the image.
- **The context** is a tar streamed to the engine as it is read (never whole in memory), of
  the files `.dockerignore` does not exclude (Docker's rules: txd.schedulers.workspace.ignorefile).
- **The cache.** The image is tagged `txd-workspace:<key>` (`<image_repo>:<key>` with
  `image_repo`), `key` the first 16 hex digits of a sha256 of the base image's id, the
  Dockerfile, the build args and every included file's path, mode and bytes. When the engine
  has that tag, nothing is built. Built images carry the label `txd.workspace=1` (and TorchX's
  `torchx.pytorch.org/version`, as TorchX labels the images it builds).
- **image_repo**: the image is pushed there, so that a backend on another host can pull it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections import Counter, deque
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from txd.schedulers import torchx_labels as tx
from txd.schedulers.errors import BackendUnavailable, FailedPrecondition, InvalidArgument
from txd.schedulers.options import opt
from txd.schedulers.workspace import files as ws
from txd.v1.app_pb2 import AppDef

if TYPE_CHECKING:
    import aiodocker
    from txd.schedulers.workspace.engine import Engine

LABEL = "txd.workspace"
LOCAL_REPO = "txd-workspace"
# The workspace's own Dockerfile, first found wins (txd's name, then TorchX's).
DOCKERFILES = ("Dockerfile.txd", "Dockerfile.torchx")
# Without one: the workspace goes below CONTEXT_DIR in the context, beside this Dockerfile.
CONTEXT_DIR = "workspace"
DEFAULT_DOCKERFILE = f"ARG IMAGE\nFROM $IMAGE\nCOPY {CONTEXT_DIR}/ ./\n".encode()
KEY_LENGTH = 16
# A dry run's image tag when the engine could not be asked for the base image's id.
UNKNOWN_TAG = "digest-unknown"
# aiodocker's made-up status for an engine it cannot connect to.
UNREACHABLE = 900
# Lines of the engine's build output quoted when a build fails.
ERROR_CONTEXT_LINES = 5


@dataclass(frozen=True)
class Built:
    """The image a role runs instead of its own, and one line saying how it came to be."""

    image: str
    said: str
    built: bool  # False: found in the engine's cache (or a dry run)


@contextlib.contextmanager
def engine_errors(what: str) -> Iterator[None]:
    """The engine's refusals become FailedPrecondition with its reason; an engine that cannot
    be reached becomes BackendUnavailable."""
    import aiodocker
    import aiohttp

    try:
        yield
    except aiodocker.DockerError as e:
        if e.status == UNREACHABLE:
            raise BackendUnavailable(
                f"{what}: the Docker engine does not answer: {_reason(e)}"
            ) from None
        raise FailedPrecondition(f"{what}: {_reason(e)}") from None
    except (aiohttp.ClientError, OSError) as e:
        raise BackendUnavailable(f"{what}: the Docker engine does not answer: {e}") from None


def _reason(e: Any) -> str:
    message = e.message if isinstance(e.message, str) else json.dumps(e.message)
    return message.strip() or f"HTTP {e.status}"


async def image_id(docker: aiodocker.Docker, name: str) -> str | None:
    """The engine's id of image `name`, None when the engine has no such image."""
    import aiodocker

    with engine_errors(f"cannot inspect image {name}"):
        try:
            return str((await docker.images.inspect(name))["Id"])
        except aiodocker.DockerError as e:
            if e.status == 404:
                return None
            raise


async def _pull(docker: aiodocker.Docker, image: str) -> str:
    with engine_errors(f"cannot pull image {image}"):
        # A pull reports most failures inside its progress stream, as {"error": ...}.
        for item in await docker.images.pull(image):
            if item.get("error"):
                raise FailedPrecondition(f"cannot pull image {image}: {item['error'].strip()}")
    pulled = await image_id(docker, image)
    if pulled is None:
        raise FailedPrecondition(f"cannot pull image {image}: the engine does not have it after")
    return pulled


def own_dockerfile(workspace: str) -> str | None:
    """The workspace's own Dockerfile (DOCKERFILES), or None."""
    for name in DOCKERFILES:
        if os.path.isfile(os.path.join(workspace, name)):
            return name
    return None


async def build_workspace_image(
    docker: aiodocker.Docker,
    base: str,
    workspace: str,
    *,
    image_repo: str | None = None,
    dryrun: bool = False,
) -> Built:
    """The image to run instead of `base`: built from `workspace` on top of `base`, unless the
    engine has it already (the cache), pushed to `image_repo` when set. With `dryrun`,
    nothing is built, pulled or pushed, and `said` says what would be.

    Raises InvalidArgument (field `workspace`) for a workspace that cannot be read or a bad
    `.dockerignore`, FailedPrecondition when the engine refuses a pull, build or push (with
    its reason), BackendUnavailable when it does not answer.
    """
    found = await asyncio.to_thread(ws.scan, workspace, ws.DOCKERIGNORE)
    dockerfile = own_dockerfile(workspace)
    what = f"workspace {workspace} ({found.summary()}"
    what += f", its {dockerfile})" if dockerfile else ")"
    try:
        base_id = await image_id(docker, base)
    except BackendUnavailable as e:
        if not dryrun:
            raise
        # A dry run works without the engine (a cluster's needs none): the image's name, a
        # digest over the base image's id, is what cannot be known.
        image = f"{image_repo or LOCAL_REPO}:{UNKNOWN_TAG}"
        push = f", and push it to {image_repo}" if image_repo else ""
        return Built(image, f"{what}: would build an image FROM {base}{push} ({e})", False)
    if base_id is None:
        if dryrun:
            return Built(base, f"{what}: would pull {base}, then build an image FROM it", False)
        base_id = await _pull(docker, base)
    if dockerfile:
        dockerfile_bytes = await asyncio.to_thread(_read, os.path.join(workspace, dockerfile))
        buildargs = {"IMAGE": base, "WORKSPACE": workspace}
    else:
        dockerfile_bytes = DEFAULT_DOCKERFILE
        buildargs = {"IMAGE": base}
    key = await asyncio.to_thread(
        ws.digest,
        found.entries,
        base_id.encode(),
        (dockerfile or "").encode(),
        dockerfile_bytes,
        json.dumps(buildargs, sort_keys=True).encode(),
    )
    image = f"{image_repo or LOCAL_REPO}:{key[:KEY_LENGTH]}"
    cached = await image_id(docker, image) is not None
    if dryrun:
        if cached:
            said = f"{image} is built already (unchanged), would run it"
        else:
            said = f"would build {image} FROM {base}"
        if image_repo:
            said += f", and push it to {image_repo}"
        return Built(image, f"{what}: {said}", False)
    push = f", pushed to {image_repo}" if image_repo else ""
    if not cached:
        await _build(docker, image, base, workspace, found, dockerfile, dockerfile_bytes, buildargs)
    if image_repo:
        await _push(docker, image)
    if cached:
        return Built(image, f"{what}: {image} was built already (unchanged){push}", False)
    return Built(image, f"{what}: built {image} FROM {base}{push}", True)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


async def _build(
    docker: aiodocker.Docker,
    image: str,
    base: str,
    workspace: str,
    found: ws.Scan,
    dockerfile: str | None,
    dockerfile_bytes: bytes,
    buildargs: dict[str, str],
) -> None:
    """POST /build with the context streamed; raises FailedPrecondition with the engine's
    last lines of output when the build fails."""
    import aiohttp

    if dockerfile:
        included = any(e.name == dockerfile for e in found.entries)
        # Excluded by .dockerignore, it is sent all the same: the engine needs it (as docker's).
        extra = [] if included else [(dockerfile, dockerfile_bytes)]
        context = ws.tar_stream(found.entries, extra=extra)
        name = dockerfile
    else:
        name = "Dockerfile"
        context = ws.tar_stream(
            found.entries, prefix=f"{CONTEXT_DIR}/", extra=[(name, dockerfile_bytes)]
        )
    params = {
        "t": image,
        "dockerfile": name,
        "buildargs": json.dumps(buildargs),
        "labels": json.dumps({LABEL: "1", tx.VERSION: tx.TORCHX_VERSION}),
        "rm": "1",
        "forcerm": "1",
    }
    what = f"building {image} from workspace {workspace} FROM {base} failed"
    lines: deque[str] = deque(maxlen=ERROR_CONTEXT_LINES)
    with engine_errors(what):
        # aiodocker's images.build reads its file object synchronously, on the event loop;
        # its request method takes an async iterator, which streams the tar as it is read.
        async with docker._query(
            "build",
            "POST",
            params=params,
            headers={"Content-Type": "application/x-tar"},
            data=_nonempty(context),
            timeout=aiohttp.ClientTimeout(total=None, sock_read=None),
        ) as resp:
            try:
                async for raw in resp.content:
                    if not raw.strip():
                        continue
                    try:
                        msg = json.loads(raw)
                    except ValueError:
                        continue
                    if msg.get("error"):
                        tail = "".join(lines).strip()
                        said = f"{msg['error'].strip()}" + (f" (after: {tail})" if tail else "")
                        raise FailedPrecondition(f"{what}: {said}")
                    if stream := msg.get("stream"):
                        lines.append(stream)
            finally:
                resp.release()  # aiodocker's _query leaves that to its caller


async def _nonempty(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The context as aiohttp sends it: empty chunks left out (one would end the body)."""
    async for chunk in chunks:
        if chunk:
            yield chunk


async def _push(docker: aiodocker.Docker, image: str) -> None:
    repo, _, tag = image.rpartition(":")
    with engine_errors(f"pushing {image} failed"):
        stream: Any = docker.images.push(repo, tag=tag, stream=True)  # an async generator
        async with contextlib.aclosing(stream) as msgs:
            async for msg in msgs:
                if msg.get("error"):
                    raise FailedPrecondition(f"pushing {image} failed: {msg['error'].strip()}")


async def prepare_app(
    docker: aiodocker.Docker,
    app: AppDef,
    workspace: str,
    *,
    image_repo: str | None = None,
    dryrun: bool = False,
) -> tuple[AppDef, str]:
    """What a container scheduler's prepare_workspace returns: the app with role 0's image
    replaced by the workspace image (TorchX rebuilds role 0 only), and the line saying so."""
    check_image_repo(image_repo)
    if not app.roles or not app.roles[0].image:
        raise InvalidArgument(
            "app.roles[0].image", "a workspace is built on role 0's image, and it has none"
        )
    built = await build_workspace_image(
        docker, app.roles[0].image, workspace, image_repo=image_repo, dryrun=dryrun
    )
    out = AppDef()
    out.CopyFrom(app)
    out.roles[0].image = built.image
    return out, built.said


DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"


def docker_host_setting() -> Any:
    """The `docker_host` daemon setting of a scheduler whose jobs run elsewhere (a cluster)
    and whose workspace images are built on this engine: see Builder."""
    return opt(
        "",
        "the Docker engine that builds workspace images (default: $DOCKER_HOST, else "
        f"{DEFAULT_DOCKER_HOST})",
    )


class Builder:
    """prepare_app on the Docker engine of a `docker_host` setting (else $DOCKER_HOST, else
    the default socket), connected on first use: a scheduler of a remote backend builds
    workspace images here and pushes them to image_repo for the backend to pull. `calls`
    counts the builds asked for and the engine's calls."""

    def __init__(self, docker_host: str) -> None:
        self._host = docker_host
        self._engine: Engine | None = None

    async def prepare_app(
        self, app: AppDef, workspace: str, *, image_repo: str | None, dryrun: bool
    ) -> tuple[AppDef, str]:
        if self._engine is None:
            from txd.schedulers.workspace.engine import Engine  # aiodocker: the docker extra

            self._engine = Engine(
                self._host or os.environ.get("DOCKER_HOST") or DEFAULT_DOCKER_HOST
            )
        self._engine.calls["workspace.build"] += 1
        return await prepare_app(
            self._engine.client(), app, workspace, image_repo=image_repo, dryrun=dryrun
        )

    @property
    def calls(self) -> Counter[str]:
        return self._engine.calls if self._engine is not None else Counter()

    async def aclose(self) -> None:
        if self._engine is not None:
            await self._engine.aclose()


async def remove_if_unused(docker: aiodocker.Docker, image: str) -> bool:
    """Removes a workspace image (one with the label LABEL; any other is left alone) unless a
    container still uses it (the engine's 409) or it is gone already: what deleting a job does
    with its workspace image. True when it was removed."""
    import aiodocker

    with engine_errors(f"cannot remove image {image}"):
        try:
            labels = (await docker.images.inspect(image))["Config"].get("Labels") or {}
            if labels.get(LABEL) != "1":
                return False
            await docker.images.delete(image)
        except aiodocker.DockerError as e:
            if e.status in (404, 409):
                return False
            raise
    return True


def check_image_repo(image_repo: str | None) -> None:
    """An image_repo is a repository name without a tag: `host:port/name` or `name`."""
    if image_repo is None:
        return
    last = image_repo.rsplit("/", 1)[-1]
    if not image_repo or ":" in last or "@" in image_repo or image_repo != image_repo.strip():
        raise InvalidArgument(
            "cfg.image_repo",
            f"{image_repo!r} is not a repository name (e.g. 127.0.0.1:5000/me/app, no tag)",
        )
