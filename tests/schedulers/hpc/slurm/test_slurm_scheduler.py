"""SlurmScheduler itself, without a daemon, on the real cluster of conftest.py: here and through
the SSH login node. The test plays the daemon: it keeps each `Job` as JSON, polls
`describe_many`, and says when a job has ended.

Jobs that must be caught while running wait for a release file the test creates, so no result
depends on timing; the loops below only pace the polling.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from txd.schedulers.api import Described, Ended, Job, LogQuery, NoAnswer, SubmitContext, is_terminal
from txd.schedulers.hpc.hosts import SshTarget, target_to_native
from txd.schedulers.hpc.slurm import SlurmScheduler, create_scheduler
from txd.schedulers.options import to_cfg_value
from txd.v1 import AppDef, AppState, AppStatus, Role, Stream

POLL = 0.1
DEADLINE = 60


@pytest.fixture
async def sched(
    slurm_cluster: Any, login_node: Any, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[SlurmScheduler]:
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))  # the daemon's cluster
    monkeypatch.setenv("HOME", str(login_node.home))  # whose ~/.ssh/config names `login`
    s = create_scheduler("test")
    yield s
    await s.aclose()


def role(name: str, script: str, replicas: int = 1) -> Role:
    return Role(name=name, entrypoint="bash", args=["-c", script], num_replicas=replicas)


def held(release: Path, before: str = "", after: str = "") -> str:
    return f"{before}\nwhile [ ! -e {release} ]; do sleep 0.05; done\n{after}"


async def submit(sched: SlurmScheduler, app: AppDef, **opts: str) -> Job:
    """Submits app; returns the Job as the daemon hands it back: native stored as JSON."""
    cfg = {k: to_cfg_value(v) for k, v in opts.items()}
    info = await sched.submit_dryrun(app, cfg, SubmitContext(cwd="/", env=dict(os.environ)))
    done = await sched.schedule(info)
    return Job(done.app_id, json.loads(json.dumps(done.native)))


def answered(value: Described) -> AppStatus | None:
    assert not isinstance(value, NoAnswer), value
    return value


async def describe(sched: SlurmScheduler, job: Job) -> AppStatus | None:
    return answered((await sched.describe_many([job]))[job.app_id])


async def until(sched: SlurmScheduler, job: Job, done: Callable[[AppStatus], bool]) -> AppStatus:
    async with asyncio.timeout(DEADLINE):
        while True:
            status = await describe(sched, job)
            assert status is not None
            if done(status):
                return status
            assert not is_terminal(status.state), status
            await asyncio.sleep(POLL)


async def until_terminal(sched: SlurmScheduler, job: Job) -> AppStatus:
    return await until(sched, job, lambda s: is_terminal(s.state))


def never() -> Ended:
    async def wait() -> None:
        await asyncio.Event().wait()

    return wait


async def read(sched: SlurmScheduler, job: Job, role: str, k: int, **query: Any) -> bytes:
    return b"".join([c async for c in sched.log_iter(job, role, k, LogQuery(**query), never())])


@pytest.fixture(params=["local", "ssh"])
def where(request: pytest.FixtureRequest) -> dict[str, str]:
    return {"ssh_host": "login"} if request.param == "ssh" else {}


async def test_a_job_runs_to_its_end_and_any_instance_can_tell(
    sched: SlurmScheduler, where: dict[str, str], jobdir: Path
) -> None:
    echo = 'echo "$0 $1 of $SLURM_HET_SIZE"; echo "err $1" >&2'
    done = f"{jobdir}/trainer-$1.done"
    # srun stops the other replicas when one fails (--kill-on-bad-exit): ps fails only once
    # both trainers are through, plus a margin for their exit to reach slurmstepd.
    trainers_done = " && ".join(f"[ -e {jobdir}/trainer-{k}.done ]" for k in range(2))
    fail_last = f"; until {trainers_done}; do sleep 0.05; done; sleep 0.5; exit 3"
    app = AppDef(
        name="two",
        roles=[
            role("trainer", f"{echo}; touch {done}", replicas=2),
            role("ps", echo + fail_last),
        ],
    )
    for r in app.roles:
        r.args.extend([r.name, "${replica_id}"])
    job = await submit(sched, app, job_dir=str(jobdir), **where)
    slurm_id = job.native["job_id"]
    assert job.app_id == (f"login:{slurm_id}" if where else slurm_id)
    ssh = SshTarget("login") if where else None
    assert job.native["ssh"] == target_to_native(ssh)
    assert job.native["replicas"] == [["trainer", 0], ["trainer", 1], ["ps", 0]]

    status = await until_terminal(sched, job)
    assert status.state == AppState.FAILED, status
    codes = {(r.role, r.id): r.exit_code for rs in status.roles for r in rs.replicas}
    assert codes == {("trainer", 0): 0, ("trainer", 1): 0, ("ps", 0): 3}
    assert await read(sched, job, "trainer", 1, stream=Stream.STDOUT) == b"trainer 1 of 3\n"
    assert await read(sched, job, "ps", 0) == b"ps 0 of 3\nerr 0\n"

    # Stateless: a scheduler that never saw the job (a restarted daemon's) answers the same.
    fresh = create_scheduler("test")
    try:
        assert await describe(fresh, job) == status
        # ^: when ps fails first, srun stops the others and slurmstepd says so on stderr.
        assert await read(fresh, job, "trainer", 0, regex="^err") == b"err 0\n"
    finally:
        await fresh.aclose()


async def test_a_follow_ends_when_the_daemon_says_the_job_ended(
    sched: SlurmScheduler, jobdir: Path
) -> None:
    release = jobdir / "release"
    app = AppDef(name="follow", roles=[role("main", held(release, "echo before", "echo after"))])
    job = await submit(sched, app, job_dir=str(jobdir))
    ended = asyncio.Event()

    async def until_ended() -> None:
        await ended.wait()

    chunks = sched.log_iter(job, "main", 0, LogQuery(follow=True), until_ended)
    first = await anext(chunks)
    if first == b"":  # caught up with a log not written yet (rule 7)
        first = await anext(chunks)
    assert first == b"before\n"
    release.touch()
    assert (await until_terminal(sched, job)).state == AppState.SUCCEEDED
    ended.set()  # what the daemon does once its cache holds the terminal status
    async with asyncio.timeout(DEADLINE):
        assert b"".join([c async for c in chunks]) == b"after\n"


async def test_cancel_is_idempotent(
    sched: SlurmScheduler, where: dict[str, str], jobdir: Path
) -> None:
    app = AppDef(name="long", roles=[role("main", "echo started; sleep 600")])
    job = await submit(sched, app, job_dir=str(jobdir), **where)
    await until(sched, job, lambda s: s.state == AppState.RUNNING)
    await sched.cancel(job)  # no describe first, and returns at once
    assert (await until_terminal(sched, job)).state == AppState.CANCELLED
    await sched.cancel(job)  # "already completing or completed": no error


async def test_list_shows_this_hosts_jobs(sched: SlurmScheduler, jobdir: Path) -> None:
    release = jobdir / "release"
    job = await submit(
        sched, AppDef(name="l", roles=[role("main", held(release))]), job_dir=str(jobdir)
    )
    try:
        listed = {s.app_id: s for s in await sched.list()}
        assert job.app_id in listed
        assert listed[job.app_id].name == "main-0"
    finally:
        release.touch()
    assert (await until_terminal(sched, job)).state == AppState.SUCCEEDED


@pytest.mark.slow
async def test_jobs_slurm_forgot_are_settled_from_their_output_or_unknown(
    slurm_cluster: Any, monkeypatch: pytest.MonkeyPatch, jobdir: Path
) -> None:
    """Ended and forgotten (MinJobAge) before anyone asked: the cluster has no accounting, so
    the batch script's last line settles the job; without it the job waits forgotten_grace
    for one (NoAnswer: the daemon keeps it stale), then is unknown (None)."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    sched = create_scheduler("test", settings={"forgotten_grace": 1.0})
    try:
        await _forgotten_jobs(sched, slurm_cluster, jobdir)
    finally:
        await sched.aclose()


