"""Measuring and printing helpers shared by the areas: the results table and its noise gauge,
percentiles and formats, timed commands, and the client calls every area makes."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from txd.client import AsyncClient
from txd.v1 import AppDef, AppState, Role

from benchmarks.harnesses import ROOT

BENCH_DIR = ROOT / ".bench"
BIN = Path(sys.executable).parent

# Bounds, so that nothing hangs for ever.
CLI_TIMEOUT = 60.0
JOB_TIMEOUT = 300.0
PIP_TIMEOUT = 900.0

CLK_TCK = os.sysconf("SC_CLK_TCK")
NCPU = len(os.sched_getaffinity(0))
HEADER = ["figure", "measured", "target", "met", "others' CPU", "details"]


def log(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


# -- results ---------------------------------------------------------------------------------


@dataclass
class Row:
    name: str
    value: str
    target: str = ""
    met: bool | None = None  # None: informational, or not measured
    note: str = ""
    others: str = ""  # CPU used by other processes on the machine while this was measured


@dataclass
class Results:
    rows: list[Row] = field(default_factory=list)
    # The bench's own processes besides itself and its children (daemons, moto_server): their
    # CPU is the bench's, not others'. Live ones count, with their reaped children.
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @contextlib.contextmanager
    def section(self) -> Iterator[None]:
        """Marks the rows added inside with the share of the machine's CPU that processes other
        than this benchmark (and its daemons, jobs and CLIs) used meanwhile: a noise gauge."""
        first = len(self.rows)
        t0, busy0, own0 = time.perf_counter(), busy_cpu_seconds(), self._own()
        try:
            yield
        finally:
            wall = time.perf_counter() - t0
            others = max(0.0, (busy_cpu_seconds() - busy0) - (self._own() - own0))
            share = others / (wall * NCPU) if wall > 0 else 0.0
            for r in self.rows[first:]:
                r.others = f"{100 * share:.0f}%"

    def _own(self) -> float:
        t = os.times()
        own = t.user + t.system + t.children_user + t.children_system
        for proc in self.procs:
            if proc.returncode is None:
                with contextlib.suppress(OSError, ValueError, IndexError):
                    with open(f"/proc/{proc.pid}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                    own += sum(int(x) for x in fields[11:15]) / CLK_TCK
        return own

    def add(
        self, name: str, value: str, target: str = "", met: bool | None = None, note: str = ""
    ) -> None:
        row = Row(name, value, target, met, note)
        self.rows.append(row)
        verdict = "" if met is None else (" [met]" if met else " [MISSED]")
        log(
            f"  {name}: {value}{'  target ' + target if target else ''}{verdict}"
            f"{'  (' + note + ')' if note else ''}"
        )

    def table(self) -> list[list[str]]:
        out = []
        for r in self.rows:
            met = (
                "—"
                if not r.target
                else ("yes" if r.met else ("NO" if r.met is False else "not measured"))
            )
            out.append([r.name, r.value, r.target or "—", met, r.others or "—", r.note])
        return out


def busy_cpu_seconds() -> float:
    """Non-idle CPU time of the whole machine since boot (all CPUs), from /proc/stat."""
    with open("/proc/stat") as f:
        vals = [int(x) for x in f.readline().split()[1:9]]
    return (sum(vals) - vals[3] - vals[4]) / CLK_TCK  # minus idle and iowait


# -- figures ---------------------------------------------------------------------------------


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs)


def pct(xs: Sequence[float], p: float) -> float:
    """Nearest-rank percentile."""
    s = sorted(xs)
    k = max(0, min(len(s) - 1, math.ceil(p / 100 * len(s)) - 1))
    return s[k]


def fmt_s(x: float) -> str:
    return f"{x:.3f} s"


def fmt_ms(x: float) -> str:
    return f"{x:.1f} ms"


def fs_type(path: Path) -> str:
    """The filesystem a path is on: "ext4 on /"."""
    best, kind = "", "?"
    with contextlib.suppress(OSError), open("/proc/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and str(path).startswith(parts[1]) and len(parts[1]) > len(best):
                best, kind = parts[1], f"{parts[2]} on {parts[1]}"
    return kind


# -- commands --------------------------------------------------------------------------------


def timed_run(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, str]:
    """Wall time of one command, and its stdout; raises on a non-zero exit."""
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, timeout=CLI_TIMEOUT)
    elapsed = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(
            f"{' '.join(cmd)} exited {p.returncode}: "
            f"{p.stderr.decode(errors='replace').strip()[-500:]}"
        )
    return elapsed, p.stdout.decode(errors="replace")


async def sh(env: dict[str, str], *argv: str) -> str:
    """Runs a command; its stdout, stripped. Raises on failure."""
    proc = await asyncio.create_subprocess_exec(
        *argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = await proc.communicate()
    if proc.returncode:
        raise RuntimeError(f"{' '.join(argv)} failed: {err.decode().strip()}")
    return out.decode().strip()


async def txctl_run(
    socket: Path, env: dict[str, str], cwd: Path, *args: str, txctl: Path = BIN / "txctl"
) -> str:
    """`txctl --socket SOCKET --no-autostart run ARGS...` (this tree's txctl, or an older
    tree's): the handle it prints."""
    proc = await asyncio.create_subprocess_exec(
        str(txctl), "--socket", str(socket), "--no-autostart", "run", *args,
        stdout=subprocess.PIPE, env=env, cwd=cwd,
    )  # fmt: skip
    out, _ = await proc.communicate()
    if proc.returncode:
        raise RuntimeError(f"{txctl} run {' '.join(args)} exited {proc.returncode}")
    return out.decode().split()[0]


# -- client calls ----------------------------------------------------------------------------


def trivial_app(name: str = "bench", entrypoint: str = "true", args: Sequence[str] = ()) -> AppDef:
    return AppDef(name=name, roles=[Role(name="r", entrypoint=entrypoint, args=list(args))])


async def submit_many(
    client: AsyncClient, app: AppDef, n: int, callers: int
) -> tuple[list[str], float]:
    """n Run calls from `callers` concurrent callers; returns the handles and the wall time."""
    todo = iter(range(n))
    handles: list[str] = []

    async def caller() -> None:
        for _ in todo:  # shared: each index is taken by exactly one caller
            handles.append(await client.run(app))

    t0 = time.perf_counter()
    async with asyncio.timeout(JOB_TIMEOUT):
        await asyncio.gather(*(caller() for _ in range(callers)))
    return handles, time.perf_counter() - t0


async def wait_all(
    client: AsyncClient, handles: list[str], concurrency: int = 50
) -> dict[str, int]:
    """Waits (bounded) until every job is terminal; returns a count per final state."""
    sem = asyncio.Semaphore(concurrency)
    counts: dict[str, int] = {}

    async def one(h: str) -> None:
        async with sem:
            st = await client.wait(h, timeout=JOB_TIMEOUT)
        name = AppState.Name(st.state)
        counts[name] = counts.get(name, 0) + 1

    async with asyncio.timeout(JOB_TIMEOUT):
        await asyncio.gather(*(one(h) for h in handles))
    return counts


async def until_running(client: AsyncClient, handle: str) -> None:
    """Returns once a Watch of the job says RUNNING; raises when it ends first."""
    async for status in client.watch(handle):
        if status.state == AppState.RUNNING:
            return
        if status.state in (AppState.SUCCEEDED, AppState.FAILED, AppState.CANCELLED):
            raise RuntimeError(f"{handle} ended before RUNNING: {status}")
