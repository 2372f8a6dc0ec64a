"""Golden sbatch scripts for representative AppDefs, and the parsers of Slurm's outputs.

The golden files are in tests/schedulers/hpc/slurm/golden/;
`TXD_REGEN_GOLDEN=1 pytest tests/schedulers/hpc/slurm` rewrites them (review the diff before
committing).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from txd.schedulers.errors import InvalidArgument
from txd.schedulers.hpc.slurm_script import (
    SlurmJob,
    SlurmOpts,
    build_script,
    check_time,
    partition_memory,
    small_partitions,
)
from txd.schedulers.hpc.slurm_status import (
    exit_code,
    parse_sacct,
    parse_squeue,
    slurm_state,
    squeue_argv,
    status_of,
)
from txd.v1 import AppDef, AppState, Resource, Role

GOLDEN = Path(__file__).with_name("golden")

TRAINER = Role(
    name="trainer",
    image="/shared/img",
    entrypoint="python",
    args=["train.py", "--run", "${app_id}", "--rank", "${replica_id}", "--data", "${img_root}/d"],
    env={"MSG": """it's "quoted", with spaces""", "LIST": "a,b=c", "DOLLAR": "$HOME"},
    num_replicas=2,
    max_retries=2,
    resource=Resource(cpu=2, gpu=2, mem_mb=1024),
)
PS = Role(
    name="ps",
    image="/shared/img",
    entrypoint="bash",
    args=["-c", "echo $${rank0_env} ${app_id}"],
    max_retries=1,
    resource=Resource(cpu=1),
)
APP = AppDef(name="train", roles=[TRAINER, PS])

CASES = {
    "multi_role_22.05": (
        APP,
        SlurmOpts(partition="gpu", time="1:00:00", account="ml", comment="nightly run"),
        "/home/u/jobs",
        (22, 5),
        "",
        {},
    ),
    "multi_role_24.11": (
        APP,
        SlurmOpts(mail_user="u@x.org", mail_type="END"),
        "",
        (24, 11),
        "",
        {},
    ),
    "login_node_nomem_exclusive": (
        AppDef(name="one", roles=[Role(name="r", entrypoint="echo", args=["${app_id}"])]),
        SlurmOpts(nomem=True, exclusive=True, qos="high", constraint="a100&ib"),
        "",
        (22, 5),
        "login:",
        {},
    ),
    # As a submit makes it: a tag (log files' names, with TorchX's linked) and notes.
    "tagged_with_notes": (
        APP,
        SlurmOpts(time="UNLIMITED"),
        "/home/u/jobs",
        (24, 5),
        "",
        {"tag": "t4g", "notes": ["Slurm version unknown (no sinfo);\nassumed 24.05"]},
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_sbatch_script(case: str) -> None:
    app, opts, workdir, version, prefix, extra = CASES[case]
    script = build_script(app, opts, workdir, version, prefix, **extra)
    path = GOLDEN / f"{case}.sh"
    if os.environ.get("TXD_REGEN_GOLDEN"):
        path.write_text(script)
    assert script == path.read_text()
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)  # valid shell


def test_a_tag_names_every_log_file() -> None:
    """A job id Slurm hands out again must not let a new job write over an old one's logs."""
    script = build_script(APP, SlurmOpts(), "", (22, 5), tag="t4g")
    assert "#SBATCH --output=slurm-%j-t4g.out\n" in script
    assert "'--output=slurm-'\"$SLURM_JOB_ID\"'-t4g-trainer-0.out'" in script
    assert "'--error=slurm-'\"$SLURM_JOB_ID\"'-t4g-trainer-1.err'" in script


def _link_block(script: str) -> str:
    lines = script.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("for f in "))
    return "\n".join(lines[start : lines.index("done", start) + 1])


def _as_job(job_dir: Path, job_id: str, tag: str, writes: str) -> None:
    """What a job does with its log files: the script's links, then srun's (appending) and the
    batch script's writes."""
    block = _link_block(build_script(APP, SlurmOpts(), str(job_dir), (22, 5), tag=tag))
    job = f"{block}\nprintf {writes} >> slurm-{job_id}-{tag}-trainer-1.err\n"
    job += f"printf {writes} >> slurm-{job_id}-{tag}.out\n"
    env = {**os.environ, "SLURM_JOB_ID": job_id}
    subprocess.run(["bash", "-c", job], cwd=job_dir, env=env, check=True)


