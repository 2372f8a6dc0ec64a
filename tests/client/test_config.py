"""`.txdconfig` / `.torchxconfig` discovery, precedence and parsing."""

from __future__ import annotations

from pathlib import Path

import pytest
from txd.client.config import Config, ConfigError, load_config


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    return home, cwd


def _load(home: Path, cwd: Path, environ: dict[str, str] | None = None) -> Config:
    return load_config(cwd=str(cwd), home=str(home), environ=environ or {})


def test_no_files_is_empty(dirs: tuple[Path, Path]) -> None:
    config = _load(*dirs)
    assert config.files == []
    assert config.scheduler_cfg("local_cwd") == {}
    assert config.component_defaults("utils.echo") == {}
    assert config.cli_default("run", "scheduler") is None


def test_sections_and_case_sensitive_raw_values(dirs: tuple[Path, Path]) -> None:
    home, cwd = dirs
    (cwd / ".txdconfig").write_text(
        "[slurm]\n"
        "partition = gpu\n"
        "memMB = 100\n"
        "time = 1:00:00%\n"
        "mail = a;b\n"
        "[component:dist.ddp]\n"
        "j = 2x4\n"
        "env = A=B,C=D\n"
        "[cli:run]\n"
        "scheduler = slurm\n"
        "component = dist.ddp\n"
    )
    config = _load(home, cwd)
    assert config.files == [str(cwd / ".txdconfig")]
    assert config.scheduler_cfg("slurm") == {
        "partition": "gpu",
        "memMB": "100",
        "time": "1:00:00%",
        "mail": "a;b",
    }
    assert config.component_defaults("dist.ddp") == {"j": "2x4", "env": "A=B,C=D"}
    assert config.cli_default("run", "scheduler") == "slurm"
    assert config.cli_default("run", "component") == "dist.ddp"
    assert config.cli_default("run", "workspace") is None
    assert config.cli_default("status", "scheduler") is None
    # the section for components is not a scheduler section
    assert config.scheduler_cfg("component") == {}


def test_cwd_overrides_home_key_by_key(dirs: tuple[Path, Path]) -> None:
    home, cwd = dirs
    (home / ".torchxconfig").write_text(
        "[slurm]\npartition = home\ntime = 10\n[cli:run]\nscheduler = slurm\n"
    )
    (cwd / ".torchxconfig").write_text(
        "[slurm]\npartition = cwd\n[component:utils.echo]\nmsg = hi\n"
    )
    config = _load(home, cwd)
    assert config.files == [str(home / ".torchxconfig"), str(cwd / ".torchxconfig")]
    assert config.scheduler_cfg("slurm") == {"partition": "cwd", "time": "10"}
    assert config.component_defaults("utils.echo") == {"msg": "hi"}
    assert config.cli_default("run", "scheduler") == "slurm"


def test_cli_values_win_when_merged_over_config(dirs: tuple[Path, Path]) -> None:
    home, cwd = dirs
    (cwd / ".txdconfig").write_text("[local_cwd]\nlog_dir = /cfg\nprepend_cwd = true\n")
    cfg = _load(home, cwd).scheduler_cfg("local_cwd") | {"log_dir": "/cli"}
    assert cfg == {"log_dir": "/cli", "prepend_cwd": "true"}


def test_returned_dicts_are_copies(dirs: tuple[Path, Path]) -> None:
    home, cwd = dirs
    (cwd / ".txdconfig").write_text("[slurm]\npartition = a\n")
    config = _load(home, cwd)
    config.scheduler_cfg("slurm")["partition"] = "changed"
    assert config.scheduler_cfg("slurm") == {"partition": "a"}


def test_txdconfig_preferred_over_torchxconfig_in_the_same_directory(
    dirs: tuple[Path, Path],
) -> None:
    home, cwd = dirs
    (home / ".txdconfig").write_text("[slurm]\npartition = txd\n")
    (home / ".torchxconfig").write_text("[slurm]\npartition = torchx\ntime = 5\n")
    config = _load(home, cwd)
    assert config.files == [str(home / ".txdconfig")]
    assert config.scheduler_cfg("slurm") == {"partition": "txd"}


