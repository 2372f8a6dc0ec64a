"""The daemon's per-scheduler settings: a TOML file's [schedulers.NAME] tables and `--set`
flags, checked against each scheduler's Settings when the daemon starts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from txd_testing import Daemon, clean_env, install_plugin, remove_tree, short_tmpdir


def _settings(d: Daemon) -> dict[str, dict[str, Any]]:
    infos = json.loads(d.txctl("schedulers", "--json", check=0).stdout)["schedulers"]
    return {s["name"]: s.get("settings", {}) for s in infos}


def _txd(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A daemon that is expected to refuse to start."""
    return subprocess.run(
        [sys.executable, "-m", "txd.daemon", "--socket", str(root / "s"), "--state-dir",
         str(root / "st"), *args],
        capture_output=True, text=True, timeout=30, env=clean_env(), check=False,
    )  # fmt: skip


@pytest.fixture
def root() -> Any:
    path = short_tmpdir()
    try:
        yield path
    finally:
        remove_tree(path)


def test_config_file_and_set_reach_the_schedulers(root: Path) -> None:
    install_plugin(root / "site")
    conf = root / "txd.toml"
    conf.write_text("[schedulers.fakepoll]\npoll_interval = 0.25\n\n[schedulers.local_cwd]\n")
    d = Daemon(
        root,
        env={"PYTHONPATH": str(root / "site")},
        args=["--config", str(conf), "--set", "local_cwd.poll_interval=3"],
    ).start()
    try:
        settings = _settings(d)
        assert settings["fakepoll"] == {"poll_interval": {"float": 0.25}}
        assert settings["local_cwd"] == {"poll_interval": {"float": 3.0}}
        assert settings["slurm"] == {  # the defaults
            "poll_interval": {"float": 1.0},
            "command_timeout": {"float": 60.0},
            "forgotten_grace": {"float": 60.0},
        }
    finally:
        d.close()


def test_txd_config_env_names_the_file(root: Path) -> None:
    conf = root / "env.toml"
    conf.write_text("[schedulers.local_cwd]\npoll_interval = 7\n")
    d = Daemon(root, env={"TXD_CONFIG": str(conf)}).start()
    try:
        assert _settings(d)["local_cwd"] == {"poll_interval": {"float": 7.0}}
    finally:
        d.close()


@pytest.mark.parametrize(
    ("toml", "args", "message"),
    [
        (
            "[schedulers.local_cwd]\npoll_intervl = 2\n",
            [],
            "txd: settings [schedulers.local_cwd] poll_intervl: unknown option "
            "(valid options: poll_interval)",
        ),
        (
            "[schedulers.local_cwd]\npoll_interval = 'soon'\n",
            [],
            "txd: settings [schedulers.local_cwd] poll_interval: expected float, got 'soon'",
        ),
        (
            "[schedulers.local_cwd]\npoll_interval = -1\n",
            [],
            "txd: settings [schedulers.local_cwd] poll_interval: poll_interval must be > 0, "
            "got -1.0",
        ),
        (
            "[schedulers.nosuch]\n",
            [],
            "txd: settings for unknown scheduler 'nosuch'"
            " (known: aws_batch, aws_sagemaker, kubernetes, kubernetes_mcad, local_cwd,"
            " local_docker, lsf, slurm)",
        ),
        ("", ["--set", "local_cwd.poll_interval=x"], "poll_interval: expected float, got 'x'"),
        (
            "",
            ["--set", "slurm.command_timeout=0"],
            "txd: settings [schedulers.slurm] command_timeout: command_timeout must be > 0, "
            "got 0.0",
        ),
    ],
)
def test_bad_settings_stop_the_daemon_at_start(
    root: Path, toml: str, args: list[str], message: str
) -> None:
    conf = root / "txd.toml"
    conf.write_text(toml)
    proc = _txd(root, "--config", str(conf), *args)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr.strip().splitlines()[-1]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "poll_interval=2"], "--set 'poll_interval=2': expected SCHEDULER.KEY=VALUE"),
        (["--poll-interval", "slurm"], "--poll-interval 'slurm': expected SCHEDULER=SECONDS"),
        (["--config", "/nonexistent/txd.toml"], "cannot read the config file /nonexistent/"),
    ],
)
def test_malformed_flags_and_files(root: Path, args: list[str], message: str) -> None:
    proc = _txd(root, *args)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_toml_syntax_error_names_the_file(root: Path) -> None:
    conf = root / "bad.toml"
    conf.write_text("[schedulers.local_cwd\n")
    proc = _txd(root, "--config", str(conf))
    assert proc.returncode == 2
    assert f"{conf}: " in proc.stderr
