"""hpc.slurm_precheck's reading of what the probe printed, on output recorded from the test
cluster (Slurm 22.05.8): no cluster needed."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import pytest
from txd.schedulers.errors import InvalidArgument
from txd.schedulers.hpc.precheck import FAIL, OK, SKIP, Check, ProbeScript, refuse_failed
from txd.schedulers.hpc.slurm_precheck import Target, evaluate, knows, probe
from txd.schedulers.hpc.slurm_script import SlurmOpts, time_minutes
from txd.v1 import AppDef, Resource, Role

PARTITIONS = (
    "PartitionName=debug AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL "
    "Default=YES QoS=N/A DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 "
    "Hidden=NO MaxNodes=UNLIMITED MaxTime=UNLIMITED MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED "
    "Nodes=n[1-4] PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO "
    "OverTimeLimit=NONE PreemptMode=OFF State=UP TotalCPUs=16 TotalNodes=4 "
    "SelectTypeParameters=NONE JobDefaults=(null) DefMemPerNode=UNLIMITED "
    "MaxMemPerNode=UNLIMITED TRES=cpu=16,mem=16000M,node=4,billing=16\n"
    "PartitionName=short AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL "
    "Default=NO QoS=N/A DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 "
    "Hidden=NO MaxNodes=1 MaxTime=00:05:00 MinNodes=1 LLN=NO MaxCPUsPerNode=UNLIMITED "
    "Nodes=n[1-2] PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO "
    "OverTimeLimit=NONE PreemptMode=OFF State=UP TotalCPUs=8 TotalNodes=2 "
    "SelectTypeParameters=NONE JobDefaults=(null) DefMemPerNode=UNLIMITED "
    "MaxMemPerNode=UNLIMITED TRES=cpu=8,mem=8000M,node=2,billing=8"
)
NODE_CONFIG = "allocation failure: Requested node configuration is not available"


def target(cpu: int = 1, replicas: int = 1, **opts: str) -> Target:
    role = Role(
        name="trainer",
        entrypoint="python",
        num_replicas=replicas,
        resource=Resource(cpu=cpu, mem_mb=100),
        env={"TORCHX_JOB_ID": "x"},
    )
    app = AppDef(name="a", roles=[role])
    return Target(app, SlurmOpts(**opts), "/jobs", "cfg.job_dir", "#!/bin/bash\n", False, False)


def sections(nodes: str = "debug|4|4000|4|idle\nshort|4|4000|2|idle", testonly: str = "") -> dict:
    return {
        "logdir": (0, "ok /jobs is writable"),
        "entry0": (0, "ok python is /usr/bin/python (on the job's PATH)"),
        "partitions": (0, PARTITIONS),
        "nodes": (0, nodes),
        "testonly": (1, testonly) if testonly else (0, "sbatch: Job 3 to start at ..."),
    }


def by_field(checks: list[Check]) -> dict[str, Check]:
    return {c.field: c for c in checks}


def test_a_good_request_passes_every_check() -> None:
    checks = evaluate(target(), sections())
    assert [c.outcome for c in checks] == [OK] * len(checks), checks
    assert [c.field for c in checks] == [
        "cfg.job_dir",
        "role trainer: entrypoint",
        "cfg.partition",
        "cfg.time",
        "app: replicas",
        "role trainer: resource",
        "sbatch --test-only",
    ]
    refuse_failed(checks, "this host")  # nothing failed: no refusal


def test_limits_slurm_would_accept_and_hold_for_good_fail() -> None:
    checks = by_field(evaluate(target(partition="short", time="1-0"), sections()))
    assert checks["cfg.time"].outcome == FAIL
    assert "1-0 (1440 min) is over partition short's MaxTime=00:05:00 (5 min)" in (
        checks["cfg.time"].detail
    )
    checks = by_field(evaluate(target(replicas=5), sections()))
    assert checks["app: replicas"].outcome == FAIL
    checks = by_field(evaluate(target(cpu=8), sections()))
    assert checks["role trainer: resource"].outcome == FAIL


def test_sbatch_test_only_refusals_name_their_option() -> None:
    said = "sbatch: error: Batch job submission failed: Invalid qos specification"
    checks = by_field(evaluate(target(qos="gold"), sections(testonly=said)))
    assert checks["cfg.qos"].outcome == FAIL
    said = "sbatch: error: Batch job submission failed: Invalid account or account/partition"
    assert "cfg.account" in by_field(evaluate(target(), sections(testonly=said)))


def test_node_configuration_refusals_are_trusted_only_once_the_nodes_registered() -> None:
    """Right after slurmctld starts, its nodes are `unknown` and --test-only refuses every
    request with NODE_CONFIG (seen on the test cluster), though the job would run."""
    early = evaluate(target(), sections("debug|4|4000|4|unknown", NODE_CONFIG))
    assert early[-1].outcome == SKIP and "some of debug's are unknown" in early[-1].detail
    refuse_failed(early, "this host")
    settled = evaluate(target(), sections("debug|4|4000|4|idle", NODE_CONFIG))
    assert (settled[-1].field, settled[-1].outcome) == ("app: resources", FAIL)
    with pytest.raises(InvalidArgument) as e:
        refuse_failed(settled, "this host")
    assert e.value.field == "app: resources"


def test_an_unknown_partition_is_named() -> None:
    checks = evaluate(target(partition="gpu"), sections())
    assert by_field(checks)["cfg.partition"].detail == "no partition gpu (there are: debug, short)"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("10", 10.0),
        ("5:30", 5.5),
        ("1:00:00", 60.0),
        ("2-0", 2880.0),
        ("1-1:30", 1530.0),
        ("1-2:3:4", 1563 + 4 / 60),
        ("00:05:00", 5.0),
        ("UNLIMITED", math.inf),
        ("INFINITE", math.inf),
        ("unlimited", math.inf),
        ("Infinite", math.inf),
        ("-1", math.inf),
        ("0", math.inf),  # man sbatch: "A time limit of zero requests that no time limit"
        ("0:00:00", math.inf),
        ("soon", None),
        ("1:2:3:4", None),
        (" 5", None),
        ("5\n", None),
        ("1-2-3", None),
        ("+5", None),
        ("\u0665", None),  # a digit to Python, not to sbatch
    ],
)
def test_slurm_times_in_minutes(text: str, value: float | None) -> None:
    """What sbatch --time takes (checked with sbatch --test-only on Slurm 22.05.8) and what it
    refuses (Invalid --time specification)."""
    assert time_minutes(text) == value


@pytest.mark.parametrize("time", ["UNLIMITED", "infinite", "-1", "0"])
def test_no_limit_is_over_a_finite_max_time_and_within_an_unlimited_one(time: str) -> None:
    """Slurm holds such a job pending for good on a partition with a MaxTime (Reason
    PartitionTimeLimit, seen on the test cluster), and runs it on one without."""
    checks = by_field(evaluate(target(partition="short", time=time), sections()))
    assert checks["cfg.time"].outcome == FAIL
    assert checks["cfg.time"].detail.startswith(f"{time} (no limit) is over partition short's")
    checks = by_field(evaluate(target(time=time), sections()))
    assert (checks["cfg.time"].outcome, checks["cfg.time"].detail) == (
        OK,
        f"{time} is within MaxTime=UNLIMITED",
    )


def test_probe_sections_cannot_be_forged_by_a_commands_output() -> None:
    probe = ProbeScript()
    fake = "@txd-precheck-0000000000000000 testonly 0"
    out = f"{probe.mark} a 0\nline\n{fake}\n{probe.mark} b 3\n\n"
    assert probe.sections(out) == {"a": (0, f"line\n{fake}"), "b": (3, "")}


def test_known_partitions_are_not_asked_again() -> None:
    """Within PARTITIONS_TTL a host's probe reuses the partitions read before, unless the job
    names one they do not describe."""
    assert "scontrol show partition" in probe(target()).text
    assert "scontrol show partition" not in probe(target(), partitions=False).text
    assert "sbatch --test-only" in probe(target(), partitions=False).text
    read = (0, PARTITIONS)
    assert knows(read, SlurmOpts()) and knows(read, SlurmOpts(partition="short"))
    assert not knows(read, SlurmOpts(partition="gpu"))
    assert not knows((1, "slurm_load_partitions: Unable to contact slurm controller"), SlurmOpts())


@pytest.mark.parametrize("relative", [False, True])
def test_a_missing_job_dir_is_judged_by_its_nearest_parent_with_no_coreutils(
    tmp_path: Path, relative: bool
) -> None:
    """The probe climbs to the nearest existing parent in the shell itself: with dirname(1)
    missing (a caller's PATH holding no coreutils) it once looped for good, and a dry run
    hung until command_timeout."""
    (tmp_path / "bin").mkdir()  # the PATH: empty
    (tmp_path / "exists").mkdir()
    missing = "exists/a/b/" if relative else f"{tmp_path}/exists/a/b/"
    p = ProbeScript()
    p.step("logdir", f"logdir {missing} 0")
    res = subprocess.run(
        ["/bin/bash", "-s"],
        input=p.text,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": str(tmp_path / "bin")},
        timeout=10,
    )
    _, said = p.sections(res.stdout)["logdir"]
    parent = "exists" if relative else f"{tmp_path}/exists"
    # mktemp is missing too, so the parent cannot be probed: what matters is the answer.
    last = said.splitlines()[-1]  # what probe_result reads
    assert last.startswith(f"fail {missing} does not exist and cannot be created in {parent}:")
