"""Benchmark of txd against the targets of issue 2, side by side with TorchX where a peer exists.

The command line of scripts/bench (the areas are described in the package's docstring): it
makes the temp dir, runs the areas named by --only in a fixed order, prints the table, and
writes it into --out's file."""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from txd.client import AsyncClient

from benchmarks.areas import (
    aws,
    cli,
    dashboard,
    docker,
    events,
    events_size,
    k8s,
    latency,
    load,
    logs,
    logs_huge_line,
    remote,
    resume,
    rss,
    slurm,
    soak,
    socket,
    submit,
    tcp,
    watchmem,
)
from benchmarks.common import HEADER, log
from benchmarks.context import Context
from benchmarks.daemons import stop
from benchmarks.machine import machine_info
from benchmarks.output import text_table, write_out
from benchmarks.sidebyside import open_tree
from benchmarks.torchx import TORCHX_VENV

ALL = (
    "cli",
    "submit",
    "logs",
    "latency",
    "rss",
    "watchmem",
    "events",
    "eventsize",
    "dashboard",
    "slurm",
    "docker",
    "k8s",
    "aws",
    "load",
    "tcp",
    "socket",
    "remote",
    "resume",
)
ON_REQUEST = ("soak",)  # only with --only: ten minutes


async def amain(ctx: Context) -> None:
    args, res = ctx.args, ctx.res
    only = set(args.only.split(",")) if args.only else set(ALL)
    unknown = only - set(ALL) - set(ON_REQUEST)
    if unknown:
        raise SystemExit(
            f"bench: unknown --only {', '.join(sorted(unknown))} "
            f"(choose from {', '.join(ALL + ON_REQUEST)})"
        )
    if only & {"cli", "submit", "logs", "latency"}:
        await _shared_daemon(ctx, only)
    if "logs" in only:
        log("logs: one 100 MiB line, fresh daemons (and the base's, with --base-tree)")
        with res.section():
            await logs_huge_line.run(ctx)
    shm = Path("/dev/shm")
    if "submit" in only and args.tmpfs and shm.is_dir() and os.access(shm, os.W_OK):
        await _tmpfs_submit(ctx, shm)
    if "watchmem" in only:
        log("watchmem: daemon RSS per open Watch stream, fresh daemons")
        with res.section():
            await watchmem.run(ctx)
    if "events" in only:
        log("events: the events stream, a fresh daemon over a filled job store")
        with res.section():
            await events.run(ctx)
    if "eventsize" in only:
        log("eventsize: the job store's bytes per event of real local_cwd jobs, fresh daemon")
        with res.section():
            await events_size.run(ctx)
    if "dashboard" in only:
        log("dashboard: txctl dashboard in headless Chromium, a fresh daemon over 10,000 jobs")
        with res.section():
            await dashboard.run(ctx)
    if "slurm" in only:
        log("slurm: a real test cluster (scripts/slurm-up)")
        await slurm.run(ctx)
    if "docker" in only:
        log("docker: a real dockerd of our own (scripts/docker-up)")
        await docker.run(ctx)
    if "k8s" in only:
        log("k8s: a real Kubernetes of our own (scripts/docker-up, scripts/k8s-up)")
        await k8s.run(ctx)
    if "aws" in only:
        log("aws: aws_batch on a moto_server of our own")
        await aws.run(ctx)
    if "load" in only:
        log("load: the load test's run, bigger (tests/load/load_testing.py)")
        await load.run(ctx)
    if "tcp" in only:
        log("tcp: the TCP listener (TLS, a token) next to the Unix socket, one daemon")
        await tcp.run(ctx)
    if "remote" in only:
        log("remote: txctl through an ssh tunnel to a login node on loopback, and locally")
        await remote.run(ctx)
    if "soak" in only:
        await soak.run(ctx)
    if "socket" in only:
        log("socket: a removed socket folder recovered, fresh daemon")
        with res.section():
            await socket.run(ctx)
    if "resume" in only:
        log("resume: a watching client across kill -9 and restart, fresh daemon")
        with res.section():
            await resume.run(ctx)
    if "rss" in only:
        with res.section():
            await rss.run(ctx)


async def _shared_daemon(ctx: Context, only: set[str]) -> None:
    """cli, submit, latency and logs, in this order, on one daemon."""
    res = ctx.res
    d = ctx.daemons.start(ctx.daemons.new("main"))
    log(f"daemon pid {d.pid} on {d.socket}")
    client = AsyncClient(d.socket, timeout=60)
    try:
        if "cli" in only:
            with res.section():
                await cli.run(ctx, d)
        if "submit" in only:
            with res.section():
                submit.fs_probe(ctx, d.root)
                if ctx.base_tree is None:
                    await submit.run(ctx, client)
                else:  # on daemons of their own, ours and the base's
                    await submit.side_by_side(ctx)
        if "latency" in only:
            with res.section():
                await latency.run(ctx, client)
        if "logs" in only:
            with res.section():
                await logs.run(ctx, client, d)
    finally:
        await client.close()
        rc = stop(d)
        log(f"daemon stopped (exit {rc})")


