"""txd.client.runner: code written against `torchx.runner.get_runner()` runs on txd with one
changed import, and gets TorchX's own objects back. Against a real daemon."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from txd.client import InvalidArgumentError
from txd_testing import run_python, unique

specs = pytest.importorskip("torchx.specs")

# The seed page "Basic Concepts" (shared/seeds/004_...): its AppDef, component and Runner
# snippets as printed there, but for two lines: the import (`from torchx.runner import
# get_runner`) and the scheduler ("kubernetes" there; there is no Kubernetes here). The lines
# marked "added" glue the snippets into one program and print what the test checks.
SEED_PROGRAM = textwrap.dedent("""
    import torchx.specs as specs
    app = specs.AppDef(
        name="echo",
        roles=[
            specs.Role(
                name="echo",
                entrypoint="/bin/echo",
                image="/tmp",
                args=["hello world"],
            )
        ],
    )

    def ddp(name: str, nnodes: int, image: str, entrypoint: str, *args: str) -> specs.AppDef:
        return specs.AppDef(
            name=name,
            roles=[
                specs.Role(
                    name="trainer",
                    entrypoint=entrypoint,
                    image=image,
                    resource=specs.Resource(cpu=4, gpu=1, memMB=1024),
                    args=list(args),
                    num_replicas=nnodes,
                )
            ],
        )

    app = ddp("seedrunner", 2, "/tmp", "/bin/echo", "hello world")  # added: a "trainer" role

    from txd.client.runner import get_runner

    with get_runner() as runner:
        # Option 1: run a named component (same resolution as the CLI)
        app_handle = runner.run_component(
            "dist.ddp", ["--script", "train.py"], scheduler="local_cwd",
        )
        print("component", app_handle)  # added
        # Option 2: run an AppDef you built directly
        app_handle = runner.run(app, scheduler="local_cwd")

        # Monitor the job
        status = runner.status(app_handle) # poll current state
        final = runner.wait(app_handle)    # block until terminal
        runner.cancel(app_handle)          # request cancellation

        # Fetch logs for replica 0 of the "trainer" role
        for line in runner.log_lines(app_handle, "trainer", k=0):
            print(line, end="")
        print("status", type(status).__module__, status.state in specs.AppState)  # added
        ok = final.state == specs.AppState.SUCCEEDED  # added
        print("final", final.state, final.is_terminal(), ok)  # added
