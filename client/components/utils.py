"""Builtin utility components: echo, touch, sh, python, binary, copy, booth.

Every public function here returning an AppDef is a builtin named `utils.<function>`. Each
builds exactly the AppDef TorchX 0.7's `torchx.components.utils` function of the same name
builds for the same arguments; what txd adds is opt-in (docs/cli.md, "Builtins").
"""

from __future__ import annotations

import os
import shlex

from txd.client.components._common import DEFAULT_IMAGE, resource
from txd.client.components._mounts import parse_mounts
from txd.v1 import AppDef, Resource, Role


def echo(msg: str = "hello world", image: str = DEFAULT_IMAGE, num_replicas: int = 1) -> AppDef:
    """Prints a message to stdout (runs `echo`).

    Args:
        msg: message to print
        image: image to run in
        num_replicas: number of copies to run (each prints the message)
    """
    return AppDef(
        name="echo",
        roles=[
            Role(
                name="echo",
                image=image,
                entrypoint="echo",
                args=[msg],
                num_replicas=num_replicas,
                resource=Resource(cpu=1, mem_mb=1024),
            )
        ],
    )


def touch(file: str, image: str = DEFAULT_IMAGE) -> AppDef:
    """Creates (or updates the timestamp of) a file (runs `touch`).

    Args:
        file: path of the file to touch
        image: image to run in
    """
    return AppDef(
        name="touch",
        roles=[
            Role(
                name="touch",
                image=image,
                entrypoint="touch",
                args=[file],
                num_replicas=1,
                resource=Resource(cpu=1, mem_mb=1024),
            )
        ],
    )


def sh(
    *args: str,
    image: str = DEFAULT_IMAGE,
    num_replicas: int = 1,
    cpu: int = 1,
    gpu: int = 0,
    memMB: int = 1024,
    h: str | None = None,
    env: dict[str, str] | None = None,
    max_retries: int = 0,
    mounts: list[str] | None = None,
    entrypoint: str | None = None,
) -> AppDef:
    """Runs a shell command: `sh -c "<args>"`.

    The arguments are shell-quoted and joined, so `-- echo "a b"` prints `a b`. With
    --entrypoint the arguments are passed to that program unchanged instead.

    Args:
        args: the command and its arguments
        image: image to run in
        num_replicas: number of replicas
        cpu: CPU cores per replica
        gpu: GPUs per replica
        memMB: memory per replica in MiB
        h: named resource (overrides cpu, gpu and memMB)
        env: environment variables, KEY=VALUE,... (LOGLEVEL defaults to WARNING)
        max_retries: how many times to retry a failed run
        mounts: mounts, e.g. type=bind,src=/data,dst=/data,readonly
        entrypoint: program to run with the arguments instead of `sh -c` (txd only)
    """
    env = dict(env or {})
    env.setdefault("LOGLEVEL", os.environ.get("LOGLEVEL", "WARNING"))
    if entrypoint:
        # txd's addition (TorchX has no --entrypoint): the program gets the arguments as given,
        # not shell-quoted, which is what a direct exec needs.
        program, argv = entrypoint, list(args)
    else:
        program, argv = "sh", ["-c", shlex.join(args)]
    return AppDef(
        name="sh",
        roles=[
            Role(
                name="sh",
                image=image,
                entrypoint=program,
                args=argv,
                env=env,
                num_replicas=num_replicas,
                max_retries=max_retries,
                resource=resource(cpu, gpu, memMB, h),
                mounts=parse_mounts(mounts or []),
            )
        ],
    )


