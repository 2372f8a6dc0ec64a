"""cli: `txctl run --wait utils.echo` against `torchx run -s local_cwd utils.echo`, alternated,
and `txctl status` wall time, beside the interpreter's own start-up (the floor)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from txd_testing import Daemon

from benchmarks.common import BIN, fmt_s, log, median, pct, timed_run
from benchmarks.context import Context
from benchmarks.daemons import cli_env
from benchmarks.torchx import ensure_torchx, torchx_version


async def run(ctx: Context, daemon: Daemon) -> None:
    args, res, work = ctx.args, ctx.res, ctx.work
    n_run = 5 if ctx.quick else args.runs
    n_status = 10 if ctx.quick else args.status_runs
    txctl = BIN / "txctl"
    if not txctl.exists():
        txctl = Path(shutil.which("txctl") or "txctl")
    env = cli_env(daemon)
    torchx, why = ensure_torchx(Path(args.torchx_venv))
    if torchx is not None:
        log(f"torchx {torchx_version(torchx)} at {torchx}")
    else:
        log(f"torchx comparison not measured: {why}")

    txd_cmd = [str(txctl), "run", "--wait", "utils.echo"]
    tx_cmd = [str(torchx), "run", "-s", "local_cwd", "utils.echo"] if torchx else None
    # Warm-up (page cache, first-run effects), then alternate the two so that both see
    # the same machine conditions.
    _, out = timed_run(txd_cmd, env, work)
    handle = out.splitlines()[0].strip()
    if tx_cmd:
        timed_run(tx_cmd, env, work)
    t_txd, t_tx = [], []
    log(f"timing txctl run --wait{' and torchx run' if tx_cmd else ''} x{n_run}")
    for _ in range(n_run):
        t_txd.append(timed_run(txd_cmd, env, work)[0])
        if tx_cmd:
            t_tx.append(timed_run(tx_cmd, env, work)[0])
    m_txd = median(t_txd)
    res.add(
        "`txctl run --wait utils.echo` wall (median)",
        fmt_s(m_txd),
        note=f"n={n_run}, min {fmt_s(min(t_txd))}, max {fmt_s(max(t_txd))}",
    )
    if torchx is not None and t_tx:
        m_tx = median(t_tx)
        res.add(
            "`torchx run -s local_cwd utils.echo` wall (median)",
            fmt_s(m_tx),
            note=f"torchx {torchx_version(torchx)}, n={n_run}, min "
            f"{fmt_s(min(t_tx))}, max {fmt_s(max(t_tx))}; waits for the job",
        )
        ratio = m_txd / m_tx
        res.add(
            "txctl run --wait / torchx run (medians)",
            f"{ratio:.2f}x",
            "<= 0.40x",
            ratio <= 0.40,
            note=f"needs txctl <= {fmt_s(0.4 * m_tx)}",
        )
        # torchx polls the job's state once a second: a run whose job was not yet done at
        # the first poll takes ~1 s longer. Its fastest run is the job without that wait.
        slow = sum(1 for t in t_tx if t > min(t_tx) + 0.5)
        res.add(
            "txctl run --wait / torchx run (fastest runs)",
            f"{min(t_txd) / min(t_tx):.2f}x",
            note=f"{slow}/{n_run} torchx runs hit its 1 s status-poll interval",
        )
    else:
        res.add(
            "txctl run --wait / torchx run (medians)",
            "not measured",
            "<= 0.40x",
            None,
            note=why,
        )

    log(f"timing txctl status x{n_status}")
    t_st = [timed_run([str(txctl), "status", handle], env, work)[0] for _ in range(n_status)]
    m_st = median(t_st)
    res.add(
        "`txctl status HANDLE` wall (median)",
        fmt_s(m_st),
        "<= 0.120 s",
        m_st <= 0.120,
        note=f"n={n_status}, min {fmt_s(min(t_st))}, p90 {fmt_s(pct(t_st, 90))}",
    )
    # The floor under any Python CLI on this machine: the interpreter starting and exiting.
    t_py = [timed_run([sys.executable, "-c", "pass"], env, work)[0] for _ in range(10)]
    t_py_s = [timed_run([sys.executable, "-S", "-c", "pass"], env, work)[0] for _ in range(10)]
    res.add(
        "`python -c pass` wall (median; floor for any Python CLI)",
        fmt_s(median(t_py)),
        note=f"`python -S` (no site): {fmt_s(median(t_py_s))}",
    )