""")


def test_seed_runner_snippets(shared_daemon: Any, workdir: Path) -> None:
    proc = run_python(
        SEED_PROGRAM,
        env=shared_daemon.txctl_env(TXD_SOCKET=str(shared_daemon.socket)),
        cwd=workdir,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert re.fullmatch(r"component local_cwd://txd/train-[a-z0-9]+", lines[0])
    assert lines[1:] == [
        "hello world",
        "status torchx.specs.api True",
        "final SUCCEEDED True True",
    ]


@pytest.fixture
def runner(shared_daemon: Any, workdir: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    from txd.client.runner import Runner

    monkeypatch.chdir(workdir)  # local_cwd runs jobs in the caller's directory
    with Runner(socket=shared_daemon.socket) as r:
        yield r


def _trainer_app(name: str) -> Any:
    return specs.AppDef(
        name=name,
        roles=[
            specs.Role(
                name="trainer",
                image="/tmp",
                entrypoint="sh",
                args=["-c", f"echo one {specs.macros.replica_id}; echo two >&2; printf three"],
                num_replicas=2,
                min_replicas=1,
                max_retries=1,
                retry_policy=specs.RetryPolicy.REPLICA,
                resource=specs.resource(h="cpu.small"),
                port_map={"http": 8080},
                env={"A": "1"},
                mounts=[specs.BindMount(src_path="/tmp", dst_path="/t", read_only=True)],
            )
        ],
        metadata={"k": "v"},
    )


def test_runner_round_trip(runner: Any) -> None:
    app = _trainer_app(unique("rt"))
    handle = runner.run(app, scheduler="local_cwd")
    final = runner.wait(handle, wait_interval=0.1)
    assert isinstance(final, specs.AppStatus)
    assert final.state == specs.AppState.SUCCEEDED and str(final.state) == "SUCCEEDED"
    assert [r.role for r in final.roles] == ["trainer"]
    assert sorted(r.id for r in final.roles[0].replicas) == [0, 1]
    assert all(r.state == specs.AppState.SUCCEEDED for r in final.roles[0].replicas)
    final.raise_for_status()

    # describe gives the torchx AppDef back, equal to what was run, field by field (local_cwd
    # adds TORCHX_JOB_ID to every role's env)
    described = runner.describe(handle)
    assert isinstance(described, specs.AppDef)
    assert described.roles[0].env.pop("TORCHX_JOB_ID") == "local_cwd://txd/${app_id}"
    assert described == app

    # logs as TorchX gives them: lines with their newline, the last one maybe without
    from torchx.schedulers.api import Stream

    out = list(runner.log_lines(handle, "trainer", k=1, streams=Stream.STDOUT))
    assert out == ["one 1\n", "three"]
    assert list(runner.log_lines(handle, "trainer", k=0, streams=Stream.STDERR)) == ["two\n"]
    assert list(runner.log_lines(handle, "trainer", k=0, regex="^t", streams="stdout")) == ["three"]

    listed = [r for r in runner.list("local_cwd") if r.app_handle == handle]
    assert [(r.app_id, r.state) for r in listed] == [
        (handle.rsplit("/", 1)[1], specs.AppState.SUCCEEDED)
    ]
    assert "local_cwd" in runner.scheduler_backends()

    runner.delete(handle)
    assert runner.status(handle) is None
    assert runner.wait(handle) is None
    assert runner.describe(handle) is None
    runner.cancel(handle)  # unknown: nothing happens, as in TorchX
    runner.delete(handle)


def test_runner_log_lines_of_a_long_line(runner: Any) -> None:
    """A 2 MiB line with "needle" at its end: found by a pattern of bounded reach; missed by
    one whose match spans the line, and then a warning names the line (as txctl's stderr)."""
    line = "B" + "x" * (2 << 20) + "needle"
    code = "print('short'); print('B' + 'x' * (2 << 20) + 'needle', end='')"
    role = specs.Role(name="r", image="/tmp", entrypoint=sys.executable, args=["-c", code])
    app = specs.AppDef(name=unique("long"), roles=[role])
    handle = runner.run(app, scheduler="local_cwd")
    assert runner.wait(handle, wait_interval=0.1).state == specs.AppState.SUCCEEDED
    assert list(runner.log_lines(handle, "r", regex="xneedle$")) == [line]
    with pytest.warns(UserWarning, match=r"r/0: the line at byte 6 \(2097159 bytes\)"):
        assert list(runner.log_lines(handle, "r", regex="^B.*needle")) == []


def test_runner_cancel_and_dryrun(runner: Any) -> None:
    app = specs.AppDef(
        name=unique("rc"),
        roles=[specs.Role(name="s", image="/tmp", entrypoint="sleep", args=["60"])],
    )
    info = runner.dryrun(app, "local_cwd", cfg={"log_dir": "/tmp"})
    assert isinstance(info, specs.AppDryRunInfo)
    assert "sleep" in str(info) and info._app.roles[0].name == "s"
    handle = runner.run(app, "local_cwd")
    runner.cancel(handle)
    assert runner.wait(handle).state == specs.AppState.CANCELLED


def test_runner_components(runner: Any, workdir: Path) -> None:
    handle = runner.run_component("utils.echo", ["--msg", "from runner"], "local_cwd")
    assert runner.wait(handle).state == specs.AppState.SUCCEEDED
    assert list(runner.log_lines(handle, "echo")) == ["from runner\n"]
    info = runner.dryrun_component("utils.sh", ["echo", "hi"], "local_cwd")
    assert info._app.roles[0].args == ["-c", "echo hi"]
    with pytest.raises(TypeError, match="list of strings, not dict"):
        runner.run_component("utils.echo", {"msg": "x"}, "local_cwd")
    # A workspace goes to the daemon; local_cwd ignores it, a missing one is refused.
    runner.dryrun_component("utils.echo", [], "local_cwd", workspace=str(workdir))
    with pytest.raises(InvalidArgumentError, match=r"workspace: .* is not an existing directory"):
        runner.run_component("utils.echo", [], "local_cwd", workspace=str(workdir / "nope"))


def test_runner_component_defaults(shared_daemon: Any, workdir: Path) -> None:
    from txd.client.runner import Runner

    with Runner(
        component_defaults={"utils.echo": {"msg": "configured"}}, socket=shared_daemon.socket
    ) as r:
        info = r.dryrun_component("utils.echo", [], "local_cwd")
    assert info._app.roles[0].args == ["configured"]


def test_get_runner_refuses_scheduler_params() -> None:
    from txd.client.runner import get_runner

    with pytest.raises(ValueError, match=r"scheduler parameters \(log_dir\) are set on the txd"):
        get_runner(log_dir="/tmp")


def test_runner_without_torchx_says_how_to_install() -> None:
    code = (
        # torchx is not installed, as far as this Python can tell
        "import sys\nsys.modules['torchx'] = None\n"
        "from txd.client.torchx_compat import TorchXError\n"
        "from txd.client.runner import get_runner\n"
        "try:\n    get_runner()\nexcept TorchXError as e:\n    print(e)\n"
    )
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (
        f"torchx is not installed in this Python ({sys.executable} -m pip install torchx)\n"
    )