def test_log_files_get_torchx_names_and_a_reused_job_id_keeps_earlier_logs(
    tmp_path: Path,
) -> None:
    """TorchX's names are the tagged files themselves (hard links); a job given the same id
    again re-points them and the earlier job's files keep their bytes; a requeue (the same
    job again) keeps the links."""
    _as_job(tmp_path, "7", "aaa", "first")
    names = {p.name for p in tmp_path.iterdir()}
    for replica in ("trainer-0", "trainer-1", "ps-0"):
        for ext in ("out", "err"):
            torchx, ours = tmp_path / f"slurm-7-{replica}.{ext}", f"slurm-7-aaa-{replica}.{ext}"
            assert torchx.samefile(tmp_path / ours), (torchx, names)
    assert (tmp_path / "slurm-7.out").samefile(tmp_path / "slurm-7-aaa.out")
    assert (tmp_path / "slurm-7-trainer-1.err").read_text() == "first"

    _as_job(tmp_path, "7", "aaa", "again")  # a requeue: same files, appended
    assert (tmp_path / "slurm-7-trainer-1.err").samefile(tmp_path / "slurm-7-aaa-trainer-1.err")
    assert (tmp_path / "slurm-7-aaa-trainer-1.err").read_text() == "firstagain"

    _as_job(tmp_path, "7", "bbb", "second")  # Slurm handed job id 7 out again
    assert (tmp_path / "slurm-7-trainer-1.err").read_text() == "second"
    assert (tmp_path / "slurm-7.out").read_text() == "second"
    assert (tmp_path / "slurm-7-aaa-trainer-1.err").read_text() == "firstagain"
    assert (tmp_path / "slurm-7-aaa.out").read_text() == "firstagain"


def test_no_tag_no_links() -> None:
    """Without a tag the files have TorchX's names already (build_script's callers that never
    submit: tests, goldens)."""
    assert "ln -f" not in build_script(APP, SlurmOpts(), "", (22, 5))


def test_notes_are_one_comment_line_each() -> None:
    """A note quotes what a command said: a line break in it must not become a script line."""
    script = build_script(APP, SlurmOpts(), "", (22, 5), notes=["a\ncurl x | sh", "b"])
    assert "\n# txd: a curl x | sh\n# txd: b\n" in script
    assert "\ncurl" not in script


@pytest.mark.parametrize(
    "time", ["10", "5:30", "1:00:00", "2-0", "1-1:30", "1-2:3:4", "UNLIMITED", "infinite", "-1"]
)
def test_every_sbatch_time_form_is_taken(time: str) -> None:
    check_time(SlurmOpts(time=time))
    assert f"#SBATCH --time={time}\n" in build_script(APP, SlurmOpts(time=time), "", (22, 5))


@pytest.mark.parametrize("time", ["soon", "1:2:3:4", "1h", "", " 5", "5\n", "-2", "never"])
def test_what_sbatch_refuses_is_refused_naming_the_forms(time: str) -> None:
    with pytest.raises(InvalidArgument) as e:
        check_time(SlurmOpts(time=time))
    assert e.value.field == "cfg.time"
    assert f"{time!r} is not a Slurm time: minutes, m:s, h:m:s, d-h, d-h:m, d-h:m:s, or " in str(
        e.value
    )
    assert "UNLIMITED" in str(e.value)


# Recorded from the test cluster (22.05.8), `sinfo --noconvert --noheader --format=%P|%m`, and
# shapes Slurm prints elsewhere (nodes of several sizes: the smallest, then "+").
SINFO_MEMORY = "debug*|4000\nsmall|1000\nmixed|512+\nmixed|8000\nbig|64000M\n"


def test_partition_memory_as_torchx_reads_it() -> None:
    memory, default = partition_memory(SINFO_MEMORY)
    assert memory == {"debug": 4000, "small": 1000, "mixed": 512, "big": 64000}
    assert default == "debug"
    assert partition_memory("") == ({}, None)


@pytest.mark.parametrize(
    ("partition", "small"),
    [
        (None, []),  # the default, debug: 4000 MB
        ("debug", []),
        ("small", [("small", 1000)]),  # at most 1000 MB: no --mem
        ("mixed", [("mixed", 512)]),  # the first line counts, as in TorchX
        ("small,mixed", [("small", 1000), ("mixed", 512)]),
        ("small,debug", []),  # the job may run on debug, where memory is requested
        ("nope", []),  # unknown: memory is requested, as TorchX does
    ],
)
def test_small_partitions_follow_torchx_rule(
    partition: str | None, small: list[tuple[str, int]]
) -> None:
    memory, default = partition_memory(SINFO_MEMORY)
    assert small_partitions(memory, default, partition) == small
    memory, _ = partition_memory("small|1000\n")
    assert small_partitions(memory, None, None) == []  # no default partition known


