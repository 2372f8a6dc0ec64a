"""logs, one huge line (issue 18, items 6 and 7): a job prints one 100 MiB line ("needle" at its
middle); through `txctl logs`, on a fresh daemon each time: `--tail 1` (the daemon's peak RSS,
whether the line arrives whole), `--regex needle` (found?) and `--regex` of a pattern that
cannot match (silent and fast). With --base-tree (a base commit's worktree with its own
`scripts/setup dev`), the base daemon is measured too, interleaved base/this tree, and
its figures go beside this tree's in each row."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from txd.client import AsyncClient
from txd.v1 import AppDef, AppState, Role
from txd_testing import TXCTL

from benchmarks.common import JOB_TIMEOUT, fmt_s, log, median
from benchmarks.context import Context
from benchmarks.daemons import stop

MiB = 1 << 20
HALF = 50 * MiB
# Each half in 1 MiB writes; the line is BEGIN + x... + needle + x... + "\n".
WRITER = (
    "import sys\n"
    "w = sys.stdout.buffer\n"
    "block = b'x' * (1 << 20)\n"
    "w.write(b'BEGIN')\n"
    f"for _ in range({HALF // MiB}): w.write(block)\n"
    "w.write(b'needle')\n"
    f"for _ in range({HALF // MiB}): w.write(block)\n"
    "w.write(b'\\n')\n"
)
LINE_SIZE = 5 + 2 * HALF + 6 + 1
# Runs `prefix python -m txd.daemon ...` with the base's python instead of ours (exec: same pid).
_WITH_PYTHON = 'shift; exec "$0" "$@"'


@dataclass
class _Figures:
    peak_mib: list[float] = field(default_factory=list)  # daemon VmHWM during --tail 1
    growth_mib: list[float] = field(default_factory=list)  # ... above its RSS before
    tail: list[str] = field(default_factory=list)  # "whole", or what happened
    needle: list[str] = field(default_factory=list)
    needle_s: list[float] = field(default_factory=list)
    nomatch_s: list[float] = field(default_factory=list)
    nomatch_out: list[int] = field(default_factory=list)  # bytes on stdout + stderr


async def run(ctx: Context) -> None:
    base_tree = ctx.args.base_tree
    base_python = str(base_tree / ".venv/bin/python") if base_tree else None
    trees: list[tuple[str, str | None]] = [("this tree", None)]
    if base_python:
        trees.insert(0, (f"base {_commit(base_python)}", base_python))
    figures = {name: _Figures() for name, _ in trees}
    for rep in range(2):  # interleaved: base, this tree, base, this tree
        for name, python in trees:
            log(f"huge line, {name}, run {rep + 1}")
            await _one(ctx, python, figures[name], f"huge{rep}-{len(figures[name].tail)}")
    _report(ctx, trees, figures)


async def _one(ctx: Context, python: str | None, fig: _Figures, tag: str) -> None:
    prefix = ["sh", "-c", _WITH_PYTHON, python] if python else []
    name = f"{tag}-{'base' if python else 'new'}"
    d = ctx.daemons.new(name)
    d.prefix = prefix
    ctx.daemons.start(d)
    client = AsyncClient(d.socket, timeout=60)
    try:
        h = await client.run(AppDef(name="huge", roles=[Role(name="w", entrypoint="python3",
                                                             args=["-c", WRITER])]))  # fmt: skip
        st = await client.wait(h, timeout=JOB_TIMEOUT)
        if st.state != AppState.SUCCEEDED:
            raise RuntimeError(f"huge-line job ended {AppState.Name(st.state)}: {st.msg}")
        _reset_peak(d.pid)
        before = _vm(d.pid, "VmRSS") / 1024
        code, out, err, _ = await _txctl(d.socket, ctx.work, "--tail", "1", h)
        fig.peak_mib.append(_vm(d.pid, "VmHWM") / 1024)
        fig.growth_mib.append(fig.peak_mib[-1] - before)
        fig.tail.append(_verdict(code, out, err))
        code, out, err, t = await _txctl(d.socket, ctx.work, "--regex", "needle", h)
        fig.needle.append(_verdict(code, out, err))
        fig.needle_s.append(t)
        code, out, err, t = await _txctl(d.socket, ctx.work, "--regex", "nomatch|needles", h)
        fig.nomatch_s.append(t)
        fig.nomatch_out.append(len(out) + len(err) if code == 0 else -1)
    finally:
        await client.close()
        stop(d)


def _report(ctx: Context, trees: list[tuple[str, str | None]], figs: dict[str, _Figures]) -> None:
    new = figs["this tree"]
    base = next((figs[n] for n, p in trees if p), None)

    def beside(text: str, base_text: str) -> str:
        return f"{text}; {trees[0][0]}: {base_text}" if base is not None else text

    def mib(xs: list[float]) -> str:
        return "/".join(f"{x:.0f}" for x in xs)

    # The peak itself: the RSS before the read varies by tens of MiB with what the job's
    # capture and gRPC left allocated, so the growth is only a note.
    peak = max(new.peak_mib)
    res = ctx.res
    res.add(
        "daemon peak RSS, `txctl logs --tail 1` of a 100 MiB line",
        f"{peak:.0f} MiB",
        "< 150 MiB, the line whole",
        peak < 150 and all(v == "whole" for v in new.tail),
        note=beside(
            f"peaks {mib(new.peak_mib)} MiB (+{mib(new.growth_mib)} during the read),"
            f" {', '.join(new.tail)}",
            f"peaks {mib(base.peak_mib)} MiB (+{mib(base.growth_mib)}), {', '.join(base.tail)}"
            if base
            else "",
        ),
    )
    res.add(
        "`txctl logs --regex needle`, needle at byte 50M of a 100 MiB line",
        f"{fmt_s(median(new.needle_s))}",
        "the line, whole",
        all(v == "whole" for v in new.needle),
        note=beside(
            f"{', '.join(new.needle)}",
            f"{', '.join(base.needle)}, {fmt_s(median(base.needle_s))}" if base else "",
        ),
    )
    res.add(
        "`txctl logs --regex` that cannot match, 100 MiB line",
        f"{fmt_s(median(new.nomatch_s))}",
        "silent",
        all(n == 0 for n in new.nomatch_out),
        note=beside(
            f"{100 / median(new.nomatch_s):.0f} MiB/s, output bytes {new.nomatch_out}",
            f"{fmt_s(median(base.nomatch_s))}, output bytes {base.nomatch_out}" if base else "",
        ),
    )


def _commit(python: str) -> str:
    """The commit of the tree whose venv holds `python` (<tree>/.venv/bin/python)."""
    tree = Path(python).parents[2]
    out = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return out.stdout.strip() or str(tree)


def _verdict(code: int | None, out: bytes, err: bytes) -> str:
    if code != 0:
        return f"exit {code}"
    if len(out) == LINE_SIZE and hashlib.sha256(out).digest() == _line_digest():
        return "whole"
    return f"{len(out)} bytes"


@functools.cache
def _line_digest() -> bytes:
    half = b"x" * HALF
    return hashlib.sha256(b"BEGIN" + half + b"needle" + half + b"\n").digest()


async def _txctl(socket: Path, cwd: Path, *args: str) -> tuple[int | None, bytes, bytes, float]:
    t0 = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *TXCTL, "--socket", str(socket), "--no-autostart", "logs", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=cwd,
    )  # fmt: skip
    async with asyncio.timeout(JOB_TIMEOUT):
        out, err = await proc.communicate()
    return proc.returncode, out, err, time.perf_counter() - t0


def _vm(pid: int, key: str) -> int:
    """A /proc/<pid>/status field in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {key} for {pid}")


def _reset_peak(pid: int) -> None:
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")  # VmHWM := the current RSS
