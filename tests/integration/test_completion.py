"""Shell completion for real: bash (and zsh, through its bash-completion emulation) with the
script `txctl completion SHELL` prints loaded, the completion function called as the shell
calls it (COMP_WORDS / COMP_CWORD), and COMPREPLY checked; handles come from a real daemon."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
from txd_testing import TXCTL, clean_env, first_line, remove_tree, short_tmpdir

BIN = str(Path(TXCTL[0]).parent)
pytestmark = pytest.mark.skipif(len(TXCTL) != 1, reason="needs the txctl program on a PATH")


def _env(**extra: str) -> dict[str, str]:
    env = clean_env(**extra)
    env["PATH"] = f"{BIN}:{env.get('PATH', '/usr/bin:/bin')}"
    return env


def bash_complete(line: str, env: dict[str, str], cwd: Path) -> list[str]:
    """COMPREPLY for `line` (completing its last word; a trailing space starts a new one)."""
    script = (
        'eval "$(txctl completion bash)" || exit 9\n'
        'read -r -a COMP_WORDS <<< "$LINE"\n'
        '[[ $LINE == *" " ]] && COMP_WORDS+=("")\n'
        "COMP_CWORD=$((${#COMP_WORDS[@]} - 1))\n"
        '_txctl && printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    proc = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", script],
        capture_output=True, text=True, env={**env, "LINE": line}, cwd=cwd, timeout=30,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return [w for w in proc.stdout.splitlines() if w]


def test_bash_completes_commands_flags_schedulers_components_and_jobs(
    shared_daemon: Any, txctl: Any, workdir: Path
) -> None:
    handle = first_line(txctl("run", "--wait", "utils.echo", check=0).stdout)
    app_id = handle.rsplit("/", 1)[1]
    env = _env(TXD_SOCKET=str(shared_daemon.socket))
    assert bash_complete("txctl st", env, workdir) == ["status"]
    assert bash_complete("txctl --so", env, workdir) == ["--socket"]
    assert bash_complete("txctl logs --ta", env, workdir) == ["--tail"]
    assert bash_complete("txctl logs --streams std", env, workdir) == ["stdout", "stderr"]
    assert bash_complete("txctl list --state fa", env, workdir) == ["failed"]
    assert bash_complete("txctl run -s local", env, workdir) == ["local_cwd", "local_docker"]
    assert bash_complete("txctl run -s local_c", env, workdir) == ["local_cwd"]
    assert bash_complete("txctl runopts sl", env, workdir) == ["slurm"]
    assert bash_complete("txctl run utils.e", env, workdir) == ["utils.echo"]
    (workdir / "mycomp.py").write_text("")
    assert bash_complete("txctl run myc", env, workdir) == ["mycomp.py"]
    # A component's own arguments are not txctl's flags.
    assert "--wait" not in bash_complete("txctl run utils.echo --", env, workdir)
    # Jobs: the app ids of the daemon's jobs, after a value-taking flag too.
    assert bash_complete(f"txctl status {app_id[:-2]}", env, workdir) == [app_id]
    assert app_id in bash_complete("txctl logs --tail 3 ", env, workdir)
    assert bash_complete(f"txctl logs {app_id} --f", env, workdir) == ["--follow"]
    # --socket on the line is the daemon asked.
    no_env = _env()
    line = f"txctl --socket {shared_daemon.socket} wait {app_id[:-2]}"
    assert bash_complete(line, no_env, workdir) == [app_id]


def test_completion_never_starts_a_daemon_or_hangs(workdir: Path) -> None:
    root = short_tmpdir()
    try:
        env = _env(XDG_RUNTIME_DIR=str(root / "run"), XDG_STATE_HOME=str(root / "state"))
        assert bash_complete("txctl status ", env, workdir) == []
        assert not (root / "state").exists() and not (root / "run").exists()
        # A socket that accepts connections but never answers: the deadline ends the query.
        mute = root / "mute.sock"
        with socket.socket(socket.AF_UNIX) as listener:
            listener.bind(str(mute))
            listener.listen(8)
            proc = subprocess.run(
                [*TXCTL, "__complete", "handles", "--socket", str(mute)],
                capture_output=True, text=True, env=env, timeout=20,
            )  # fmt: skip
        assert proc.stdout == "" and proc.stderr == ""
    finally:
        remove_tree(root)


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_script_parses_registers_and_completes_jobs(
    shared_daemon: Any, txctl: Any, workdir: Path, tmp_path: Path
) -> None:
    handle = first_line(txctl("run", "--wait", "utils.echo", check=0).stdout)
    app_id = handle.rsplit("/", 1)[1]
    script = tmp_path / "txctl.zsh"
    script.write_text(txctl("completion", "zsh", check=0).stdout)
    subprocess.run(["zsh", "-n", str(script)], check=True, timeout=30)
    # As zsh's _bash_complete calls it (sh emulation: arrays from 0); zsh itself then keeps
    # the words that match what was typed, so the function offers them all.
    body = (
        f"source {script} || exit 9\n"
        'print -r -- "registered: ${_comps[txctl]}"; print -- --\n'
        'ask() { emulate -L sh; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _txctl;'
        ' print -rl -- "${COMPREPLY[@]}"; }\n'
        "ask txctl st\nprint -- --\nask txctl logs ''\n"
    )
    proc = subprocess.run(
        ["zsh", "-f", "-c", body],
        capture_output=True, text=True, timeout=30, cwd=workdir,
        env=_env(TXD_SOCKET=str(shared_daemon.socket), HOME=str(tmp_path)),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    head, commands, jobs = proc.stdout.split("--\n")
    assert head == "registered: _bash_complete -F _txctl\n"
    assert "status" in commands.split() and "prune" in commands.split()
    assert app_id in jobs.split()