async def _forgotten_jobs(sched: SlurmScheduler, slurm_cluster: Any, jobdir: Path) -> None:
    apps = {
        "fails": AppDef(name="fails", roles=[role("main", "exit 4")]),
        "works": AppDef(name="works", roles=[role("main", "true")]),
        "mute": AppDef(name="mute", roles=[role("main", "true")]),
    }
    jobs = {name: await submit(sched, app, job_dir=str(jobdir)) for name, app in apps.items()}
    ids = {job.native["job_id"] for job in jobs.values()}
    async with asyncio.timeout(DEADLINE):
        while True:  # slurmctld purges every few seconds
            if not ids & slurm_cluster.squeue_ids():
                break
            await asyncio.sleep(POLL)
    mute = jobs["mute"].native
    (jobdir / f"slurm-{mute['job_id']}-{mute['tag']}.out").unlink()

    t0 = asyncio.get_running_loop().time()
    found = await sched.describe_many(list(jobs.values()))
    fails, works = answered(found[jobs["fails"].app_id]), answered(found[jobs["works"].app_id])
    assert fails is not None and fails.state == AppState.FAILED
    assert fails.msg.endswith("ended while txd was away (from its batch output), exit code 4")
    assert [r.state for rs in fails.roles for r in rs.replicas] == [AppState.FAILED]
    assert works is not None and works.state == AppState.SUCCEEDED
    waiting = found[jobs["mute"].app_id]
    assert isinstance(waiting, NoAnswer), waiting
    assert waiting.reason.endswith("showed an exit code; waiting up to 1 s for one"), waiting
    assert sched.backend_calls()["sacct"] == 1
    async with asyncio.timeout(DEADLINE):
        while True:
            mute_now = (await sched.describe_many([jobs["mute"]]))[jobs["mute"].app_id]
            if not isinstance(mute_now, NoAnswer):
                break
            await asyncio.sleep(POLL)
    assert mute_now is None  # the daemon records it UNKNOWN and stops asking
    assert asyncio.get_running_loop().time() - t0 >= 1.0
    await sched.describe_many([jobs["works"]])
    assert sched.backend_calls()["sacct"] == 1  # no accounting here: not asked again
    await sched.cancel(jobs["mute"])  # Slurm no longer knows it: no error


