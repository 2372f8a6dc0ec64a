"""`txctl run path/to/file.py:function`: a user's component file, its arguments parsed from the
function's signature, run through the daemon."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
from txd_testing import HANDLE_RE, first_line, no_traceback

COMPONENT = textwrap.dedent('''
    from txd.v1 import AppDef, Role


    def hello(name: str, times: int = 2) -> AppDef:
        """Greets someone a few times.

        Args:
            name: who to greet
            times: how many greetings
        """
        script = f'for i in $(seq {times}); do echo "hello {name} $i"; done'
        return AppDef(name="hello", roles=[Role(name="greeter", entrypoint="sh",
                                                args=["-c", script])])
''')


@pytest.fixture
def comp(workdir: Path) -> Path:
    path = workdir / "comp.py"
    path.write_text(COMPONENT)
    return path


def test_run_user_component(txctl: Any, comp: Path) -> None:
    proc = txctl("run", "--wait", "comp.py:hello", "--name", "bob", check=0)
    handle = first_line(proc.stdout)
    assert re.fullmatch(HANDLE_RE.format(name="hello"), handle)
    assert "SUCCEEDED" in proc.stdout
    assert txctl("logs", handle, check=0).stdout == "hello bob 1\nhello bob 2\n"
    assert txctl("logs", handle, "greeter/0", check=0).stdout == "hello bob 1\nhello bob 2\n"
    desc = json.loads(txctl("describe", "--json", handle, check=0).stdout)
    assert desc["app"]["name"] == "hello"
    assert desc["app"]["roles"][0]["name"] == "greeter"


def test_user_component_typed_argument(txctl: Any, comp: Path) -> None:
    proc = txctl("run", "--wait", "comp.py:hello", "--name", "ann", "--times", "3", check=0)
    logs = txctl("logs", first_line(proc.stdout), check=0).stdout
    assert logs == "hello ann 1\nhello ann 2\nhello ann 3\n"


def test_user_component_absolute_path_from_elsewhere(
    shared_daemon: Any, comp: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = shared_daemon.txctl(
        "run", "--wait", f"{comp}:hello", "--name", "abs", cwd=elsewhere, check=0
    )
    logs = shared_daemon.txctl("logs", first_line(proc.stdout), check=0).stdout
    assert logs == "hello abs 1\nhello abs 2\n"


def test_user_component_in_subdirectory(txctl: Any, workdir: Path) -> None:
    sub = workdir / "components"
    sub.mkdir()
    (sub / "greet.py").write_text(COMPONENT)
    proc = txctl(
        "run", "--wait", "components/greet.py:hello", "--name", "sub", "--times", "1", check=0
    )
    assert txctl("logs", first_line(proc.stdout), check=0).stdout == "hello sub 1\n"


def test_user_component_help(txctl: Any, comp: Path) -> None:
    before = txctl("list", check=0).stdout
    proc = txctl("run", "comp.py:hello", "--help", check=0)
    assert "who to greet" in proc.stdout
    assert "--name" in proc.stdout and "--times" in proc.stdout
    assert txctl("list", check=0).stdout == before


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["comp.py:hello"], "--name"),
        (["comp.py:hello", "--name", "x", "--times", "many"], "--times"),
        (["comp.py:helo", "--name", "x"], "did you mean hello"),
        (["comp.py", "--name", "x"], "missing function name"),
        (["missing.py:hello"], "missing.py"),
    ],
)
def test_user_component_errors(txctl: Any, comp: Path, args: list[str], needle: str) -> None:
    proc = txctl("run", *args, check=2)
    no_traceback(proc)
    assert needle in proc.stderr


def test_user_component_syntax_error(txctl: Any, workdir: Path) -> None:
    (workdir / "broken.py").write_text("def hello(:\n")
    proc = txctl("run", "broken.py:hello", check=2)
    no_traceback(proc)
    assert "broken.py" in proc.stderr and "syntax" in proc.stderr
