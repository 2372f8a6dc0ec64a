"""What a TorchX user finds on Slurm (issue 20, gap 7), on the real cluster through a real txd:
the log files under TorchX's names, every `--time` sbatch takes, TorchX's `nomem` rule on a
partition whose nodes report at most 1000 MB (the cluster's `small`, scripts/slurm-up), and a
GPU dry run on a host without Slurm's commands, which says what it assumed."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from txd.schedulers.api import SubmitContext
from txd.schedulers.hpc.slurm import create_scheduler
from txd.v1 import AppDef, Resource, Role
from txd_testing import Daemon, read_logs, remove_tree, short_tmpdir, unique

from .test_slurm_jobs import STATE, role

PRINT = 'echo "out $0 $1"; echo "err $0 $1" >&2'


def _replica(name: str, replicas: int = 1) -> Role:
    return role(name, PRINT, replicas=replicas, env={"X": "1"})


async def test_log_files_have_torchx_names_and_txctl_logs_reads_them(
    slurm_client: Any, slurm_daemon: Any, target: Any, jobdir: Path
) -> None:
    app = AppDef(name=unique("names"), roles=[_replica("trainer", 2), _replica("ps")])
    for r in app.roles:
        r.args.extend([r.name, "${replica_id}"])
    handle = await slurm_client.run(app, "slurm", target(jobdir))
    status = await slurm_client.wait(handle, timeout=60)
    assert STATE(status.state) == "SUCCEEDED", status
    job_id = status.app_id.rpartition(":")[2]  # "login:<id>" through the login node
    for name, k in (("trainer", 0), ("trainer", 1), ("ps", 0)):
        for stream in ("out", "err"):
            torchx_name = jobdir / f"slurm-{job_id}-{name}-{k}.{stream}"
            want = f"{stream} {name} {k}\n".encode()
            assert torchx_name.read_bytes() == want, sorted(p.name for p in jobdir.iterdir())
            streams = "stdout" if stream == "out" else "stderr"
            got = await read_logs(slurm_client, handle, role=name, replica=k, streams=streams)
            assert got == want
    # The batch script's own output, where TorchX's users `less slurm-<jobid>.out`.
    assert (jobdir / f"slurm-{job_id}.out").read_text().endswith("txd: exit code 0\n")
    # And as a user reads them: txctl logs.
    res = slurm_daemon.txctl("logs", f"{handle}/trainer/1", "--streams", "stderr", check=True)
    assert res.stdout.splitlines()[-1].endswith("err trainer 1"), res.stdout


async def test_every_no_limit_time_runs(slurm_client: Any, jobdir: Path) -> None:
    """UNLIMITED, INFINITE (any case) and -1 are sbatch's words for no time limit."""
    forms = ["UNLIMITED", "infinite", "-1"]
    app = AppDef(name=unique("forever"), roles=[role("main", "echo ran")])
    handles = [
        await slurm_client.run(app, "slurm", {"job_dir": str(jobdir), "time": t}) for t in forms
    ]
    done = await asyncio.gather(*(slurm_client.wait(h, timeout=60) for h in handles))
    assert [STATE(s.state) for s in done] == ["SUCCEEDED"] * len(forms), done
    assert [await read_logs(slurm_client, h) for h in handles] == [b"ran\n"] * len(forms)
    dry = await slurm_client.dryrun(app, "slurm", {"job_dir": str(jobdir), "time": "Infinite"})
    assert "\n#SBATCH --time=Infinite\n" in dry.request
    assert "ok    cfg.time: Infinite is within MaxTime=UNLIMITED" in dry.request, dry.request