def test_same_home_and_cwd_loaded_once(tmp_path: Path) -> None:
    (tmp_path / ".txdconfig").write_text("[slurm]\npartition = a\n")
    config = load_config(cwd=str(tmp_path), home=str(tmp_path), environ={})
    assert config.files == [str(tmp_path / ".txdconfig")]


def test_txdconfig_env_is_the_only_file(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    home, cwd = dirs
    (home / ".txdconfig").write_text("[slurm]\npartition = home\ntime = 1\n")
    (cwd / ".txdconfig").write_text("[slurm]\npartition = cwd\n")
    explicit = tmp_path / "elsewhere.ini"
    explicit.write_text("[slurm]\npartition = env\n")
    config = _load(home, cwd, {"TXDCONFIG": str(explicit)})
    assert config.files == [str(explicit)]
    assert config.scheduler_cfg("slurm") == {"partition": "env"}


def test_txdconfig_env_missing_file_is_an_error(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    missing = tmp_path / "nope.ini"
    with pytest.raises(ConfigError, match=rf"TXDCONFIG names {missing}, which is not a file"):
        _load(*dirs, {"TXDCONFIG": str(missing)})


def test_defaults_come_from_the_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / ".torchxconfig").write_text("[cli:run]\nscheduler = from_home\n")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("TXDCONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    assert load_config().cli_default("run", "scheduler") == "from_home"
    (tmp_path / ".txdconfig").write_text("[cli:run]\nscheduler = from_cwd\n")
    assert load_config().cli_default("run", "scheduler") == "from_cwd"


def test_malformed_sections_are_ignored(dirs: tuple[Path, Path]) -> None:
    home, cwd = dirs
    (cwd / ".txdconfig").write_text(
        "[component:]\nj = 1\n"
        "[:bad]\nx = 1\n"
        "[cli:]\nscheduler = x\n"
        "[component: utils.echo ]\nmsg = spaced\n"
        "[DEFAULT]\nleak = no\n"
        "[slurm]\npartition = p\n"
    )
    config = _load(home, cwd)
    assert config.component_defaults("") == {}
    assert config.component_defaults("utils.echo") == {"msg": "spaced"}
    assert config.scheduler_cfg("slurm") == {"partition": "p"}  # [DEFAULT] keys do not leak
    assert config.cli_default("", "scheduler") is None
    assert set(config.sections) == {"component:utils.echo", "DEFAULT", "slurm"}


def test_multiline_and_empty_values(dirs: tuple[Path, Path]) -> None:
    home, cwd = dirs
    (cwd / ".txdconfig").write_text("[cli:run]\nworkspace =\n    a: b\n    c: d\n[x]\nempty =\n")
    config = _load(home, cwd)
    assert config.cli_default("run", "workspace") == "\na: b\nc: d"
    assert config.scheduler_cfg("x") == {"empty": ""}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("key = value\n", r"\.txdconfig:1: expected a \[section\] header before 'key = value'"),
        ("[a]\nx = 1\nnot a pair\n", r"\.txdconfig:3: cannot parse 'not a pair'"),
        ("[a]\nx = 1\n[b]\n[a]\n", r"\.txdconfig:4: section \[a\] appears twice"),
        ("[a]\nx = 1\nx = 2\n", r"\.txdconfig:3: key 'x' appears twice in \[a\]"),
    ],
)
def test_unparsable_file_names_file_and_line(
    dirs: tuple[Path, Path], text: str, message: str
) -> None:
    home, cwd = dirs
    (cwd / ".txdconfig").write_text(text)
    with pytest.raises(ConfigError, match=message) as info:
        _load(home, cwd)
    assert str(info.value).startswith(str(cwd / ".txdconfig"))


def test_unreadable_home_file_is_reported(dirs: tuple[Path, Path]) -> None:
    home, cwd = dirs
    (home / ".torchxconfig").write_bytes(b"[a]\nx = \xff\n")
    with pytest.raises(ConfigError, match=r"\.torchxconfig: not UTF-8"):
        _load(home, cwd)


def test_torchxconfig_none_means_unset(dirs: tuple[Path, Path]) -> None:
    # `torchx configure --all` writes `key = None` for options without a default.
    home, cwd = dirs
    (cwd / ".torchxconfig").write_text("[slurm]\npartition = None\ntime = 1:00\n")
    assert _load(home, cwd).scheduler_cfg("slurm") == {"time": "1:00"}
