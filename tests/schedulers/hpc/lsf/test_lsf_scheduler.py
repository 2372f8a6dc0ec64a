"""The lsf scheduler against fake hosts that answer with recorded LSF output: what it runs,
where, how often, and what it makes of the answers."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import lsf_fakes
import pytest
from lsf_fakes import FakeHost, FakeHosts, Reply, recorded
from txd.schedulers.api import Described, Job, LogQuery, NoAnswer, SubmitContext, is_terminal
from txd.schedulers.errors import (
    BackendUnavailable,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Unsupported,
)
from txd.schedulers.hpc.hosts import CHUNK, SshTarget
from txd.schedulers.hpc.lsf import LsfScheduler, create_scheduler
from txd.schedulers.hpc.lsf_script import BHOSTS, RANK0_PLACEHOLDER
from txd.schedulers.hpc.lsf_status import BJOBS
from txd.schedulers.options import to_cfg_value
from txd.v1 import AppDef, AppState, AppStatus, Resource, Role, Stream

CTX = SubmitContext(cwd="/home/alice", env={})
LOGIN1 = SshTarget("login1", "alice")


def make_app(
    name: str, roles: dict[str, int], cpu: int = 0, gpu: int = 0, mem_mb: int = 0
) -> AppDef:
    res = Resource(cpu=cpu, gpu=gpu, mem_mb=mem_mb)
    return AppDef(
        name=name,
        roles=[
            Role(name=r, image="img:1", entrypoint="run", num_replicas=n, resource=res)
            for r, n in roles.items()
        ],
    )


def cfg(**values: Any) -> dict[str, Any]:
    return {k: to_cfg_value(v) for k, v in values.items()}


async def submit(sched: LsfScheduler, app: AppDef, **opts: Any) -> Job:
    """Submits app; returns the Job as the daemon hands it back: native stored as JSON."""
    info = await sched.submit_dryrun(app, cfg(**opts), CTX)
    done = await sched.schedule(info)
    return Job(done.app_id, json.loads(json.dumps(done.native)))


async def describe(sched: LsfScheduler, job: Job) -> AppStatus | None:
    return answered((await sched.describe_many([job]))[job.app_id])


def answered(value: Described) -> AppStatus | None:
    """A status or None, not NoAnswer."""
    assert not isinstance(value, NoAnswer), value
    return value


def unknown_job(app_id: str = "never-submitted") -> Job:
    """A job whose app LSF has never shown (or has forgotten)."""
    return Job(app_id, {"ssh": None, "jobdir": None, "replicas": []})


def cluster(hosts: FakeHosts, target: SshTarget | None) -> FakeHost:
    """A fake login node where bhosts answers and every bsub succeeds."""
    host = hosts.put(target, FakeHost(f"fake {target}"))
    host.reply("bhosts", Reply(recorded("bhosts.txt")))
    host.respond("/bin/bash", lsf_fakes.submitted)
    host.respond("bqueues", lsf_fakes.bqueues)
    host.respond("sh", lsf_fakes.shared_jobdirs)
    return host


def bjobs_row(job_id: int, app_id: str, job: str, stat: str, code: str = "-") -> str:
    return f"{job_id}|{app_id}|{stat}|{code}|cpu-node-01|{app_id}-{job}\n"


def replicas(status: AppStatus | None) -> dict[str, Any]:
    assert status is not None
    return {f"{r.role}/{r.id}": r for role in status.roles for r in role.replicas}


async def collect(chunks: Any) -> bytes:
    return b"".join([c async for c in chunks])


# -- submission ---------------------------------------------------------------------------------


async def test_dryrun_without_precheck_asks_lsf_nothing_and_the_submit_picks_the_rank0_host(
    sched: LsfScheduler, local: FakeHost
) -> None:
    app = make_app("ddp", {"trainer": 2}, cpu=8, gpu=2)
    info = await sched.submit_dryrun(app, cfg(precheck=False), CTX)
    assert local.runs == []  # works where no LSF answers
    assert info.text == info.request.script + "# precheck: off (precheck=False)\n"
    assert f'-m "{RANK0_PLACEHOLDER}"' in info.text
    assert f"# {RANK0_PLACEHOLDER}: when submitted, the first host bhosts lists with 8 job\n" in (
        info.text
    )

    await sched.schedule(info)
    assert local.argvs("bhosts") == [BHOSTS]
    [(_, script)] = [run for run in local.runs if run[0][0] == "/bin/bash"]
    assert script is not None
    assert b"-m gpu-node-01" in script  # the first host with 8 slots and 2 GPUs
    assert RANK0_PLACEHOLDER.encode() not in script


async def test_once_submitted_the_text_is_the_script_submitted_with_its_checks(
    sched: LsfScheduler, local: FakeHost
) -> None:
    """The daemon keeps info.text after schedule() (issue 21): the script bsub ran, rank-0
    host picked, and the checks made before queueing, not the dry run's placeholder."""
    app = make_app("ddp", {"trainer": 2}, cpu=8, gpu=2)
    info = await sched.submit_dryrun(app, cfg(lsf_queue="normal"), CTX)
    assert RANK0_PLACEHOLDER in info.text
    await sched.schedule(info)
    [(_, script)] = [run for run in local.runs if run[0][0] == "/bin/bash"]
    assert script is not None
    kept, _, checks = info.text.partition("# precheck on ")
    assert kept == script.decode()
    assert "-m gpu-node-01" in kept and RANK0_PLACEHOLDER not in info.text
    assert "lsf_queue: " in checks, checks


