"""load: the load test's run (load_testing, as tests/load/test_load.py runs it), bigger:
5,000 jobs and 16 MiB logs for the slow readers (--quick: the test's own shape). With --base-tree,
a daemon of ours and one of the base tree in turn, --base-runs times each.

The goal (issue 18): Status answers within 50 ms at p99 under this storm, with submissions per
second not lower than before."""

from __future__ import annotations

import load_testing as lt

from benchmarks.common import fmt_ms, log, median, pct
from benchmarks.context import Context
from benchmarks.daemons import stop
from benchmarks.sidebyside import Tree, beside

STATUS_P99_GOAL = 50.0  # ms


async def run(ctx: Context) -> None:
    res = ctx.res
    shape = lt.Shape() if ctx.quick else lt.Shape(jobs=5000, slow_bytes=16 * lt.MiB, bound=900)
    reports: dict[Tree | None, list[lt.Report]] = {tree: [] for tree in ctx.sides()}
    with res.section():
        for i in range(ctx.side_runs):
            for k, tree in enumerate(ctx.sides()):
                d = ctx.daemons.start(ctx.daemons.new(f"load-{i}-{k}", tree=tree))
                who = "ours" if tree is None else f"base {tree.commit}"
                log(
                    f"load: {shape.jobs:,} jobs, {shape.callers} callers, {shape.followed} "
                    f"followed logs ({shape.slow} slow) on daemon pid {d.pid} ({who})"
                )
                try:
                    rep = await lt.run_load(d.socket, d.pid, ctx.base / f"load-work-{i}-{k}", shape)
                    log(f"  {rep.summary()}")
                    reports[tree].append(rep)
                finally:
                    rc = stop(d)
                    log(f"daemon stopped (exit {rc})")
        _rows(ctx, reports[None], reports.get(ctx.base_tree), shape)


def _rows(
    ctx: Context, ours: list[lt.Report], base: list[lt.Report] | None, shape: lt.Shape
) -> None:
    res, tree = ctx.res, ctx.base_tree
    what = (
        f"{shape.jobs:,} jobs, {shape.callers} callers, {shape.followed} followed logs "
        f"({shape.slow} slow)"
    )
    rep = ours[-1]
    errors = sum(r.error_count for r in ours)
    mismatches = sum(len(r.mismatches) for r in ours)
    unchecked = sum(r.checked != shape.jobs for r in ours)
    res.add(
        f"load: errors and log checksum mismatches, {what}",
        f"{errors} / {mismatches}",
        "0 / 0",
        errors + mismatches + unchecked == 0,
        note=f"{len(ours)} run(s); {rep.checked:,} of {shape.jobs:,} logs checked by sha256 "
        f"({rep.log_bytes / lt.MiB:,.0f} MiB) in the last; final states {rep.final_states}"
        + (f"; first errors: {rep.errors[:3]}" if rep.errors else "")
        + (
            f"; base: {sum(r.error_count for r in base)} / {sum(len(r.mismatches) for r in base)}"
            if base
            else ""
        ),
    )

    def ms(r: lt.Report, p: float) -> float:
        return pct([1000 * x for x in r.status_latencies], p) if r.status_latencies else 0.0

    if rep.status_latencies:
        beside(
            res,
            "load: Status latency from the other callers (p50)",
            [ms(r, 50) for r in ours],
            [ms(r, 50) for r in base] if base else None,
            fmt_ms,
            tree=tree,
            note=f"n={len(rep.status_latencies):,}, max "
            f"{fmt_ms(1000 * max(rep.status_latencies))} in the last; calls {rep.calls}; each "
            f"caller on its own connection, a random pause of 0..{2 * shape.caller_pause:g} s "
            f"between calls",
        )
        p99 = median([ms(r, 99) for r in ours])
        beside(
            res,
            "load: Status latency from the other callers (p99)",
            [ms(r, 99) for r in ours],
            [ms(r, 99) for r in base] if base else None,
            fmt_ms,
            tree=tree,
            target=f"<= {STATUS_P99_GOAL:.0f} ms",
            met=p99 <= STATUS_P99_GOAL,
        )
    beside(
        res,
        "load: Run calls per second (the waves' submissions)",
        [(shape.jobs - shape.followed) / r.submit_seconds for r in ours],
        [(shape.jobs - shape.followed) / r.submit_seconds for r in base] if base else None,
        lambda x: f"{x:.0f}/s",
        tree=tree,
        note=f"Run calls in waves of {shape.wave} from {shape.submitters} callers",
    )
    beside(
        res,
        "load: jobs through (run, ended, whole log read back and checked) per second",
        [shape.jobs / r.wall for r in ours],
        [shape.jobs / r.wall for r in base] if base else None,
        lambda x: f"{x:.0f}/s",
        tree=tree,
        note=f"{shape.jobs:,} in {rep.wall:.1f} s in the last; daemon CPU {rep.daemon_cpu:.1f} s "
        f"({100 * rep.daemon_cpu / rep.wall:.0f}% of one core)",
    )
    beside(
        res,
        "load: daemon peak RSS (VmHWM)",
        [r.hwm_kib / 1024 for r in ours],
        [r.hwm_kib / 1024 for r in base] if base else None,
        lambda x: f"{x:.1f} MiB",
        tree=tree,
        note=f"{rep.rss_start_kib / 1024:.1f} MiB once the callers were connected; the slow "
        f"readers' logs: {shape.slow} x {shape.slow_bytes / lt.MiB:.0f} MiB, read a chunk per "
        f"{shape.slow_pause * 1000:.0f} ms",
    )
    beside(
        res,
        "load: daemon open fds (peak)",
        [float(r.peak_fds) for r in ours],
        [float(r.peak_fds) for r in base] if base else None,
        lambda x: f"{x:,.0f}",
        tree=tree,
        note="sampled every 0.25 s",
    )