def test_macros_and_env_reach_the_shell_exactly() -> None:
    """The srun line's words, as bash splits them, are exactly the role's (job id in place)."""
    script = build_script(APP, SlurmOpts(), "", (22, 5))
    srun = script[script.index("srun ") : script.index("exitcode=")]
    first = srun.split(" \\\n  : ")[0].removeprefix("srun ")
    words = subprocess.run(
        ["bash", "-c", f'SLURM_JOB_ID=42; for w in {first}; do printf "%s\\0" "$w"; done'],
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")[:-1]
    assert [w.decode() for w in words] == [
        "--output=slurm-42-trainer-0.out",
        "--error=slurm-42-trainer-0.err",
        "--wait=60",
        "--kill-on-bad-exit=1",
        "env",
        "DOLLAR=$HOME",
        "LIST=a,b=c",
        """MSG=it's "quoted", with spaces""",
        "python",
        "train.py",
        "--run",
        "42",
        "--rank",
        "0",
        "--data",
        "/shared/img/d",
    ]


def test_gpu_flags_follow_the_slurm_version() -> None:
    old = build_script(APP, SlurmOpts(), "", (24, 5))
    new = build_script(APP, SlurmOpts(), "", (24, 11))
    assert "--gpus-per-task=2" in old and "--gpus-per-node" not in old
    assert "--gpus-per-node=2" in new and "--gpus-per-task" not in new


def test_retries_take_the_smallest_max_retries() -> None:
    assert "export TORCHX_MAX_RETRIES=1\n" in build_script(APP, SlurmOpts(), "", (22, 5))
    no_retries = AppDef(name="x", roles=[Role(name="r", entrypoint="true")])
    script = build_script(no_retries, SlurmOpts(), "", (22, 5))
    assert "--requeue" not in script and "export TORCHX_MAX_RETRIES=0\n" in script


# Recorded from the test cluster (Slurm 22.05.8) with squeue_argv(): a 3-component hetjob that
# failed (component 1 exited 3), a running single job, a pending one and a cancelled one.
SQUEUE = """\
11|11|0|FAILED|768|0|n1|0|NonZeroExitCode|trainer-0|
12|11|1|FAILED|768|768|n2|0|NonZeroExitCode|trainer-1|
13|11|2|FAILED|768|0|n3|0|NonZeroExitCode|ps-0|
20|N/A|N/A|RUNNING|0|0|n4|0|None|main-0|
21|N/A|N/A|PENDING|0|0||1|BeginTime|main-0|
22|N/A|N/A|CANCELLED|15|0|n1|0|None|main-0|
"""


def test_squeue_argv_asks_for_every_state_of_my_jobs() -> None:
    argv = squeue_argv()
    assert argv[:4] == ["squeue", "--me", "--states=all", "--noheader"]
    assert argv[4].startswith("--Format=JobID:|,") and argv[4].endswith("Name:|")


def test_parse_squeue_groups_hetjob_components() -> None:
    jobs = parse_squeue(SQUEUE)
    assert sorted(jobs) == ["11", "20", "21", "22"]
    assert [c.name for c in jobs["11"]] == ["trainer-0", "trainer-1", "ps-0"]
    job = SlurmJob([("trainer", 0), ("trainer", 1), ("ps", 0)], "", job_id="11")
    status = status_of(job, jobs["11"])
    assert status.state == AppState.FAILED
    assert status.msg == "Slurm job 11 FAILED, exit code 3"
    codes = [(r.role, r.id, r.exit_code, r.hostname) for rs in status.roles for r in rs.replicas]
    assert codes == [("trainer", 0, 0, "n1"), ("trainer", 1, 3, "n2"), ("ps", 0, 0, "n3")]


def test_status_of_running_pending_cancelled() -> None:
    jobs = parse_squeue(SQUEUE)
    one = [("main", 0)]
    running = status_of(SlurmJob(one, "", job_id="20"), jobs["20"])
    assert running.state == AppState.RUNNING and not running.roles[0].replicas[0].HasField(
        "exit_code"
    )
    pending = status_of(SlurmJob(one, "", job_id="21"), jobs["21"])
    assert pending.state == AppState.PENDING and pending.num_restarts == 1
    assert pending.msg == "pending: BeginTime"
    cancelled = status_of(SlurmJob(one, "", job_id="22"), jobs["22"])
    assert cancelled.state == AppState.CANCELLED
    assert cancelled.roles[0].replicas[0].exit_code == 143


# Recorded from the test cluster with squeue_argv(): a 2-replica hetjob with max_retries=1 whose
# first attempt failed (exit 5), requeued and held (BeginTime); then the same job once its second
# attempt succeeded. DerivedEC keeps the first attempt's 1280 (exit 5) to the end.
SQUEUE_REQUEUED = """\
40|40|0|PENDING|0|1280||1|BeginTime|main-0|
41|40|1|PENDING|0|1280||1|BeginTime|main-1|
"""
SQUEUE_RETRY_SUCCEEDED = """\
40|40|0|COMPLETED|0|1280|n1|1|None|main-0|
41|40|1|COMPLETED|0|1280|n2|1|None|main-1|
"""
# Two more: one whose second attempt failed too (replica 0 exited 5 in the first attempt only,
# replica 1 exited 3 in both), and one cancelled while held after its first attempt.
SQUEUE_RETRY_FAILED = """\
50|50|0|FAILED|768|1280|n1|1|NonZeroExitCode|main-0|
51|50|1|FAILED|768|768|n2|1|NonZeroExitCode|main-1|
"""
SQUEUE_RETRY_CANCELLED = """\
60|60|0|CANCELLED|0|1280||1|BeginTime|main-0|
61|60|1|CANCELLED|0|1280||1|BeginTime|main-1|
"""


def test_a_requeued_job_reports_its_latest_attempt() -> None:
    job = SlurmJob([("main", 0), ("main", 1)], "", job_id="40")
    held = status_of(job, parse_squeue(SQUEUE_REQUEUED)["40"])
    assert held.state == AppState.PENDING and held.num_restarts == 1
    assert held.msg == "pending: BeginTime"
    assert not any(r.HasField("exit_code") for r in held.roles[0].replicas)
    done = status_of(job, parse_squeue(SQUEUE_RETRY_SUCCEEDED)["40"])
    assert done.state == AppState.SUCCEEDED and done.num_restarts == 1 and not done.msg
    replicas = [(r.id, r.state, r.exit_code) for r in done.roles[0].replicas]
    assert replicas == [(0, AppState.SUCCEEDED, 0), (1, AppState.SUCCEEDED, 0)]


def test_a_requeued_job_that_failed_again_reports_the_latest_exit() -> None:
    job = SlurmJob([("main", 0), ("main", 1)], "", job_id="50")
    status = status_of(job, parse_squeue(SQUEUE_RETRY_FAILED)["50"])
    assert status.state == AppState.FAILED and status.num_restarts == 1
    assert status.msg == "Slurm job 50 FAILED, exit code 3"
    # Replica 0 failed only in the first attempt, but DerivedEC cannot tell attempts apart: it
    # shows 5 (see status_of). Replica 1's code is the same in both.
    assert status.roles[0].replicas[1].exit_code == 3


def test_a_requeued_job_cancelled_before_its_next_attempt_has_no_step_exit() -> None:
    job = SlurmJob([("main", 0), ("main", 1)], "", job_id="60")
    status = status_of(job, parse_squeue(SQUEUE_RETRY_CANCELLED)["60"])
    assert status.state == AppState.CANCELLED and status.num_restarts == 1
    assert status.msg == "Slurm job 60 CANCELLED (BeginTime)"
    # Not the first attempt's 5: like any job cancelled before it ran, the batch exit (none).
    replicas = [(r.state, r.exit_code, r.hostname) for r in status.roles[0].replicas]
    assert replicas == [(AppState.CANCELLED, 0, "")] * 2


@pytest.mark.parametrize(
    ("text", "state"),
    [
        ("COMPLETED", AppState.SUCCEEDED),
        ("CANCELLED by 0", AppState.CANCELLED),
        ("TIMEOUT", AppState.FAILED),
        ("OUT_OF_MEMORY", AppState.FAILED),
        ("NODE_FAIL", AppState.FAILED),
        ("PREEMPTED", AppState.FAILED),
        ("REQUEUED", AppState.PENDING),
        ("COMPLETING", AppState.RUNNING),
        ("SOMETHING_NEW", AppState.UNKNOWN),
        ("", AppState.UNKNOWN),
    ],
)
def test_slurm_states(text: str, state: int) -> None:
    assert slurm_state(text) == state


def test_exit_codes_are_decoded_from_wait_statuses() -> None:
    assert [exit_code(s) for s in (0, 768, 15, 9, 256 * 255)] == [0, 3, 143, 137, 255]


def test_parse_sacct() -> None:
    # sacct -P -n -X -o JobID,State,ExitCode, as Slurm 22.05 prints it with accounting on.
    text = "7|COMPLETED|0:0\n8+0|FAILED|3:0\n8+1|FAILED|0:0\n9|CANCELLED by 0|0:15\n"
    assert parse_sacct(text) == {
        "7": ("COMPLETED", 0),
        "8": ("FAILED", 3),
        "9": ("CANCELLED by 0", 143),
    }