async def test_logs_of_jobs_recorded_by_earlier_versions_still_read(
    sched: SlurmScheduler, where: dict[str, str], jobdir: Path
) -> None:
    """A job the previous version submitted has only its tagged files (no TorchX names); one
    recorded before tags were has only `slurm-<jobid>-<role>-<k>.*`, which are TorchX's."""
    app = AppDef(name="old", roles=[role("main", 'echo "out $SLURM_JOB_ID"; echo err >&2')])
    job = await submit(sched, app, job_dir=str(jobdir), **where)
    assert (await until_terminal(sched, job)).state == AppState.SUCCEEDED
    slurm_id, tag = job.native["job_id"], job.native["tag"]
    want = f"out {slurm_id}\n".encode()

    torchx_names = [jobdir / f"slurm-{slurm_id}{s}" for s in (".out", "-main-0.out", "-main-0.err")]
    for path in torchx_names:
        path.unlink()  # as the previous version left them: tagged names only
    assert await read(sched, job, "main", 0, stream=Stream.STDOUT) == want
    assert await read(sched, job, "main", 0, stream=Stream.STDERR) == b"err\n"

    for ext in ("out", "err"):  # as a version before tags left them: TorchX's names only
        (jobdir / f"slurm-{slurm_id}-{tag}-main-0.{ext}").rename(
            jobdir / f"slurm-{slurm_id}-main-0.{ext}"
        )
    untagged = Job(job.app_id, {k: v for k, v in job.native.items() if k != "tag"})
    assert await read(sched, untagged, "main", 0) == want + b"err\n"