async def test_dryrun_lowercases_the_app_id(
    sched: LsfScheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    from txd.schedulers.hpc import lsf

    monkeypatch.setattr(lsf, "make_unique", lambda name: f"{name}-b2c4d6")
    info = await sched.submit_dryrun(make_app("My.Big_App", {"Main": 1}), {}, CTX)
    assert info.request.app_id == "mybig_app-b2c4d6"
    assert info.request.jobs[0].name == "mybig_app-b2c4d6-main-0"
    assert info.request.jobs[0].role == "Main"  # statuses keep the role's own name


def app_with(change: Any) -> AppDef:
    app = make_app("a", {"r": 1})
    change(app)
    return app


@pytest.mark.parametrize(
    ("opts", "app", "field"),
    [
        ({"shm_size": "64 megs"}, None, "cfg.shm_size"),
        ({"shm_size": "-1g"}, None, "cfg.shm_size"),
        ({"jobdir": "jobs"}, None, "cfg.jobdir"),
        ({"container_workdir": "work"}, None, "cfg.container_workdir"),
        ({"lsf_queue": "gpu normal"}, None, "cfg.lsf_queue"),
        ({"no_such_option": "x"}, None, "cfg.no_such_option"),
        ({}, app_with(lambda a: a.roles[0].ClearField("image")), "app.roles[0].image"),
        ({}, make_app("a", {"Trainer": 1, "trainer": 1}), "app.roles[1].name"),
        ({}, app_with(lambda a: a.roles[0].env.update(X="a\n#BSUB -q x")), "app.roles[0].env[X]"),
        ({}, app_with(lambda a: a.roles[0].args.append("\n #BSUB -x")), "app.roles[0].args[0]"),
    ],
)
async def test_bad_input_is_an_invalid_argument_naming_the_field(
    sched: LsfScheduler, local: FakeHost, opts: dict[str, Any], app: AppDef | None, field: str
) -> None:
    with pytest.raises(InvalidArgument) as err:
        await sched.submit_dryrun(app or make_app("a", {"r": 1}), cfg(**opts), CTX)
    assert err.value.field == field
    assert local.argvs("/bin/bash") == []


async def test_no_host_fits_the_first_replica_at_submit(
    sched: LsfScheduler, local: FakeHost
) -> None:
    info = await sched.submit_dryrun(make_app("a", {"r": 1}, gpu=16), {}, CTX)
    with pytest.raises(InvalidArgument) as err:
        await sched.schedule(info)
    assert err.value.field == "app.roles[0].resource"  # no host has 16 GPUs
    assert local.argvs("/bin/bash") == []


async def test_schedule_runs_the_script_and_returns_what_finds_the_jobs_again(
    sched: LsfScheduler, local: FakeHost
) -> None:
    info = await sched.submit_dryrun(make_app("ddp", {"trainer": 2}), {}, CTX)
    done = await sched.schedule(info)
    assert done.app_id == "ddp-bcdfghjklmnp"
    [(argv, script)] = [run for run in local.runs if run[0][0] == "/bin/bash"]
    assert argv == ("/bin/bash", "-s")
    assert script is not None
    assert b" -m cpu-node-01 " in script and RANK0_PLACEHOLDER.encode() not in script
    assert done.native == {
        "app_id": "ddp-bcdfghjklmnp",
        "ssh": None,
        "jobdir": None,
        "replicas": [
            {"role": "trainer", "replica_id": 0, "job": "ddp-bcdfghjklmnp-trainer-0"},
            {"role": "trainer", "replica_id": 1, "job": "ddp-bcdfghjklmnp-trainer-1"},
        ],
        "job_ids": ["5000", "5001"],
    }
    json.dumps(done.native)  # the daemon stores it as JSON


async def test_schedule_reads_the_default_queue_answer(
    sched: LsfScheduler, local: FakeHost
) -> None:
    local.responders.clear()
    local.reply("/bin/bash", Reply(recorded("bsub_default_queue.stdout")))
    job = await submit(sched, make_app("echo", {"hello": 1}))
    assert job.native["job_ids"] == ["4201"]


async def test_a_refused_bsub_kills_what_was_submitted(
    sched: LsfScheduler, local: FakeHost
) -> None:
    local.responders.clear()
    local.reply(
        "/bin/bash",
        Reply(recorded("bsub_partial.stdout"), recorded("bsub_partial.stderr"), returncode=255),
    )
    local.reply("bkill", Reply(b"Job <4301> is being terminated\n"))
    with pytest.raises(FailedPrecondition) as err:
        await submit(sched, make_app("ddp", {"trainer": 2}))
    assert "bsub of ddp-bcdfghjklmnp-trainer-1 failed" in str(err.value)
    assert "Bad resource requirement syntax. Job not submitted." in str(err.value)
    assert local.argvs("bkill") == [("bkill", "4301")]


async def test_a_failed_cleanup_does_not_hide_bsubs_error(
    sched: LsfScheduler, local: FakeHost
) -> None:
    local.responders.clear()
    local.reply(
        "/bin/bash",
        Reply(recorded("bsub_partial.stdout"), recorded("bsub_partial.stderr"), returncode=255),
    )
    local.missing.add("bkill")
    with pytest.raises(FailedPrecondition, match="Bad resource requirement syntax"):
        await submit(sched, make_app("ddp", {"trainer": 2}))


# -- status -------------------------------------------------------------------------------------


APPS = {
    "ddp": {"trainer": 2},
    "echo": {"hello": 1},
    "fail": {"worker": 2},
    "stop": {"worker": 1},
    "susp": {"a": 1, "b": 1},
    "odd": {"a": 1},
}


async def test_describe_many_asks_bjobs_once_for_every_app(
    sched: LsfScheduler, local: FakeHost
) -> None:
    jobs = {name: await submit(sched, make_app(name, roles)) for name, roles in APPS.items()}
    ids = {name: job.app_id for name, job in jobs.items()}
    local.reply("bjobs", Reply(recorded("bjobs_apps.stdout")))
    local.reply("bkill", Reply(b"Job <4121> is being terminated\n"))
    found = await sched.describe_many([*jobs.values(), unknown_job()])
    assert local.argvs("bjobs") == [BJOBS]
    assert sched.backend_calls()["bjobs"] == 1

    assert found["never-submitted"] is None
    ddp = answered(found[ids["ddp"]])
    # RUNNING as soon as one replica runs (status.fold), though trainer/1 still waits for it
    assert ddp is not None and ddp.state == AppState.RUNNING and ddp.app_id == ids["ddp"]
    r = replicas(ddp)
    assert (r["trainer/0"].state, r["trainer/0"].hostname) == (AppState.RUNNING, "gpu-node-01")
    assert not r["trainer/0"].HasField("exit_code")
    assert (r["trainer/1"].state, r["trainer/1"].hostname) == (AppState.PENDING, "")

    echo = answered(found[ids["echo"]])
    assert echo is not None and echo.state == AppState.SUCCEEDED
    assert replicas(echo)["hello/0"].exit_code == 0

    fail = answered(found[ids["fail"]])  # failing fast: live until worker/1 has ended
    assert fail is not None and fail.state == AppState.RUNNING
    assert fail.msg == "worker/0 exited with 1, stopping the other replicas"
    r = replicas(fail)
    assert (r["worker/0"].exit_code, r["worker/0"].hostname) == (1, "gpu-node-01")
    assert (r["worker/1"].state, r["worker/1"].hostname) == (AppState.RUNNING, "gpu-node-02")
    assert local.argvs("bkill") == [("bkill", "4121")]

    stop = answered(found[ids["stop"]])
    assert stop is not None and stop.state == AppState.CANCELLED
    assert replicas(stop)["worker/0"].exit_code == 130

    susp = answered(found[ids["susp"]])
    assert susp is not None and susp.state == AppState.RUNNING  # b/0 runs, a/0 is suspended
    assert replicas(susp)["a/0"].state == AppState.PENDING  # USUSP
    assert [role.role for role in susp.roles] == ["a", "b"]

    odd = answered(found[ids["odd"]])
    assert odd is not None and odd.state == AppState.UNKNOWN
    assert odd.msg == "a/0: LSF state UNKWN"


async def test_describe_many_asks_each_login_node_once(
    sched: LsfScheduler, hosts: FakeHosts, local: FakeHost
) -> None:
    login1 = cluster(hosts, LOGIN1)
    on_login1 = [
        await submit(sched, make_app(name, APPS[name]), ssh_host="login1", ssh_user="alice")
        for name in ("echo", "fail")
    ]
    here = await submit(sched, make_app("stop", APPS["stop"]))
    assert login1.argvs("bhosts") and login1.argvs("/bin/bash")  # submitted over there
    for host in (login1, local):
        host.reply("bjobs", Reply(recorded("bjobs_apps.stdout")))
    login1.reply("bkill", Reply(b"Job <4121> is being terminated\n"))  # fail's worker/1
    found = await sched.describe_many([*on_login1, here])
    assert len(login1.argvs("bjobs")) == 1
    assert len(local.argvs("bjobs")) == 1
    states = {i: s.state for i, s in found.items() if isinstance(s, AppStatus)}
    assert [states[j.app_id] for j in (*on_login1, here)] == [
        AppState.SUCCEEDED,
        AppState.RUNNING,  # failed fast: until its other replica has ended
        AppState.CANCELLED,
    ]

    # login1's LSF is down: its apps have no answer (the daemon keeps their last status), the
    # others are still reported
    login1.reply("bjobs", Reply(stderr=recorded("bjobs_down.stderr"), returncode=255))
    found = await sched.describe_many([*on_login1, here])
    for job in on_login1:
        answer = found[job.app_id]
        assert isinstance(answer, NoAnswer) and "daemon not responding" in answer.reason
    assert isinstance(found[here.app_id], AppStatus)
    with pytest.raises(BackendUnavailable, match="batch system daemon not responding"):
        await describe(sched, on_login1[0])


@pytest.mark.parametrize(
    "reply",
    [
        Reply(stderr=recorded("bjobs_no_job.stderr")),  # LSB_BJOBS_CONSISTENT_EXIT_CODE=N
        Reply(stderr=recorded("bjobs_no_job.stderr"), returncode=255),  # ... =Y
        Reply(stderr=recorded("bjobs_not_found.stderr"), returncode=255),
        Reply(recorded("bjobs_apps.stdout")),  # other apps only
    ],
)
async def test_an_app_bjobs_no_longer_shows_is_forgotten(
    sched: LsfScheduler, local: FakeHost, reply: Reply
) -> None:
    job = await submit(sched, make_app("gone", {"a": 1}))
    local.reply("bjobs", reply)
    assert await describe(sched, job) is None


@pytest.mark.parametrize(
    "garbage",
    [
        bytes(range(256)) * 2,  # not text
        recorded("bjobs_apps.stdout")[:100],  # cut off mid-row
        b"4101|RUN|-|h|x\n",  # a column missing
    ],
    ids=["bytes", "truncated", "columns"],
)
async def test_garbled_bjobs_output_is_backend_unavailable_not_forgotten(
    sched: LsfScheduler, local: FakeHost, garbage: bytes
) -> None:
    """The daemon then keeps the app's last status, marked stale with this reason."""
    job = await submit(sched, make_app("garbled", {"a": 1}))
    local.reply("bjobs", Reply(garbage))
    said = r"^bjobs on fake this host printed what txd cannot read: line "
    with pytest.raises(BackendUnavailable, match=said):
        await describe(sched, job)


async def test_a_missing_lsf_command_is_backend_unavailable(
    sched: LsfScheduler, hosts: FakeHosts, local: FakeHost
) -> None:
    job = await submit(sched, make_app("echo", {"hello": 1}))
    local.missing.add("bjobs")
    with pytest.raises(BackendUnavailable, match="bjobs: command not found on fake"):
        await describe(sched, job)
    local.missing.add("bhosts")
    with pytest.raises(BackendUnavailable, match="bhosts: command not found"):
        await submit(sched, make_app("echo", {"hello": 1}))
    # over SSH, the remote shell says so with exit status 127
    login1 = hosts.put(LOGIN1, FakeHost("login node alice@login1"))
    said = b"bash: line 1: bhosts: command not found\n"
    login1.reply("bhosts", Reply(stderr=said, returncode=127))
    with pytest.raises(BackendUnavailable, match="bhosts: command not found on login node"):
        await submit(sched, make_app("echo", {"hello": 1}), ssh_host="login1", ssh_user="alice")


async def test_list_groups_the_users_jobs_by_project(sched: LsfScheduler, local: FakeHost) -> None:
    ddp = (await submit(sched, make_app("ddp", APPS["ddp"]))).app_id
    local.reply("bjobs", Reply(recorded("bjobs_apps.stdout")))
    apps = {s.app_id: s for s in await sched.list()}
    assert local.argvs("bjobs") == [BJOBS]
    # jobs not named <project>-<role>-<k> (project "default") are no app
    assert set(apps) == {
        "dist_app-c6v2phgkc2j2tc",
        ddp,
        "echo-cdfghjklmnpq",
        "fail-dfghjklmnpqr",
        "stop-fghjklmnpqrs",
        "susp-ghjklmnpqrst",
        "odd-hjklmnpqrstv",
    }
    torchx_app = apps["dist_app-c6v2phgkc2j2tc"]  # submitted by TorchX, not by this daemon
    assert torchx_app.state == AppState.SUCCEEDED
    assert list(replicas(torchx_app)) == ["dist_app/0", "dist_app/1"]
    assert apps[ddp].state == AppState.RUNNING
    assert apps["fail-dfghjklmnpqr"].state == AppState.RUNNING  # worker/1 still runs
    assert local.argvs("bkill") == []  # list reports; stopping survivors is the poll's job


# -- cancel -------------------------------------------------------------------------------------


async def test_cancel_bkills_the_unfinished_jobs_and_reports_cancelled(
    sched: LsfScheduler, local: FakeHost
) -> None:
    job = await submit(sched, make_app("ddp", APPS["ddp"]))
    app_id = job.app_id
    done = bjobs_row(4101, app_id, "trainer-1", "DONE")
    running = bjobs_row(4100, app_id, "trainer-0", "RUN")
    killed = bjobs_row(4100, app_id, "trainer-0", "EXIT", "1")
    local.reply("bjobs", Reply((running + done).encode()), Reply((killed + done).encode()))
    local.reply("bkill", Reply(recorded("bkill_terminated.stdout")))
    await sched.cancel(job)  # its first call about the job: nothing described it before
    assert local.argvs("bkill") == [("bkill", "4100")]  # the finished job is left alone
    assert len(local.argvs("bjobs")) == 1
    status = await describe(sched, job)
    assert status is not None and status.state == AppState.CANCELLED  # exit code 1, but we asked
    assert status.msg == "cancelled by request"


async def test_cancel_of_an_ended_or_unknown_app_does_nothing(
    sched: LsfScheduler, local: FakeHost
) -> None:
    job = await submit(sched, make_app("echo", APPS["echo"]))
    local.reply("bjobs", Reply(recorded("bjobs_apps.stdout")))  # echo: DONE
    await sched.cancel(job)
    await sched.cancel(unknown_job())
    assert local.argvs("bkill") == []
    assert len(local.argvs("bjobs")) == 2  # one per cancel


async def test_cancel_tolerates_jobs_that_ended_meanwhile(
    sched: LsfScheduler, local: FakeHost
) -> None:
    job = await submit(sched, make_app("ddp", APPS["ddp"]))
    local.reply("bjobs", Reply(bjobs_row(4101, job.app_id, "trainer-0", "RUN").encode()))
    local.reply("bkill", Reply(stderr=recorded("bkill_finished.stderr"), returncode=255))
    await sched.cancel(job)
    assert local.argvs("bkill") == [("bkill", "4101")]


async def test_cancel_reports_what_bkill_refused(sched: LsfScheduler, local: FakeHost) -> None:
    job = await submit(sched, make_app("ddp", APPS["ddp"]))
    local.reply("bjobs", Reply(bjobs_row(4102, job.app_id, "trainer-0", "RUN").encode()))
    local.reply("bkill", Reply(stderr=recorded("bkill_denied.stderr"), returncode=255))
    with pytest.raises(FailedPrecondition, match="Job <4102>: User permission denied"):
        await sched.cancel(job)


S, F, C, P, R, U = (
    AppState.SUCCEEDED,
    AppState.FAILED,
    AppState.CANCELLED,
    AppState.PENDING,
    AppState.RUNNING,
    AppState.UNKNOWN,
)


@pytest.mark.parametrize(
    ("stats", "expected"),
    [
        (["DONE", "DONE"], S),
        (["DONE", "RUN"], R),
        (["RUN", "RUN"], R),
        (["RUN", "PEND"], R),  # the head runs, the others wait for it
        (["PEND", "EXIT 1"], P),  # failed, but live until the other has been stopped
        (["RUN", "EXIT 1", "EXIT 130"], R),
        (["EXIT 130", "RUN"], R),
        (["RUN", "UNKWN"], R),
        (["UNKWN", "PEND"], U),
        (["EXIT 1", "EXIT 130", "DONE"], F),  # every replica has ended: any failure fails it
        (["EXIT 130", "DONE"], C),
    ],
)
async def test_the_app_state_is_the_fold_of_the_replica_states(
    sched: LsfScheduler, local: FakeHost, stats: list[str], expected: int
) -> None:
    """status.fold: an app is terminal only when every replica is."""
    job = await submit(sched, make_app("w", {"worker": len(stats)}))
    rows = [bjobs_row(4200 + k, job.app_id, f"worker-{k}", *s.split()) for k, s in enumerate(stats)]
    local.reply("bjobs", Reply("".join(rows).encode()))
    local.reply("bkill", Reply())
    status = await describe(sched, job)
    assert status is not None and status.state == expected


# -- fail-fast (defect 2 of issue 7) ------------------------------------------------------------


def fail_rows(app_id: str, survivor: str = "RUN", code: str = "-") -> Reply:
    """worker-0 exited 1; worker-1 is in state `survivor`."""
    rows = bjobs_row(4120, app_id, "worker-0", "EXIT", "1")
    return Reply((rows + bjobs_row(4121, app_id, "worker-1", survivor, code)).encode())


async def test_a_failed_replica_ends_the_app_only_once_the_survivors_are_stopped(
    sched: LsfScheduler, local: FakeHost
) -> None:
    """LSF fails fast, as in TorchX: one failed replica ends the app, so the scheduler bkills the
    others. The app stays live until they have ended: a terminal app has nothing running."""
    job = await submit(sched, make_app("fail", APPS["fail"]))
    local.reply(
        "bjobs", fail_rows(job.app_id), fail_rows(job.app_id), fail_rows(job.app_id, "EXIT", "130")
    )
    local.reply("bkill", Reply(b"Job <4121> is being terminated\n"))

    status = await describe(sched, job)
    assert status is not None and status.state == AppState.RUNNING
    r = replicas(status)
    assert (r["worker/0"].state, r["worker/0"].exit_code) == (AppState.FAILED, 1)
    assert r["worker/1"].state == AppState.RUNNING
    assert local.argvs("bkill") == [("bkill", "4121")]
    assert status.msg == "worker/0 exited with 1, stopping the other replicas"

    status = await describe(sched, job)  # still dying: not bkilled again
    assert status is not None and status.state == AppState.RUNNING
    assert len(local.argvs("bkill")) == 1

    status = await describe(sched, job)
    assert status is not None and status.state == AppState.FAILED
    assert replicas(status)["worker/1"].state == AppState.CANCELLED  # exit code 130: bkilled
    assert status.msg == "worker/0 exited with 1"


async def test_a_refused_fail_fast_bkill_is_tried_again_at_the_next_poll(
    sched: LsfScheduler, local: FakeHost
) -> None:
    job = await submit(sched, make_app("fail", APPS["fail"]))
    local.reply("bjobs", fail_rows(job.app_id))
    refused = Reply(stderr=recorded("bkill_denied.stderr"), returncode=255)
    local.reply("bkill", refused, Reply(b"Job <4121> is being terminated\n"))
    for _ in range(3):
        status = await describe(sched, job)  # the status is reported all the same
        assert status is not None and status.state == AppState.RUNNING
    assert len(local.argvs("bkill")) == 2


async def test_cancel_of_an_app_with_a_failed_replica_still_bkills_the_others(
    sched: LsfScheduler, local: FakeHost
) -> None:
    """The failed replica made the old fold report FAILED, after which cancel did nothing."""
    job = await submit(sched, make_app("fail", APPS["fail"]))
    local.reply("bjobs", fail_rows(job.app_id, "PEND"))
    local.reply("bkill", Reply(b"Job <4121> is being terminated\n"))
    status = await describe(sched, job)
    assert status is not None and not is_terminal(status.state)
    await sched.cancel(job)
    assert local.argvs("bkill") == [("bkill", "4121"), ("bkill", "4121")]


# -- logs ---------------------------------------------------------------------------------------

JOBDIR = "/shared/jobs"
# A follow that misses the end of its app would wait forever: fail fast instead.
FOLLOW_DEADLINE = 10


def logs(
    sched: LsfScheduler, job: Job, role: str, k: int, ended: asyncio.Event | None = None, **q: Any
) -> Any:
    """log_iter, with `ended` standing for the daemon's "this job is terminal"."""
    event = ended or asyncio.Event()

    async def until_ended() -> None:
        await event.wait()

    return sched.log_iter(job, role, k, LogQuery(**q), until_ended)


async def test_logs_need_a_jobdir(sched: LsfScheduler) -> None:
    job = await submit(sched, make_app("echo", APPS["echo"]))
    with pytest.raises(Unsupported, match=r"without a jobdir.*-c jobdir="):
        logs(sched, job, "hello", 0)
    with pytest.raises(NotFound):
        logs(sched, job, "hello", 1)
    with pytest.raises(NotFound):
        logs(sched, job, "bye", 0)


async def test_logs_read_the_jobdir_files_by_stream(sched: LsfScheduler, local: FakeHost) -> None:
    job = await submit(sched, make_app("echo", APPS["echo"]), jobdir=JOBDIR)
    out = f"{JOBDIR}/{job.app_id}-hello-0.out"
    err = f"{JOBDIR}/{job.app_id}-hello-0.err"
    local.files[out] = b"hello\r\nworld\n"
    local.files[err] = b"warning: x\nlast line without newline"

    def read(**query: Any) -> Any:
        return collect(logs(sched, job, "hello", 0, **query))

    assert await read(stream=Stream.STDOUT) == b"hello\r\nworld\n"
    assert await read(stream=Stream.STDERR) == b"warning: x\nlast line without newline"
    assert await read() == b"hello\r\nworld\nwarning: x\nlast line without newline"
    assert await read(regex="^w") == b"world\nwarning: x\n"
    assert ("cat", "--", out) in local.streams


@pytest.mark.parametrize("last_words", [b"line 2, written as the job ended\n", b""])
async def test_a_follow_ends_once_the_app_is_over_with_every_byte(
    sched: LsfScheduler, local: FakeHost, last_words: bytes
) -> None:
    job = await submit(sched, make_app("echo", APPS["echo"]), jobdir=JOBDIR)
    path = f"{JOBDIR}/{job.app_id}-hello-0.out"
    local.files[path] = b"line 1\n"
    ended = asyncio.Event()
    chunks = logs(sched, job, "hello", 0, ended, follow=True, stream=Stream.STDOUT)
    assert await anext(chunks) == b"line 1\n"
    local.files[path] += last_words
    ended.set()  # the daemon's status cache holds a terminal status (or LSF forgot the app)
    async with asyncio.timeout(FOLLOW_DEADLINE):
        assert await collect(chunks) == last_words
    # The rest, from where the follow stopped: after "line 1\n", or after last_words if the
    # follow (which starts where the first read ended) saw them before the end cut it.
    rests = {("tail", "-c", f"+{8 + n}", "--", path) for n in {0, len(last_words)}}
    assert rests & set(local.streams), local.streams
    assert local.argvs("bjobs") == []  # the end came from the daemon, not from asking LSF


async def test_a_follow_says_it_caught_up_only_once_it_has_every_byte_written(
    sched: LsfScheduler, local: FakeHost
) -> None:
    """An empty chunk says "caught up" (Scheduler.log_iter, rule 7): the daemon shows a tail's
    lines then. It comes after what was written so far, never in the middle of a burst."""
    job = await submit(sched, make_app("echo", APPS["echo"]), jobdir=JOBDIR)
    path = f"{JOBDIR}/{job.app_id}-hello-0.out"
    local.files[path] = b"line 1\n"
    chunks = logs(sched, job, "hello", 0, follow=True, stream=Stream.STDOUT)  # the job runs on
    burst = b"x" * (2 * CHUNK) + b"end\n"
    async with asyncio.timeout(FOLLOW_DEADLINE):
        assert await anext(chunks) == b"line 1\n"
        assert await anext(chunks) == b""
        local.write(path, burst)  # tail reads it as two full chunks and the rest
        got = [await anext(chunks) for _ in range(3)]
        assert got == [burst[:CHUNK], burst[CHUNK : 2 * CHUNK], b"end\n"]
        assert await anext(chunks) == b""
    await chunks.aclose()


# -- restart, lifecycle -------------------------------------------------------------------------


async def test_a_new_scheduler_answers_from_the_persisted_job_alone(
    hosts: FakeHosts, local: FakeHost
) -> None:
    """Stateless per job: a scheduler of a restarted daemon, given the Job as the daemon
    persisted it, describes, cancels and reads logs as the one that submitted it."""
    login1 = cluster(hosts, LOGIN1)
    before = LsfScheduler("test", hosts=hosts)
    job = await submit(
        before, make_app("ddp", APPS["ddp"]), jobdir=JOBDIR, ssh_host="login1", ssh_user="alice"
    )
    # hosts.target_to_native: the keys the hand-written dict of older versions had
    assert job.native["ssh"] == {"host": "login1", "user": "alice", "port": None, "key": None}
    login1.reply("bjobs", Reply(recorded("bjobs_apps.stdout")))
    login1.reply("bkill", Reply(recorded("bkill_terminated.stdout")))
    seen = await describe(before, job)

    after = LsfScheduler("test", hosts=hosts)  # a new daemon
    status = await describe(after, job)
    assert status == seen
    assert status is not None and status.state == AppState.RUNNING
    assert local.argvs("bjobs") == []  # asked where the app lives
    login1.files[f"{JOBDIR}/{job.app_id}-trainer-1.err"] = b"oops\n"
    stderr = logs(after, job, "trainer", 1, stream=Stream.STDERR)
    assert await collect(stderr) == b"oops\n"
    await after.cancel(job)
    assert login1.argvs("bkill") == [("bkill", "4101", "4102")]


async def test_the_scheduler_as_the_daemon_builds_it(tmp_path: Any) -> None:
    sched = create_scheduler("sess", state_dir=tmp_path)
    assert isinstance(sched, LsfScheduler)
    assert sched.name == "lsf"
    assert not sched.pushes() and sched.settings.poll_interval == 1.0  # LSF cannot push
    tuned = create_scheduler("sess", state_dir=tmp_path, settings={"poll_interval": "0.25"})
    assert tuned.settings.poll_interval == 0.25
    caps = sched.capabilities
    assert caps.logs and caps.log_follow and caps.log_streams and caps.cancel and caps.list
    assert not caps.push_status and not caps.log_since_until and not caps.retries
    names = [o.name for o in sched.run_opts()]
    assert names[:4] == ["ssh_host", "ssh_user", "ssh_port", "ssh_key"]
    assert names[4:] == [
        "lsf_queue",
        "jobdir",
        "container_workdir",
        "host_network",
        "shm_size",
        "precheck",
    ]
    assert {o.name: o.default.str for o in sched.run_opts()}["shm_size"] == "64m"
    await sched.aclose()
    await sched.aclose()  # twice is fine


async def test_aclose_closes_the_hosts(sched: LsfScheduler, hosts: FakeHosts) -> None:
    login1 = cluster(hosts, LOGIN1)
    await sched.aclose()
    assert login1.closed
