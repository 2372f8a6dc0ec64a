"""local_cwd runs a job as if started from the caller's shell: the caller's working directory,
environment and PATH (virtualenv included), not the daemon's."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from txd.v1 import AppDef, AppState, Role
from txd_testing import DAEMON_ONLY_VAR, first_line, read_logs, sh_app


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


async def _output(client: Any, app: AppDef, **kw: Any) -> bytes:
    handle = await client.run(app, **kw)
    status = await client.wait(handle, timeout=30)
    data = await read_logs(client, handle)
    assert status.state == AppState.SUCCEEDED, (status, data)
    return data


async def test_client_cwd_and_env(client: Any, workdir: Path) -> None:
    assert DAEMON_ONLY_VAR not in os.environ
    env = {**os.environ, "TXD_CALLER_ONLY": "caller value with spaces"}
    out = await _output(
        client,
        sh_app(f'pwd; echo "$TXD_CALLER_ONLY"; echo "daemon=${{{DAEMON_ONLY_VAR}:-unset}}"'),
        cwd=str(workdir),
        env=env,
    )
    assert out == f"{workdir}\ncaller value with spaces\ndaemon=unset\n".encode()


async def test_default_cwd_and_env_are_the_callers(
    client: Any, workdir: Path, monkeypatch: Any
) -> None:
    """Without cwd/env arguments the client sends its own process's."""
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("TXD_CALLER_DEFAULT", "from-os-environ")
    out = await _output(client, sh_app('pwd; echo "$TXD_CALLER_DEFAULT"'))
    assert out == f"{workdir}\nfrom-os-environ\n".encode()


async def test_empty_env_means_the_daemons(client: Any, workdir: Path) -> None:
    out = await _output(
        client, sh_app(f'echo "${{{DAEMON_ONLY_VAR}:-unset}}"'), cwd=str(workdir), env={}
    )
    assert out == b"daemon-value\n"


async def test_torchrun_logs_go_in_the_apps_folder_as_torchx(client: Any, workdir: Path) -> None:
    # TorchX's PET_LOG_DIR (torchrun's --log_dir): <app's log folder>/torchelastic/<role>, over
    # the caller's value; a role's own value wins.
    env = {**os.environ, "PET_LOG_DIR": "/caller/value"}
    app = sh_app('echo "$PET_LOG_DIR"; echo "$TXD_LOCAL_REPLICA"')
    out = (await _output(client, app, cwd=str(workdir), env=env)).decode().splitlines()
    replica = Path(out[1])  # <app's log folder>/<role>.<k>
    assert Path(out[0]) == replica.parent / "torchelastic" / app.roles[0].name
    own = sh_app('echo "$PET_LOG_DIR"')
    own.roles[0].env["PET_LOG_DIR"] = "/the/roles/own"
    assert await _output(client, own, cwd=str(workdir), env=env) == b"/the/roles/own\n"


async def test_role_env_overrides_caller_env(client: Any, workdir: Path) -> None:
    app = sh_app('echo "$SHARED"', env={"SHARED": "from-role"})
    out = await _output(client, app, cwd=str(workdir), env={**os.environ, "SHARED": "caller"})
    assert out == b"from-role\n"


async def test_entrypoint_found_on_callers_path(client: Any, workdir: Path, tmp_path: Path) -> None:
    bindir = tmp_path / "callerbin"
    _script(bindir / "txd-caller-tool", 'echo "tool ran with $1 in $(pwd)"')
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
    app = AppDef(name="tool", roles=[Role(name="t", entrypoint="txd-caller-tool", args=["x"])])
    out = await _output(client, app, cwd=str(workdir), env=env)
    assert out == f"tool ran with x in {workdir}\n".encode()


async def test_callers_virtualenv_python_is_used(
    client: Any, workdir: Path, tmp_path: Path
) -> None:
    """A job started from an activated virtualenv finds that virtualenv's python."""
    venv = tmp_path / "venv"
    _script(venv / "bin" / "python", f'echo "venv python $VIRTUAL_ENV"; exec {sys.executable} "$@"')
    env = {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "VIRTUAL_ENV": str(venv)}
    app = AppDef(
        name="venv",
        roles=[Role(name="p", entrypoint="python", args=["-c", "print('inner', 6 * 7)"])],
    )
    out = await _output(client, app, cwd=str(workdir), env=env)
    assert out == f"venv python {venv}\ninner 42\n".encode()


async def test_relative_entrypoint_and_cwd_on_path(
    client: Any, workdir: Path, tmp_path: Path
) -> None:
    _script(workdir / "scripts" / "run.sh", 'echo "relative $(pwd)"')
    _script(workdir / "in-cwd-tool", "echo in-cwd")
    app = AppDef(
        name="rel",
        roles=[
            Role(name="a", entrypoint="./scripts/run.sh"),
            Role(name="b", entrypoint="in-cwd-tool"),
        ],
    )
    handle = await client.run(app, cwd=str(workdir))
    assert (await client.wait(handle, timeout=30)).state == AppState.SUCCEEDED
    assert await read_logs(client, handle, role="a") == f"relative {workdir}\n".encode()
    assert await read_logs(client, handle, role="b") == b"in-cwd\n"


async def test_prepend_cwd(client: Any, workdir: Path, tmp_path: Path) -> None:
    bindir = tmp_path / "pathbin"
    _script(bindir / "which-one", "echo from-path")
    _script(workdir / "which-one", "echo from-cwd")
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
    app = AppDef(name="which", roles=[Role(name="w", entrypoint="which-one")])
    assert await _output(client, app, cwd=str(workdir), env=env) == b"from-path\n"
    assert (
        await _output(client, app, cfg={"prepend_cwd": True}, cwd=str(workdir), env=env)
        == b"from-cwd\n"
    )
    assert (
        await _output(client, app, cfg={"prepend_cwd": "true"}, cwd=str(workdir), env=env)
        == b"from-cwd\n"
    )


def test_txctl_cwd_env_and_path(shared_daemon: Any, workdir: Path, tmp_path: Path) -> None:
    bindir = tmp_path / "clibin"
    _script(bindir / "txd-cli-tool", 'echo "cli tool: $TXD_CLI_VAR in $(pwd)"')
    env = shared_daemon.txctl_env(TXD_CLI_VAR="set-in-shell", PATH=f"{bindir}:{os.environ['PATH']}")
    proc = shared_daemon.txctl(
        "run",
        "--wait",
        "utils.binary",
        "--entrypoint",
        "txd-cli-tool",
        cwd=workdir,
        env=env,
        check=0,
    )
    handle = first_line(proc.stdout)
    logs = shared_daemon.txctl("logs", handle, check=0).stdout
    assert logs == f"cli tool: set-in-shell in {workdir}\n"
    proc = shared_daemon.txctl(
        "run",
        "--wait",
        "utils.sh",
        "sh",
        "-c",
        f'pwd; echo "${{{DAEMON_ONLY_VAR}:-unset}}"',
        cwd=workdir,
        env=env,
        check=0,
    )
    logs = shared_daemon.txctl("logs", first_line(proc.stdout), check=0).stdout
    assert logs == f"{workdir}\nunset\n"
