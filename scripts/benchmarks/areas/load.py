"""load: the load test's run (load_testing, as tests/load/test_load.py runs it), bigger:
5,000 jobs and 16 MiB logs for the slow readers (--quick: the test's own shape). With --base-tree,
a daemon of ours and one of the base tree in turn, --base-runs times each.

The goal (issue 18): Status answers within 50 ms at p99 under this storm, with submissions per
second not lower than before.

Where a Status call's time goes is measured three ways beside the callers' own figure: two
probes, each one Status caller in a process of its own (load_probe.py), one at the callers'
priority (nice 0) and one above it (nice -10), with beside each a process that only sleeps 10 ms
at a time (load_sleeper.py): how late the machine wakes a process that waits on nothing else,
the floor under any answer's time (one Status wakes the caller and the door at least); and
inside the daemon (observe/: the time from gRPC taking a Status call to its handler starting,
the handler's time, the cyclic GC's pauses, and the event loop's lateness split into the loop
thread running, waiting for a core and blocked; each of the daemon's threads' CPU time and
wait for a core).

TXD_BENCH_LOAD_DAEMON_NICE=N (a diagnosis; root): both daemons' threads at nice N once warmed
up, to see what is left of the tail when the daemon need not wait for a core."""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import load_testing as lt

from benchmarks.common import fmt_ms, log, median, pct
from benchmarks.context import Context
from benchmarks.daemons import stop
from benchmarks.sidebyside import Tree, beside

STATUS_P99_GOAL = 50.0  # ms
PROBES = (0, -10)  # the probes' nice values
GENERATOR_NICE = 10
OBSERVE = Path(__file__).resolve().parents[1] / "observe"  # the daemons' sitecustomize
LAG_EVERY = 0.010  # s, the observe hook's lateness sampling period


def observed_env(root: Path) -> dict[str, str]:
    return {"PYTHONPATH": str(OBSERVE), "TXD_BENCH_OBSERVE": str(root / "observe.json")}


async def run(ctx: Context) -> None:
    res = ctx.res
    shape = lt.Shape(probes=PROBES, sleepers=PROBES)
    if not ctx.quick:
        shape = lt.Shape(
            jobs=5000, slow_bytes=16 * lt.MiB, bound=900, probes=PROBES, sleepers=PROBES
        )
    if os.environ.get("TXD_BENCH_LOAD_DAEMON_NICE"):
        nice = int(os.environ["TXD_BENCH_LOAD_DAEMON_NICE"])
        shape = dataclasses.replace(shape, daemon_nice=nice)
        log(f"load: the daemons' threads at nice {nice} once warmed up (a diagnosis)")
    # Each turn twice: the generator at the daemon's priority (the goal's figure), then below it
    # (nice 10): how much of what is left is the daemon waiting for one of the two cores.
    modes = (0, GENERATOR_NICE)
    reports: dict[tuple[Tree | None, int], list[lt.Report]] = {
        (tree, m): [] for tree in ctx.sides() for m in modes
    }
    inside: dict[tuple[Tree | None, int], list[dict[str, Any]]] = {key: [] for key in reports}
    with res.section():
        for i in range(ctx.side_runs):
            for mode in modes:
                for k, tree in enumerate(ctx.sides()):
                    key = (tree, mode)
                    name = f"load-{i}-{mode}-{k}"
                    env = observed_env(ctx.base / name)
                    d = ctx.daemons.start(ctx.daemons.new(name, env=env, tree=tree))
                    who = "ours" if tree is None else f"base {tree.commit}"
                    log(
                        f"load: {shape.jobs:,} jobs, {shape.callers} callers, {shape.followed} "
                        f"followed logs ({shape.slow} slow), the generator at nice {mode}, on "
                        f"daemon pid {d.pid} ({who})"
                    )
                    try:
                        work = ctx.base / f"load-work-{name}"
                        mode_shape = dataclasses.replace(shape, generator_nice=mode)
                        rep = await lt.run_load(d.socket, d.pid, work, mode_shape)
                        log(f"  {rep.summary()}")
                        reports[key].append(rep)
                    finally:
                        rc = stop(d)
                        log(f"daemon stopped (exit {rc})")
                    with contextlib.suppress(OSError, ValueError):
                        inside[key].append(json.loads((d.root / "observe.json").read_text()))
                        log(f"  inside: {_inside_summary(inside[key][-1])}")
        base = ctx.base_tree
        _rows(ctx, reports[None, 0], reports.get((base, 0)), shape)
        _probe_rows(ctx, reports[None, 0], reports.get((base, 0)))
        _inside_rows(ctx, inside[None, 0], inside.get((base, 0)))
        niced = f" (the generator at nice {GENERATOR_NICE})"
        _status_rows(ctx, reports[None, GENERATOR_NICE], reports.get((base, GENERATOR_NICE)), niced)
        _probe_rows(ctx, reports[None, GENERATOR_NICE], reports.get((base, GENERATOR_NICE)), niced)


