"""A workspace: the caller's directory of code that a job runs instead of what its image or job
directory holds (TorchX's workspaces). Schedulers that support one turn it into something their
backend can run: an image built on the role's (workspace.images) or a copy in the job's
directory (slurm).

Here: which files make up a workspace (`scan`, honouring an ignore file in Docker's format),
a digest of their names, modes and bytes (`digest`: the cache key of a built image), and a tar
stream of them (`tar_stream`). Files are read in chunks as they are sent, never whole: a
workspace may hold data files far larger than memory.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import stat
import tarfile
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path

from txd.schedulers.errors import InvalidArgument
from txd.schedulers.workspace.ignorefile import IgnoreFileError, Matcher

CHUNK = 1 << 20
BLOCK = tarfile.BLOCKSIZE
DOCKERIGNORE = ".dockerignore"
# TorchX's DirWorkspaceMixin reads this one for copies into a job directory.
TORCHXIGNORE = ".torchxignore"


@dataclass(frozen=True)
class Entry:
    """One file, directory or symbolic link of a workspace."""

    name: str  # relative to the workspace, `/`-separated
    path: str  # absolute
    type: bytes  # tarfile.REGTYPE, DIRTYPE or SYMTYPE
    mode: int  # permission bits
    size: int = 0
    mtime: float = 0.0
    uid: int = 0
    gid: int = 0
    target: str = ""  # a link's


@dataclass(frozen=True)
class Scan:
    """What `scan` found: the entries in a stable order, and their total size in bytes."""

    root: str
    entries: list[Entry]

    @property
    def files(self) -> int:
        return sum(e.type == tarfile.REGTYPE for e in self.entries)

    @property
    def size(self) -> int:
        return sum(e.size for e in self.entries)

    def summary(self) -> str:
        return f"{self.files} file(s), {_human(self.size)}"


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError


def check_dir(path: str) -> None:
    """Raises InvalidArgument (field `workspace`) unless `path` is an existing directory."""
    if not os.path.isdir(path):
        raise InvalidArgument("workspace", f"{path!r} is not an existing directory")


def scan(root: str, ignore_file: str, *, skip: str | None = None) -> Scan:
    """Every entry of the workspace `root` that `root/<ignore_file>` does not exclude, sorted by
    name; symbolic links are kept as links, sockets and fifos left out. `skip`: a directory
    never included (where copies of this workspace go, when it lies inside it). Blocking: run
    it in a thread. Raises InvalidArgument (field `workspace`) for a bad pattern or a
    directory that cannot be read."""
    check_dir(root)
    try:
        matcher = Matcher.from_file(Path(root, ignore_file))
    except IgnoreFileError as e:
        raise InvalidArgument("workspace", str(e)) from None
    entries: list[Entry] = []
    skip_real = os.path.realpath(skip) if skip else None

    # An entry removed while the walk runs (a workspace like /tmp, where other programs come
    # and go) is left out, as if listed a moment later; one that cannot be read is an error.
    def walk(directory: str, prefix: str) -> None:
        try:
            with os.scandir(directory) as it:
                children = sorted(it, key=lambda d: d.name)
        except FileNotFoundError:
            if directory == root:
                raise _unreadable(
                    directory, FileNotFoundError(2, "removed during the scan")
                ) from None
            return
        except OSError as e:
            raise _unreadable(directory, e) from None
        for child in children:
            name = prefix + child.name
            try:
                st = child.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            except OSError as e:
                raise _unreadable(child.path, e) from None
            is_dir = stat.S_ISDIR(st.st_mode)
            if is_dir and skip_real and os.path.realpath(child.path) == skip_real:
                continue
            excluded = matcher.excluded(name)
            if is_dir:
                if not excluded:
                    entries.append(_entry(name, child.path, tarfile.DIRTYPE, st))
                # Below an excluded directory only a `!` pattern can bring something back.
                if not excluded or matcher.has_exclusions:
                    walk(child.path, name + "/")
            elif excluded:
                continue
            elif stat.S_ISREG(st.st_mode):
                entries.append(_entry(name, child.path, tarfile.REGTYPE, st))
            elif stat.S_ISLNK(st.st_mode):
                try:
                    target = os.readlink(child.path)
                except FileNotFoundError:
                    continue
                entries.append(_entry(name, child.path, tarfile.SYMTYPE, st, target))

    walk(root, "")
    return Scan(root, entries)


def _entry(name: str, path: str, type: bytes, st: os.stat_result, target: str = "") -> Entry:
    size = st.st_size if type == tarfile.REGTYPE else 0
    return Entry(
        name,
        path,
        type,
        stat.S_IMODE(st.st_mode),
        size,
        st.st_mtime,
        st.st_uid,
        st.st_gid,
        target,
    )


def digest(entries: Iterable[Entry], *extra: bytes) -> str:
    """sha256 (hex) of every entry's name, type, mode and bytes (a link's target), and of
    `extra`: equal for two workspaces that would give the same image. Reads every file:
    blocking, run it in a thread. Raises InvalidArgument for a file that cannot be read."""
    h = hashlib.sha256(b"txd-workspace-1\0")
    for part in extra:
        h.update(len(part).to_bytes(8, "big") + part)
    for e in entries:
        h.update(f"\0{e.name}\0{e.type.decode()}\0{e.mode:o}\0".encode(errors="surrogateescape"))
        if e.type == tarfile.SYMTYPE:
            h.update(e.target.encode(errors="surrogateescape"))
        elif e.type == tarfile.REGTYPE:
            try:
                with open(e.path, "rb") as f:
                    while chunk := f.read(CHUNK):
                        h.update(chunk)
            except OSError as err:
                raise _unreadable(e.path, err) from None
    return h.hexdigest()


def _unreadable(path: str, err: OSError) -> InvalidArgument:
    return InvalidArgument("workspace", f"cannot read {path}: {err.strerror}")


def _header(name: str, e: Entry | None, size: int = 0, type: bytes = tarfile.REGTYPE) -> bytes:
    info = tarfile.TarInfo(name)
    if e is not None:
        info.type, info.mode, info.size, info.mtime = e.type, e.mode, e.size, int(e.mtime)
        info.uid, info.gid, info.linkname = e.uid, e.gid, e.target
    else:
        info.type, info.size, info.mode = type, size, 0o755 if type == tarfile.DIRTYPE else 0o644
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def _read_whole(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read(CHUNK)


async def tar_stream(
    entries: Iterable[Entry], *, prefix: str = "", extra: Iterable[tuple[str, bytes]] = ()
) -> AsyncIterator[bytes]:
    """An uncompressed tar of the entries (named `prefix + name`, below a directory `prefix`
    when it is set), then of `extra` (name,
    bytes: small generated files), in chunks of at most CHUNK bytes read as they are sent.
    A file that shrank since it was scanned is padded with zeros, one that grew is cut: the
    archive stays well-formed. Raises InvalidArgument for a file that cannot be read."""
    if prefix:
        yield _header(prefix.rstrip("/"), None, type=tarfile.DIRTYPE)
    for e in entries:
        yield _header(prefix + e.name, e)
        if e.type != tarfile.REGTYPE or e.size == 0:
            continue
        try:
            if e.size <= CHUNK:  # most files: one trip to a thread
                data = await asyncio.to_thread(_read_whole, e.path)
                yield data[: e.size]
                left = e.size - min(len(data), e.size)
            else:
                left = 0
                async for chunk in _read_chunks(e.path, e.size):
                    yield chunk
        except OSError as err:
            raise _unreadable(e.path, err) from None
        while left > 0:
            pad = min(left, CHUNK)
            yield bytes(pad)
            left -= pad
        if e.size % BLOCK:
            yield bytes(BLOCK - e.size % BLOCK)
    for name, data in extra:
        yield _header(name, None, len(data))
        yield data + bytes(-len(data) % BLOCK)
    yield bytes(2 * BLOCK)


async def _read_chunks(path: str, size: int) -> AsyncIterator[bytes]:
    """Exactly `size` bytes of the file: its first ones, zeros after a premature end."""
    f = await asyncio.to_thread(open, path, "rb")
    try:
        left = size
        while left > 0:
            chunk = await asyncio.to_thread(f.read, min(CHUNK, left))
            if not chunk:
                break
            left -= len(chunk)
            yield chunk
        while left > 0:
            pad = min(left, CHUNK)
            yield bytes(pad)
            left -= pad
    finally:
        f.close()
