"""scripts/protocheck bites: run on a copy of proto/ in a scratch git repository, it fails
when a commit removes or renumbers a field (naming it) or leaves a field undocumented, passes
a comment-only change, and says so when there is no previous commit to compare with."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
BUF = REPO / "tests" / "node" / "node_modules" / ".bin" / "buf"

pytestmark = pytest.mark.skipif(
    not BUF.exists(), reason=f"{BUF} is not installed (scripts/install-node; scripts/test runs it)"
)


def _git(repo: Path, *args: str) -> None:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }
    subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, timeout=60)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository holding scripts/protocheck and proto/ (buf.yaml and the .proto files),
    committed once."""
    (tmp_path / "scripts").mkdir()
    shutil.copy2(REPO / "scripts" / "protocheck", tmp_path / "scripts")
    (tmp_path / "proto" / "txd" / "v1").mkdir(parents=True)
    shutil.copy2(REPO / "proto" / "buf.yaml", tmp_path / "proto")
    for proto in (REPO / "proto" / "txd" / "v1").glob("*.proto"):
        shutil.copy2(proto, tmp_path / "proto" / "txd" / "v1")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "first")
    return tmp_path


def _protocheck(repo: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(repo / "scripts" / "protocheck")],
        capture_output=True,
        text=True,
        env={**os.environ, "BUF": str(BUF)},
        timeout=120,
    )


def _commit_edit(repo: Path, name: str, old: str, new: str) -> None:
    path = repo / "proto" / "txd" / "v1" / name
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))
    _git(repo, "commit", "-q", "-am", "second")


def test_single_commit_skips_breaking_and_says_so(repo: Path) -> None:
    proc = _protocheck(repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no previous commit" in proc.stderr
    assert "buf breaking skipped" in proc.stderr


def test_comment_change_passes(repo: Path) -> None:
    _commit_edit(repo, "app.proto", "// The app's state.\n", "// The app's state, folded.\n")
    proc = _protocheck(repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stderr == ""


def test_renumbered_field_fails(repo: Path) -> None:
    _commit_edit(repo, "runner.proto", "string request_id = 6;", "string request_id = 16;")
    proc = _protocheck(repo)
    assert proc.returncode != 0
    assert re.search(r'field "6" with name "request_id" on message "RunRequest"', proc.stdout), (
        proc.stdout + proc.stderr
    )


def test_removed_field_fails(repo: Path) -> None:
    _commit_edit(repo, "app.proto", "  string stale_msg = 14;\n", "")
    proc = _protocheck(repo)
    assert proc.returncode != 0
    assert 'field "14" with name "stale_msg" on message "AppStatus"' in proc.stdout, (
        proc.stdout + proc.stderr
    )


def test_undocumented_field_fails_lint(repo: Path) -> None:
    _commit_edit(
        repo,
        "runner.proto",
        "  string request_id = 6;\n",
        "  string request_id = 6;\n  string extra = 99;\n",
    )
    proc = _protocheck(repo)
    assert proc.returncode != 0
    assert 'Field "extra" should have a non-empty comment' in proc.stdout, proc.stdout + proc.stderr
