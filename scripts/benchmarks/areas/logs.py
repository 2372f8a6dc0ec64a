"""logs: a finished job's log (2,000,000 lines of 100 bytes) read through AsyncClient.logs,
against `cat` and a plain Python read of the same file."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path

from load_testing import cpu_seconds
from txd.client import AsyncClient
from txd.v1 import AppDef, AppState, Role
from txd_testing import Daemon

from benchmarks.common import JOB_TIMEOUT, fmt_s, log, median
from benchmarks.context import Context


async def run(ctx: Context, client: AsyncClient, daemon: Daemon) -> None:
    res = ctx.res
    lines = ctx.args.log_lines
    reps = 2 if ctx.quick else 3
    line = b"x" * 99  # + "\n" = 100 bytes
    script = f"yes {line.decode()} | head -n {lines}"
    app = AppDef(name="logbench", roles=[Role(name="w", entrypoint="sh", args=["-c", script])])
    log(f"job writing {lines:,} lines of 100 bytes")
    t0 = time.perf_counter()
    h = await client.run(app)
    st = await client.wait(h, timeout=JOB_TIMEOUT)
    t_write = time.perf_counter() - t0
    if st.state != AppState.SUCCEEDED:
        raise RuntimeError(f"log job ended {AppState.Name(st.state)}: {st.msg}")
    app_id = h.rsplit("/", 1)[1]
    # The replica's log (stdout and stderr in order) is <app dir>/<role>.<k>.log.
    app_dir = daemon.state_dir / "schedulers" / "local_cwd" / "logs" / "txd" / app_id
    if st.ui_url.startswith("file://"):
        app_dir = Path(st.ui_url[len("file://") :])
    path = app_dir / "w.0.log"
    size = path.stat().st_size
    expect = lines * 100
    if size != expect:
        raise RuntimeError(f"{path} has {size} bytes, expected {expect}")
    mb = size / 1e6
    res.add(
        "log capture: job output piped into the daemon's files",
        f"{mb / t_write:.0f} MB/s",
        note=f"{mb:.0f} MB, run -> SUCCEEDED in {fmt_s(t_write)} (incl. `yes | head`)",
    )

    def cpu_pair() -> tuple[float, float]:
        t = os.times()
        return t.user + t.system, cpu_seconds(daemon.pid)

    cpu_split: list[tuple[float, float]] = []

    async def read_all() -> tuple[float, int, int, int]:
        nbytes = nlines = chunks = 0
        c0, d0 = cpu_pair()
        t0 = time.perf_counter()
        async with asyncio.timeout(JOB_TIMEOUT):
            async for chunk in client.logs(h):
                nbytes += len(chunk.data)
                nlines += chunk.data.count(b"\n")
                chunks += 1
        elapsed = time.perf_counter() - t0
        c1, d1 = cpu_pair()
        cpu_split.append((c1 - c0, d1 - d0))
        return elapsed, nbytes, nlines, chunks

    def cat() -> float:
        t0 = time.perf_counter()
        with open(os.devnull, "wb") as null:
            subprocess.run(["cat", str(path)], stdout=null, check=True, timeout=JOB_TIMEOUT)
        return time.perf_counter() - t0

    def py_read() -> float:
        t0 = time.perf_counter()
        fd = os.open(path, os.O_RDONLY)
        try:
            n = 0
            while block := os.read(fd, 64 * 1024):
                n += block.count(b"\n")
        finally:
            os.close(fd)
        return time.perf_counter() - t0

    cat()  # page cache warm for everyone
    t_client, t_cat, t_py = [], [], []
    chunks = 0
    for _ in range(reps):
        elapsed, nbytes, nlines, chunks = await read_all()
        if nbytes != size or nlines != lines:
            raise RuntimeError(
                f"logs returned {nbytes} bytes / {nlines} lines, expected {size} / {lines}"
            )
        t_client.append(elapsed)
        t_cat.append(cat())
        t_py.append(py_read())
    tc, tk, tp = median(t_client), median(t_cat), median(t_py)
    res.add(
        "log streaming to a Python client (AsyncClient.logs), MB/s",
        f"{mb / tc:.0f} MB/s",
        ">= 200 MB/s",
        mb / tc >= 200,
        note=f"{mb:.0f} MB in {fmt_s(tc)} (median of {reps}), {chunks} chunks; "
        f"CPU: client {median([c for c, _ in cpu_split]):.2f} s, "
        f"daemon {median([d for _, d in cpu_split]):.2f} s",
    )
    res.add(
        "log streaming to a Python client, lines/s",
        f"{lines / tc / 1e6:.2f} M lines/s",
        ">= 2 M lines/s",
        lines / tc >= 2e6,
        note="100-byte lines",
    )
    res.add(
        "`cat <role>.<k>.log > /dev/null` (same file)",
        f"{mb / tk:.0f} MB/s",
        note=f"{lines / tk / 1e6:.1f} M lines/s; client is {tc / tk:.1f}x slower",
    )
    res.add(
        "Python os.read 64 KiB + count lines (same file, no gRPC)",
        f"{mb / tp:.0f} MB/s",
        note=f"{lines / tp / 1e6:.1f} M lines/s",
    )
    await client.delete(h)  # 400 MB of logs: not needed any more