async def _tmpfs_submit(ctx: Context, shm: Path) -> None:
    """submit again with the state dir on tmpfs: the daemon's own cost apart from the
    filesystem's."""
    shm_base = Path(tempfile.mkdtemp(prefix="txd-bench-", dir=shm))
    try:
        d = ctx.daemons.start(ctx.daemons.new("tmpfs", under=shm_base))
        log(f"daemon pid {d.pid} with its state dir on tmpfs ({d.state_dir})")
        try:
            with ctx.res.section():
                submit.fs_probe(ctx, d.root)
                async with AsyncClient(d.socket, timeout=60) as client:
                    await submit.run(ctx, client, where=", state dir on tmpfs", target=False)
        finally:
            rc = stop(d)
            log(f"daemon stopped (exit {rc})")
    finally:
        shutil.rmtree(shm_base, ignore_errors=True)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="fewer repetitions and 1,000 jobs for RSS: about a minute",
    )
    p.add_argument("--out", type=Path, help="write machine + table into this markdown file")
    p.add_argument(
        "--only",
        help=f"comma-separated subset of: {', '.join(ALL)}; or {', '.join(ON_REQUEST)}, which "
        "runs only when named",
    )
    p.add_argument("--keep", action="store_true", help="keep the temporary state dir")
    p.add_argument(
        "--tmp", help="where the temporary socket and state dir go (default: the system temp dir)"
    )
    p.add_argument(
        "--no-tmpfs",
        dest="tmpfs",
        action="store_false",
        help="skip the submissions/s comparison with a state dir on /dev/shm",
    )
    p.add_argument(
        "--torchx-venv",
        default=str(TORCHX_VENV),
        help="TorchX 0.7's venv, made by scripts/torchx-venv when missing (default %(default)s, "
        "shared with the compatibility suite)",
    )
    p.add_argument(
        "--base-tree",
        type=Path,
        help="a worktree of an older commit with its own .venv (scripts/setup dev there): the "
        "areas that compare side by side (submit, rss, load, docker, logs, watchmem) run its "
        "daemon (and txctl) in turn with this tree's and print its figures beside ours",
    )
    p.add_argument("--runs", type=int, default=15, help="txctl/torchx run repetitions")
    p.add_argument("--status-runs", type=int, default=30)
    p.add_argument("--submit-runs", type=int, default=500)
    p.add_argument("--log-lines", type=int, default=2_000_000)
    p.add_argument("--latency-runs", type=int, default=20)
    p.add_argument("--rss-jobs", type=int, default=10_000)
    p.add_argument(
        "--base-runs",
        type=int,
        default=2,
        help="with --base-tree: turns of each side in rss and load, rounds in submit (at least 3 "
        "there) (default %(default)s)",
    )
    p.add_argument("--soak-minutes", type=float, default=10.0)
    p.add_argument("--soak-rate", type=float, default=5.0, help="soak jobs per second")
    return p


def main() -> int:
    args = parser().parse_args()
    if args.base_tree:
        open_tree(str(args.base_tree))  # a wrong --base-tree stops here, before anything runs

    # SIGTERM/SIGHUP to the bench: unwind through the finally blocks (daemons stopped).
    def _interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)

    base = Path(tempfile.mkdtemp(prefix="txd-bench-", dir=args.tmp))
    ctx = Context(args, base)
    machine = machine_info(base)
    print("machine:")
    for k, v in machine:
        print(f"  {k:24} {v}")
    sys.stdout.flush()
    t0 = time.perf_counter()
    failed = False
    try:
        asyncio.run(amain(ctx))
    except KeyboardInterrupt:
        log("interrupted")
        failed = True
    except Exception as e:
        log(f"failed: {type(e).__name__}: {e}")
        for name, tail in ctx.daemons.log_tails():
            log(f"daemon log ({name}):\n{tail}")
        failed = True
    finally:
        ctx.daemons.close(args.keep)
        if args.keep:
            log(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    sys.stderr.flush()
    print()
    print(text_table(HEADER, ctx.res.table()))
    missed = [r.name for r in ctx.res.rows if r.target and r.met is False]
    print(f"\n{len(missed)} target(s) missed; ran {time.perf_counter() - t0:.0f} s", flush=True)
    if args.out and not failed:
        write_out(args.out, machine, ctx.res, sys.argv[1:])
    return 1 if failed else 0