def _status_rows(
    ctx: Context, ours: list[lt.Report], base: list[lt.Report] | None, suffix: str
) -> None:
    def ms(r: lt.Report, p: float) -> float:
        return pct([1000 * x for x in r.status_latencies] or [0.0], p)

    for p in (50, 99):
        beside(
            ctx.res,
            f"load: Status latency from the other callers (p{p}){suffix}",
            [ms(r, p) for r in ours],
            [ms(r, p) for r in base] if base else None,
            fmt_ms,
            tree=ctx.base_tree,
        )
    beside(
        ctx.res,
        f"load: Run calls per second{suffix}",
        [(r.shape.jobs - r.shape.followed) / r.submit_seconds for r in ours],
        [(r.shape.jobs - r.shape.followed) / r.submit_seconds for r in base] if base else None,
        lambda x: f"{x:.0f}/s",
        tree=ctx.base_tree,
    )


def _inside_summary(o: dict[str, Any]) -> str:
    st = [q + h for q, h in o["status"]] or [0.0]
    gc2 = [ms for g, ms, _ in o["gc"] if g == 2] or [0.0]
    lags = [lag for lag, *_ in o["lag"]] or [0.0]
    return (
        f"Status in the daemon p50 {pct(st, 50):.2f} ms p99 {pct(st, 99):.2f} ms max "
        f"{max(st):.1f} ms (n={len(o['status'])}); GC pauses {len(o['gc'])}, gen2 "
        f"{len([1 for g, _, _ in o['gc'] if g == 2])} (max {max(gc2):.1f} ms, all "
        f"{sum(ms for _, ms, _ in o['gc']):.0f} ms; objects tracked after each full one: "
        f"{', '.join(f'{n:,}' for n in o.get('heap', []))}); "
        f"loop lateness p50 {pct(lags, 50):.2f} p99 "
        f"{pct(lags, 99):.1f} p99.9 {pct(lags, 99.9):.1f} max {max(lags):.1f} ms; late > 20 ms: "
        f"{_late(o)}; {_queued(o)}; {_threads(o)}"
    )


def _threads(o: dict[str, Any]) -> str:
    """The daemon's threads by name (the main thread, which runs the event loop, first; then
    the busiest): how many, their CPU time, their wait on a run queue for a core, and that
    wait per time put on a core (many short waits: woken often onto a busy machine)."""
    if not o.get("threads"):
        return "no thread figures"
    main, *rest = o["threads"]  # observe/ puts the main thread first
    by: dict[str, list[float]] = {}
    for name, cpu, runq, slices in rest:
        n = by.setdefault(name, [0, 0.0, 0.0, 0])
        n[0], n[1], n[2], n[3] = n[0] + 1, n[1] + cpu, n[2] + runq, n[3] + slices
    top = sorted(by.items(), key=lambda kv: -kv[1][1])[:4]
    items = [("main", (1, *main[1:])), *top]
    return "threads (CPU s / waiting for a core s / wait per time on a core ms): " + ", ".join(
        f"{name} x{int(n)} {cpu / 1000:.1f}/{runq / 1000:.1f}/{runq / max(1, slices):.2f}"
        for name, (n, cpu, runq, slices) in items
    )


def _queued(o: dict[str, Any]) -> str:
    """The probes' calls that waited over 50 ms for gRPC to take them: how many calls gRPC
    took meanwhile (those ahead of it), at what rate, and whether a GC pause of over 10 ms
    ended meanwhile."""
    slow = [(q, at) for _, q, _, at in o["probe"] if q > 50]
    if not slow:
        return "no probe call waited over 50 ms to be taken"
    taken = sorted(o["taken"])
    ahead, gcs = [], 0
    for q, at in slow:
        lo, hi = bisect.bisect_left(taken, at), bisect.bisect_left(taken, at + q / 1000)
        ahead.append(hi - lo)
        gcs += any(at <= t <= at + q / 1000 and ms > 10 for _, ms, t in o["gc"])
    rate = sum(ahead) / (sum(q for q, _ in slow) / 1000)
    longest = max(q for q, _ in slow)
    return (
        f"{len(slow)} probe calls waited over 50 ms to be taken (up to {longest:.0f} ms): "
        f"gRPC took {median(ahead):.0f} calls (median; up to {max(ahead)}) meanwhile, "
        f"{rate:.0f}/s; {gcs} of them saw a GC pause over 10 ms"
    )


