"""soak (only when named): --soak-minutes of a steady mix at --soak-rate jobs per second (7 in
10 print a payload that is followed to the end and checked, 2 sleep and are cancelled once
running, 1 fails), each deleted once checked, beside SOAK_CALLERS Status/List/Watch callers
(load_testing's). The daemon's RSS and open fds are sampled every SOAK_SAMPLE s; their
least-squares slope over the second half is flagged above SOAK_RSS_SLOPE / SOAK_FD_SLOPE."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Sequence

import load_testing as lt
from txd.client import AsyncClient
from txd.v1 import AppDef, AppState, Role

from benchmarks.common import JOB_TIMEOUT, Results, fmt_ms, log, pct, trivial_app
from benchmarks.context import Context
from benchmarks.daemons import stop

SOAK_SAMPLE = 10.0  # seconds between the soak's RSS and fd samples
SOAK_INFLIGHT = 100  # the soak's jobs in flight at most
SOAK_CALLERS = 20  # Status/List/Watch callers beside the soak's jobs
SOAK_RSS_SLOPE = 0.25  # MiB/min over the second half: a leak of 1 KiB per job shows at 5 jobs/s
SOAK_FD_SLOPE = 1.0  # fds/min over the second half: one leaked fd per job is 300/min at 5/s


def _latencies(seconds: list[float]) -> str:
    ms = [1000 * x for x in seconds]
    if not ms:
        return "no Status call"
    return f"Status p50 {fmt_ms(pct(ms, 50))}, p99 {fmt_ms(pct(ms, 99))} (n={len(ms):,})"


def _slope(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of y over x."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else 0.0


async def run(ctx: Context) -> None:
    res, args = ctx.res, ctx.args
    duration = 60.0 * args.soak_minutes
    work = ctx.base / "soak-work"
    small, _ = lt.write_payloads(work / "payloads", lt.Shape(slow_bytes=64 * 1024))
    d = ctx.daemons.start(ctx.daemons.new("soak"))
    log(f"soak: {args.soak_minutes:g} min at {args.soak_rate:g} jobs/s on daemon pid {d.pid}")
    counts = {"followed": 0, "cancelled": 0, "failed": 0}
    errors: list[str] = []
    samples: list[tuple[float, int, int]] = []  # (seconds, VmRSS KiB, fds)
    done = asyncio.Event()

    async def one(c: AsyncClient, i: int) -> None:
        kind = i % 10
        try:
            if kind < 7:
                path = work / "payloads" / f"p{i % len(small)}"
                h = await c.run(lt.job_app(i, path))
                size, digest = 0, hashlib.sha256()
                async for chunk in c.logs(h, follow=True):
                    size += len(chunk.data)
                    digest.update(chunk.data)
                if (size, digest.hexdigest()) != lt.expected(i, small[i % len(small)]):
                    errors.append(f"{h}: log mismatch ({size} bytes)")
                want, key = AppState.SUCCEEDED, "followed"
            elif kind < 9:
                script = 'printf "job %s\\n" "$1"; exec sleep 60'
                role = Role(name="w", entrypoint="sh", args=["-c", script, "sh", str(i)])
                h = await c.run(AppDef(name="soak", roles=[role]))
                async for _ in c.logs(h, follow=True):
                    break  # it runs
                await c.cancel(h)
                want, key = AppState.CANCELLED, "cancelled"
            else:
                h = await c.run(trivial_app("soak", "sh", ["-c", "exit 3"]))
                want, key = AppState.FAILED, "failed"
            st = await c.wait(h, timeout=120)
            if st.state != want:
                errors.append(f"{h}: {AppState.Name(st.state)}, expected {AppState.Name(want)}")
            counts[key] += 1
            await c.delete(h)
        except Exception as e:  # counted, and the soak goes on
            errors.append(f"job {i}: {type(e).__name__}: {e}")

    async def sample(t0: float) -> None:
        while not done.is_set():
            with contextlib.suppress(OSError, LookupError):
                rss = lt.vm_kib(d.pid, "VmRSS")
                samples.append((time.perf_counter() - t0, rss, lt.open_fds(d.pid)))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), SOAK_SAMPLE)

    loop = asyncio.get_running_loop()
    try:
        with res.section():
            procs = await lt.start_callers(
                d.socket, SOAK_CALLERS, 1, 0.5, 30.0, duration + JOB_TIMEOUT, gone_ok=True
            )
            async with AsyncClient(d.socket, timeout=60, own_connection=True) as c:
                gate = asyncio.Semaphore(SOAK_INFLIGHT)
                tasks: set[asyncio.Task[None]] = set()

                def finished(task: asyncio.Task[None]) -> None:
                    tasks.discard(task)
                    gate.release()

                t0 = time.perf_counter()
                sampler = loop.create_task(sample(t0))
                i = 0
                while time.perf_counter() - t0 < duration:
                    await gate.acquire()
                    i += 1
                    task = loop.create_task(one(c, i))
                    tasks.add(task)
                    task.add_done_callback(finished)
                    await asyncio.sleep(1 / args.soak_rate)  # the steady pace
                async with asyncio.timeout(JOB_TIMEOUT):
                    await asyncio.gather(*tasks)
                wall = time.perf_counter() - t0
                done.set()
                await sampler
            calls, lat, n_errors, caller_errors = await lt.stop_callers(procs, 60.0)
            errors += caller_errors
            _rows(res, samples, wall, i, counts, len(errors) + n_errors, errors, calls, lat)
    finally:
        done.set()
        rc = stop(d)
        log(f"daemon stopped (exit {rc})")


def _rows(
    res: Results,
    samples: list[tuple[float, int, int]],
    wall: float,
    jobs: int,
    counts: dict[str, int],
    n_errors: int,
    errors: list[str],
    calls: dict[str, int],
    lat: list[float],
) -> None:
    half = [s for s in samples if s[0] >= wall / 2]
    if len(half) < 3:
        res.add("soak: daemon RSS slope, second half", "not measured", note="too few samples")
        return
    rss = _slope([(t / 60, kib / 1024) for t, kib, _ in half])
    fds = _slope([(t / 60, float(n)) for t, _, n in half])
    mibs = [kib / 1024 for _, kib, _ in samples]
    nfds = [n for _, _, n in samples]
    what = (
        f"{wall / 60:.1f} min, {jobs:,} jobs ({counts['followed']:,} followed and checked, "
        f"{counts['cancelled']:,} cancelled, {counts['failed']:,} failed; each deleted after), "
        f"{SOAK_CALLERS} callers; {len(samples)} samples, {len(half)} in the second half"
    )
    res.add(
        "soak: daemon RSS slope over the second half",
        f"{rss:+.3f} MiB/min",
        f"<= {SOAK_RSS_SLOPE} MiB/min",
        rss <= SOAK_RSS_SLOPE,
        note=f"{what}; RSS first {mibs[0]:.1f}, at half time {half[0][1] / 1024:.1f}, last "
        f"{mibs[-1]:.1f}, max {max(mibs):.1f} MiB",
    )
    res.add(
        "soak: daemon open fds slope over the second half",
        f"{fds:+.2f} fds/min",
        f"<= {SOAK_FD_SLOPE:g} fds/min",
        fds <= SOAK_FD_SLOPE,
        note=f"fds first {nfds[0]}, last {nfds[-1]}, min {min(nfds)}, max {max(nfds)}",
    )
    res.add(
        "soak: errors (calls failed, logs mismatched, wrong final states)",
        f"{n_errors}",
        "0",
        n_errors == 0,
        note=(f"first: {errors[:3]}; " if errors else "") + _latencies(lat) + f"; calls {calls}",
    )
