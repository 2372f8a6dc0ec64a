"""load: the load test's run (load_testing, as tests/load/test_load.py runs it), bigger:
5,000 jobs and 16 MiB logs for the slow readers (--quick: the test's own shape)."""

from __future__ import annotations

import load_testing as lt

from benchmarks.common import fmt_ms, log, pct
from benchmarks.context import Context
from benchmarks.daemons import stop


async def run(ctx: Context) -> None:
    res = ctx.res
    shape = lt.Shape() if ctx.quick else lt.Shape(jobs=5000, slow_bytes=16 * lt.MiB, bound=900)
    d = ctx.daemons.start(ctx.daemons.new("load"))
    log(
        f"load: {shape.jobs:,} jobs, {shape.callers} callers, {shape.followed} followed logs "
        f"({shape.slow} slow) on daemon pid {d.pid}"
    )
    try:
        with res.section():
            rep = await lt.run_load(d.socket, d.pid, ctx.base / "load-work", shape)
            _rows(ctx, rep, shape)
    finally:
        rc = stop(d)
        log(f"daemon stopped (exit {rc})")


def _rows(ctx: Context, rep: lt.Report, shape: lt.Shape) -> None:
    res = ctx.res
    what = (
        f"{shape.jobs:,} jobs, {shape.callers} callers, {shape.followed} followed logs "
        f"({shape.slow} slow)"
    )
    bad = rep.error_count + len(rep.mismatches) + (rep.checked != shape.jobs)
    res.add(
        f"load: errors and log checksum mismatches, {what}",
        f"{rep.error_count} / {len(rep.mismatches)}",
        "0 / 0",
        bad == 0,
        note=f"{rep.checked:,} of {shape.jobs:,} logs checked by sha256 "
        f"({rep.log_bytes / lt.MiB:,.0f} MiB); final states {rep.final_states}"
        + (f"; first errors: {rep.errors[:3]}" if rep.errors else ""),
    )
    lat = [1000 * x for x in rep.status_latencies]  # ms
    if lat:
        res.add(
            "load: Status latency from the other callers (p50)",
            fmt_ms(pct(lat, 50)),
            note=f"n={len(lat):,}, max {fmt_ms(max(lat))}; calls {rep.calls}; each caller on "
            f"its own connection, a random pause of 0..{2 * shape.caller_pause:g} s between calls",
        )
        res.add("load: Status latency from the other callers (p99)", fmt_ms(pct(lat, 99)))
    res.add(
        "load: daemon peak RSS (VmHWM)",
        f"{rep.hwm_kib / 1024:.1f} MiB",
        note=f"{rep.rss_start_kib / 1024:.1f} MiB once the callers were connected; the slow "
        f"readers' logs: {shape.slow} x {shape.slow_bytes / lt.MiB:.0f} MiB, read a chunk per "
        f"{shape.slow_pause * 1000:.0f} ms",
    )
    res.add("load: daemon open fds (peak)", f"{rep.peak_fds:,}", note="sampled every 0.25 s")
    res.add(
        "load: jobs through (run, ended, whole log read back and checked) per second",
        f"{shape.jobs / rep.wall:.0f}/s",
        note=f"{shape.jobs:,} in {rep.wall:.1f} s; Run calls in waves of {shape.wave}: "
        f"{(shape.jobs - shape.followed) / rep.submit_seconds:.0f}/s; daemon CPU "
        f"{rep.daemon_cpu:.1f} s ({100 * rep.daemon_cpu / rep.wall:.0f}% of one core)",
    )