def _late(o: dict[str, Any]) -> str:
    """The samples late by over 20 ms, split by whether the main thread ran for at least half
    of the interval (its own work) or not (waiting for a core, or another thread's GIL); and
    the time of the samples late by over 5 ms split into the loop thread running, waiting on
    a run queue for a core, and neither (blocked: another thread's GIL, a page fault)."""
    lags = [(s[0], s[1], s[2] if len(s) > 2 else 0.0) for s in o["lag"]]
    late = [(lag, cpu) for lag, cpu, _ in lags if lag > 20]
    busy = sum(cpu >= 0.5 * (lag + 10) for lag, cpu in late)
    stalls = [(lag + 1000 * LAG_EVERY, cpu, runq) for lag, cpu, runq in lags if lag > 5]
    span = sum(t for t, _, _ in stalls) or 1.0
    cpu = sum(c for _, c, _ in stalls)
    runq = sum(r for _, _, r in stalls)
    return (
        f"{len(late)} ({busy} with the loop busy, {len(late) - busy} waiting); the samples "
        f"late by over 5 ms: {span / 1000:.1f} s, the loop thread on a core "
        f"{100 * cpu / span:.0f}%, waiting for one {100 * runq / span:.0f}%, blocked "
        f"{100 * max(0.0, span - cpu - runq) / span:.0f}%"
    )


def _probe_rows(
    ctx: Context, ours: list[lt.Report], base: list[lt.Report] | None, suffix: str = ""
) -> None:
    def ms(by_nice: dict[int, list[float]], nice: int, p: float) -> float:
        return pct([1000 * x for x in by_nice.get(nice) or [0.0]], p)

    for nice in PROBES:
        for p in (50, 99):
            n = len(ours[-1].probe_latencies.get(nice, []))
            beside(
                ctx.res,
                f"load: Status latency from a probe process of its own at nice {nice} (p{p})"
                + suffix,
                [ms(r.probe_latencies, nice, p) for r in ours],
                [ms(r.probe_latencies, nice, p) for r in base] if base else None,
                fmt_ms,
                tree=ctx.base_tree,
                note=f"n={n:,} in the last; one caller, a random pause of 0..0.1 s",
            )
        beside(
            ctx.res,
            f"load: a sleeper's wake-up lateness at nice {nice} (p99){suffix}",
            [ms(r.sleeper_lateness, nice, 99) for r in ours],
            [ms(r.sleeper_lateness, nice, 99) for r in base] if base else None,
            fmt_ms,
            tree=ctx.base_tree,
            note=f"a process sleeping {1000 * lt.SLEEP_PERIOD:.0f} ms at a time, waiting on "
            "nothing else: the machine's floor under any reply's time",
        )


def _intake(nice: int) -> Any:
    return lambda o: pct([q for n, q, *_ in o["probe"] if n == nice] or [0.0], 99)


def _inside_rows(
    ctx: Context, ours: list[dict[str, Any]], base: list[dict[str, Any]] | None
) -> None:
    if not ours:
        return
    figures = {
        "Status in the daemon, gRPC taking the call to the handler's end (p99)": lambda o: pct(
            [q + h for q, h in o["status"]] or [0.0], 99
        ),
        **{
            f"the nice {nice} probe's Status, sent to gRPC taking it (p99)": _intake(nice)
            for nice in PROBES
        },
        "Status handler's own time (p99)": lambda o: pct([h for _, h in o["status"]] or [0.0], 99),
        "event loop lateness (p99)": lambda o: pct([lag for lag, *_ in o["lag"]] or [0.0], 99),
        "event loop lateness (p99.9)": lambda o: pct([lag for lag, *_ in o["lag"]] or [0.0], 99.9),
        "cyclic GC pauses, longest": lambda o: max([ms for _, ms, _ in o["gc"]] or [0.0]),
        "cyclic GC pauses, all": lambda o: sum(ms for _, ms, _ in o["gc"]),
    }
    for name, f in figures.items():
        note = ""
        if name.startswith("event loop lateness (p99)"):
            note = _inside_summary(ours[-1])
        elif name.startswith(("Status", "the nice")) and not any(o["status"] for o in ours):
            # Ours answered Status at its read door: none reached the socket's server.
            note = "ours: Status answered by the read door's process, which is not observed"
        beside(
            ctx.res,
            f"load: {name}",
            [f(o) for o in ours],
            [f(o) for o in base] if base else None,
            fmt_ms,
            tree=ctx.base_tree,
            note=note,
        )


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