async def test_no_memory_is_requested_on_a_partition_reporting_at_most_1000_mb(
    slurm_client: Any, target: Any, jobdir: Path
) -> None:
    """TorchX's rule. `small`'s node reports 1000 MB: a --mem=2000 there Slurm would refuse
    ("Requested node configuration is not available"), so the job running shows it was left
    out. On `debug` (4000 MB) the memory is requested."""
    r = role("main", "echo ran", resource=Resource(cpu=1, mem_mb=2000))
    app = AppDef(name=unique("nomem"), roles=[r])
    cfg = {**target(jobdir), "partition": "small"}
    dry = (await slurm_client.dryrun(app, "slurm", cfg)).request
    assert "--mem" not in dry.replace("--mem left out", ""), dry
    assert (
        "# txd: --mem left out: the partition's nodes report at most 1000 MB (small 1000 MB)" in dry
    )
    handle = await slurm_client.run(app, "slurm", cfg)
    assert STATE((await slurm_client.wait(handle, timeout=60)).state) == "SUCCEEDED"
    assert await read_logs(slurm_client, handle) == b"ran\n"

    dry = (await slurm_client.dryrun(app, "slurm", {**cfg, "partition": "debug"})).request
    assert "\n#SBATCH --mem=2000\n" in dry and "left out" not in dry, dry


@pytest.fixture
def no_slurm_daemon(tmp_path: Path) -> Iterator[Daemon]:
    """A txd whose PATH holds none of Slurm's commands: a host off the cluster."""
    empty = tmp_path / "bin"
    empty.mkdir()
    d = Daemon(short_tmpdir("txdns-"), env={"PATH": str(empty)})
    try:
        yield d.start()
    finally:
        d.close()
        remove_tree(d.root)


async def test_gpu_dryrun_off_the_cluster_says_what_it_assumed(
    no_slurm_daemon: Daemon, slurm_client: Any
) -> None:
    r = role("train", "nvidia-smi", replicas=2, resource=Resource(cpu=1, gpu=2, mem_mb=2000))
    app = AppDef(name=unique("gpu"), roles=[r])
    off_cluster = {"PATH": no_slurm_daemon.env["PATH"]}  # the caller's, which sbatch gets
    async with no_slurm_daemon.client() as c:
        dry = (await c.dryrun(app, "slurm", {"job_dir": "/shared/jobs"}, env=off_cluster)).request
    lines = dry.splitlines()
    assert "#SBATCH --gpus-per-task=2" in lines and "#SBATCH --gpus-per-node=2" not in lines
    assert (
        "# txd: Slurm version unknown (sinfo: command not found on this host; is the "
        "scheduler's client installed and on PATH there?); assumed 24.05, as TorchX does: GPUs "
        "are asked per task (--gpus-per-task), where Slurm 24.11 and later take "
        "--gpus-per-node"
    ) in lines, dry
    # Memory: unknown too, so requested, as TorchX does.
    assert "#SBATCH --mem=2000" in lines
    assert any(
        line.startswith("# txd: partition memory unknown (sinfo: command not") for line in lines
    )
    assert "precheck: not run" in dry, dry  # a dry run needs no cluster

    # On the cluster the version is known: nothing assumed.
    on_cluster = (await slurm_client.dryrun(app, "slurm", {"job_dir": "/shared/jobs"})).request
    assert "Slurm version unknown" not in on_cluster and "memory unknown" not in on_cluster
    assert "#SBATCH --gpus-per-task=2" in on_cluster.splitlines()  # the cluster's 22.05


async def test_version_and_memory_unknown_where_sinfo_has_no_cluster(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """sinfo installed but no cluster configured (no SLURM_CONF, no DNS record): even
    `sinfo --version` fails on Slurm 22.05. The dry run still works, and says so."""
    monkeypatch.delenv("SLURM_CONF", raising=False)
    sched = create_scheduler("test")
    r = role("train", "true", resource=Resource(cpu=1, gpu=1, mem_mb=500))
    ctx = SubmitContext(cwd="/", env={})
    try:
        info = await sched.submit_dryrun(AppDef(name="g", roles=[r]), {}, ctx)
    finally:
        await sched.aclose()
    script = info.request.script
    assert "\n#SBATCH --gpus-per-task=1\n#SBATCH --ntasks=1\n" in script
    assert (
        "# txd: Slurm version unknown (`sinfo --version` on this host failed: sinfo: fatal: "
        "Could not establish a configuration source); assumed 24.05"
    ) in script, script
    assert "\n#SBATCH --mem=500\n" in script
    assert "# txd: partition memory unknown (`sinfo --noconvert --noheader" in script