def python(
    *args: str,
    m: str | None = None,
    c: str | None = None,
    script: str | None = None,
    image: str = DEFAULT_IMAGE,
    name: str = "torchx_utils_python",
    cpu: int = 1,
    gpu: int = 0,
    memMB: int = 1024,
    h: str | None = None,
    num_replicas: int = 1,
) -> AppDef:
    """Runs a Python module, snippet or script: `python (-m M | -c C | SCRIPT) args...`.

    Args:
        args: arguments passed to the program
        m: module to run (python -m)
        c: code to run (python -c)
        script: script file to run
        image: image to run in
        name: name of the app (its role is named python)
        cpu: CPU cores per replica
        gpu: GPUs per replica
        memMB: memory per replica in MiB
        h: named resource (overrides cpu, gpu and memMB)
        num_replicas: number of replicas
    """
    given = [flag for flag, value in (("--m", m), ("--c", c), ("--script", script)) if value]
    if len(given) != 1:
        shown = f" (got {', '.join(given)})" if given else ""
        raise ValueError(f"exactly one of --m, --c or --script is required{shown}")
    env: dict[str, str] = {}
    if m:
        program = ["-m", m]
        env["HYDRA_MAIN_MODULE"] = m  # hydra apps locate their config relative to the module
    elif c:
        program = ["-c", c]
    else:
        program = [str(script)]
    return AppDef(
        name=name,
        roles=[
            Role(
                name="python",
                image=image,
                entrypoint="python",
                args=[*program, *args],
                env=env,
                num_replicas=num_replicas,
                resource=resource(cpu, gpu, memMB, h),
            )
        ],
    )


def binary(
    *args: str,
    entrypoint: str,
    name: str = "torchx_utils_binary",
    num_replicas: int = 1,
    cpu: int = 1,
    gpu: int = 0,
    memMB: int = 1024,
    h: str | None = None,
) -> AppDef:
    """Runs a program directly, without an image (meant for local_cwd and slurm).

    Args:
        args: arguments passed to the program
        entrypoint: the program to run
        name: name of the app (its role is named binary)
        num_replicas: number of replicas
        cpu: CPU cores per replica
        gpu: GPUs per replica
        memMB: memory per replica in MiB
        h: named resource (overrides cpu, gpu and memMB)
    """
    return AppDef(
        name=name,
        roles=[
            Role(
                name="binary",
                image="",
                entrypoint=entrypoint,
                args=list(args),
                num_replicas=num_replicas,
                resource=resource(cpu, gpu, memMB, h),
            )
        ],
    )


def copy(src: str, dst: str, image: str = DEFAULT_IMAGE) -> AppDef:
    """Copies one file from src to dst, each any fsspec URL (runs TorchX's copy app).

    Directories and recursive copies are not supported. The image must hold torchx and the
    fsspec filesystems of both URLs.

    Args:
        src: fsspec URL of the file to copy
        dst: fsspec URL to copy it to
        image: image holding torchx.apps.utils.copy_main
    """
    return AppDef(
        name="torchx-utils-copy",
        roles=[
            Role(
                name="torchx-utils-copy",
                image=image,
                entrypoint="python",
                num_replicas=1,
                args=["-m", "torchx.apps.utils.copy_main", "--src", src, "--dst", dst],
                resource=Resource(cpu=1, gpu=0, mem_mb=1024),
            )
        ],
    )


def booth(
    x1: float,
    x2: float,
    trial_idx: int = 0,
    tracker_base: str = "/tmp/torchx-util-booth",
    image: str = DEFAULT_IMAGE,
) -> AppDef:
    """Evaluates the Booth function f(x1, x2) = (x1 + 2*x2 - 7)^2 + (2*x1 + x2 - 5)^2, a test
    objective for hyperparameter optimization (runs TorchX's booth app).

    The result is written under tracker_base, readable as FsspecResultTracker(tracker_base)
    [trial_idx].

    Args:
        x1: first input
        x2: second input
        trial_idx: index of the trial the result is recorded under (0 outside HPO)
        tracker_base: fsspec URL of the result tracker's base directory (e.g. s3://bucket/dir)
        image: image holding torchx.apps.utils.booth_main
    """
    return AppDef(
        name="torchx-utils-booth",
        roles=[
            Role(
                name="torchx-utils-booth",
                image=image,
                entrypoint="python",
                num_replicas=1,
                args=[
                    "-m",
                    "torchx.apps.utils.booth_main",
                    "--x1",
                    str(x1),
                    "--x2",
                    str(x2),
                    "--trial_idx",
                    str(trial_idx),
                    "--tracker_base",
                    tracker_base,
                ],
                resource=Resource(cpu=1, gpu=0, mem_mb=1024),
            )
        ],
    )
