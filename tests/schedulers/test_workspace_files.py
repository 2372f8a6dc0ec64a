"""A workspace's files: which are taken (.dockerignore, skipped directories), their digest, and
the tar stream, unpacked by the real tar(1)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from txd.schedulers.errors import InvalidArgument
from txd.schedulers.workspace import files as ws


def make_tree(root: Path) -> None:
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "sub" / "mod.py").write_text("X = 1\n")
    (root / "run.sh").write_text("#!/bin/sh\necho run\n")
    (root / "run.sh").chmod(0o755)
    (root / "big.bin").write_bytes(os.urandom(ws.CHUNK * 2 + 123))  # more than one chunk
    (root / "link").symlink_to("pkg/sub/mod.py")
    (root / "logs").mkdir()
    (root / "logs" / "a.log").write_text("noise\n")
    (root / "notes.md").write_text("x\n")
    (root / "README.md").write_text("y\n")
    (root / ".dockerignore").write_text("logs\n*.md\n!README.md\n")


async def untar(entries: list[ws.Entry], dest: Path, **kw: object) -> None:
    dest.mkdir()
    proc = await asyncio.create_subprocess_exec(
        "tar", "-x", "-f", "-", "-C", dest, stdin=asyncio.subprocess.PIPE
    )
    assert proc.stdin is not None
    async for chunk in ws.tar_stream(entries, **kw):  # type: ignore[arg-type]
        assert len(chunk) <= ws.CHUNK
        proc.stdin.write(chunk)
        await proc.stdin.drain()
    proc.stdin.close()
    async with asyncio.timeout(30):
        assert await proc.wait() == 0


def tree(root: Path) -> dict[str, tuple[int, bytes]]:
    out = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            out[rel] = (0, os.readlink(path).encode())
        elif path.is_file():
            out[rel] = (path.stat().st_mode & 0o777, path.read_bytes())
        else:
            out[rel] = (path.stat().st_mode & 0o777, b"")
    return out


async def test_tar_stream_holds_what_dockerignore_leaves(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    make_tree(src)
    found = ws.scan(str(src), ws.DOCKERIGNORE)
    names = [e.name for e in found.entries]
    assert names == sorted(names)
    assert "logs" not in names and "logs/a.log" not in names and "notes.md" not in names
    assert found.files == 6  # .dockerignore, README.md, big.bin, run.sh, __init__.py, mod.py
    await untar(found.entries, tmp_path / "out")
    want = {k: v for k, v in tree(src).items() if not k.startswith("logs") and k != "notes.md"}
    assert tree(tmp_path / "out") == want
    assert os.readlink(tmp_path / "out" / "link") == "pkg/sub/mod.py"


async def test_prefix_and_extra_files(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("a")
    found = ws.scan(str(src), ws.DOCKERIGNORE)
    await untar(found.entries, tmp_path / "out", prefix="workspace/", extra=[("Dockerfile", b"F")])
    assert (tmp_path / "out" / "workspace" / "a.txt").read_text() == "a"
    assert (tmp_path / "out" / "Dockerfile").read_bytes() == b"F"


async def test_a_file_that_changes_size_keeps_the_archive_whole(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "shrinks").write_bytes(b"x" * 1000)
    (src / "grows").write_bytes(b"y" * 10)
    (src / "z").write_text("last")
    found = ws.scan(str(src), ws.DOCKERIGNORE)
    (src / "shrinks").write_bytes(b"x" * 10)
    (src / "grows").write_bytes(b"y" * 5000)
    await untar(found.entries, tmp_path / "out")
    assert (tmp_path / "out" / "shrinks").read_bytes() == b"x" * 10 + bytes(990)
    assert (tmp_path / "out" / "grows").read_bytes() == b"y" * 10
    assert (tmp_path / "out" / "z").read_text() == "last"


def test_skip_leaves_a_directory_out(tmp_path: Path) -> None:
    (tmp_path / "copies" / "old").mkdir(parents=True)
    (tmp_path / "copies" / "old" / "f").write_text("")
    (tmp_path / "code.py").write_text("")
    found = ws.scan(str(tmp_path), ws.TORCHXIGNORE, skip=str(tmp_path / "copies"))
    assert [e.name for e in found.entries] == ["code.py"]


def test_digest_follows_names_modes_and_bytes_not_times(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("1")

    def key(*extra: bytes) -> str:
        return ws.digest(ws.scan(str(tmp_path), ws.DOCKERIGNORE).entries, *extra)

    first = key(b"base")
    os.utime(tmp_path / "a.py", (1, 1))
    assert key(b"base") == first
    assert key(b"other base") != first
    (tmp_path / "a.py").chmod(0o700)
    moded = key(b"base")
    assert moded != first
    (tmp_path / "a.py").write_text("2")
    assert key(b"base") != moded
    (tmp_path / "a.py").rename(tmp_path / "b.py")
    assert len({first, moded, key(b"base")}) == 3


def test_bad_workspaces_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match=r"workspace: .* is not an existing directory"):
        ws.scan(str(tmp_path / "missing"), ws.DOCKERIGNORE)
    (tmp_path / ".dockerignore").write_text("[x\n")
    with pytest.raises(InvalidArgument, match=r"workspace: .*\.dockerignore: bad pattern"):
        ws.scan(str(tmp_path), ws.DOCKERIGNORE)


async def test_long_and_non_utf8_names_survive(tmp_path: Path) -> None:
    src = tmp_path / "src"
    deep = src / ("d" * 120) / ("f" * 120)
    deep.parent.mkdir(parents=True)
    deep.write_text("long")
    odd = os.fsencode(src) + b"/caf\xe9"
    fd = os.open(odd, os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"latin-1 name")
    os.close(fd)
    await untar(ws.scan(str(src), ws.DOCKERIGNORE).entries, tmp_path / "out")
    assert tree(tmp_path / "out") == tree(src)


def test_an_entry_removed_during_the_scan_is_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A workspace like /tmp, where other programs remove files while txd lists it: what is gone
    # by the time the scan looks at it is left out; the rest is scanned as usual.
    for name in ("a.txt", "gone.txt", "z.txt"):
        (tmp_path / name).write_text(name)
    (tmp_path / "gone_dir").mkdir()
    (tmp_path / "gone_dir" / "x").write_text("x")
    real_scandir = os.scandir

    @contextlib.contextmanager
    def listed_then_removed(path: str) -> Iterator[list[os.DirEntry[str]]]:
        with real_scandir(path) as it:
            listed = list(it)
        (tmp_path / "gone.txt").unlink()
        shutil.rmtree(tmp_path / "gone_dir")
        yield listed

    def scandir(path: Any) -> Any:
        return listed_then_removed(path) if path == str(tmp_path) else real_scandir(path)

    monkeypatch.setattr(ws.os, "scandir", scandir)
    found = ws.scan(str(tmp_path), ws.DOCKERIGNORE)
    assert [e.name for e in found.entries] == ["a.txt", "z.txt"]
