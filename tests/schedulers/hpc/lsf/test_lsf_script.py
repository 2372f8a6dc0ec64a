"""The bsub script: golden files for representative apps, and a run of the script through a
real bash with stand-ins for bsub and docker, which shows that every value reaches docker
exactly as written (quotes, spaces, `$`, backslashes, newlines).

Regenerate the golden files with `TXD_REGEN_GOLDEN=1 pytest tests/schedulers/hpc/lsf`, then
review the diff.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lsf_fakes
import nasty
import pytest
from txd.schedulers.api import SubmitContext
from txd.schedulers.errors import FailedPrecondition, InvalidArgument
from txd.schedulers.hpc.hosts import LocalHost, Result, SshTarget
from txd.schedulers.hpc.lsf import LsfScheduler
from txd.schedulers.options import to_cfg_value
from txd.v1 import AppDef, BindMount, DeviceMount, Mount, Resource, Role, VolumeMount

GOLDEN = Path(__file__).with_name("golden")
CTX = SubmitContext(cwd="/home/alice", env={})

# Values a shell would mangle if any layer quoted them wrongly.
TRICKY_ENV = {
    "QUOTES": 'say "hi" it\'s',
    "SPACES": "a  b   c ",
    "DOLLARS": "$HOME ${USER} $(id -u) `id -g` $ end$",  # ($$ is the macro escape)
    "BACKSLASHES": "C:\\dir\\n \\\\ end\\",
    "LINES": "line one\nEOF\n# BSUB and EOF1 lines\nlast\n",
    "EMPTY": "",
}


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("TXD_REGEN_GOLDEN") == "1":
        path.write_text(text)
        return
    assert path.exists(), f"{path} is missing: run with TXD_REGEN_GOLDEN=1 to write it"
    assert text == path.read_text(), f"{path} differs (TXD_REGEN_GOLDEN=1 rewrites it)"


def cfg(**values: Any) -> dict[str, Any]:
    return {k: to_cfg_value(v) for k, v in values.items()}


def echo_app() -> AppDef:
    role = Role(
        name="hello",
        image="alpine:3.20",
        entrypoint="echo",
        args=["hello from ${app_id}", "replica ${replica_id}", "$HOSTNAME"],
        num_replicas=1,
    )
    return AppDef(name="echo", roles=[role])


def ddp_app() -> AppDef:
    trainer = Role(
        name="trainer",
        image="ghcr.io/acme/train:1.4",
        entrypoint="bash",
        args=[
            "-c",
            "torchrun --nnodes 2 --node_rank ${replica_id} "
            "--rdzv_endpoint $${${rank0_env}:=localhost}:29500 train.py --out /data/${app_id}",
        ],
        env={"TORCHX_JOB_ID": "lsf://test/${app_id}", "LOGLEVEL": "INFO", **TRICKY_ENV},
        num_replicas=2,
        resource=Resource(cpu=8, gpu=2, mem_mb=16384),
        port_map={"c10d": 29500, "tb": 6006},
        mounts=[
            Mount(bind=BindMount(src_path="/shared/data", dst_path="/data", read_only=True)),
            Mount(volume=VolumeMount(src="ckpt", dst_path="/ckpt")),
            Mount(device=DeviceMount(src_path="/dev/infiniband")),
        ],
    )
    ps = Role(
        name="Param.Server",
        image="ghcr.io/acme/ps:1.4",
        entrypoint="python",
        args=["-m", "ps", "--workers", "2"],
        num_replicas=1,
        resource=Resource(mem_mb=4096),
    )
    return AppDef(name="ddp", roles=[trainer, ps])


async def submitted_script(
    sched: LsfScheduler, host: lsf_fakes.FakeHost, app: AppDef, opts: dict[str, Any]
) -> str:
    """The script the submit of app runs on host (the rank-0 host picked from bhosts); the
    dry run's differs only in naming the placeholder where the host goes."""
    info = await sched.submit_dryrun(app, opts, CTX)
    await sched.schedule(info)
    [(_, script)] = [run for run in host.runs if run[0][0] == "/bin/bash"]
    assert script is not None
    return script.decode()


async def test_golden_single_replica_default_options(
    sched: LsfScheduler, local: lsf_fakes.FakeHost
) -> None:
    check_golden("echo_defaults", await submitted_script(sched, local, echo_app(), {}))


async def test_golden_two_roles_gpus_memory_mounts_jobdir_ssh(
    sched: LsfScheduler, hosts: lsf_fakes.FakeHosts
) -> None:
    opts = cfg(
        lsf_queue="gpu",
        jobdir="/shared/jobs",
        container_workdir="/workspace",
        shm_size="8g",
        ssh_host="login1",
        ssh_user="alice",
    )
    # bhosts runs where bsub will: on the login node
    login1 = hosts.put(SshTarget("login1", "alice"), _cluster_host())
    script = await submitted_script(sched, login1, ddp_app(), opts)
    check_golden("ddp_jobdir_gpus_ssh", script)


async def test_golden_host_network_without_shm_size(
    sched: LsfScheduler, local: lsf_fakes.FakeHost
) -> None:
    app = echo_app()
    app.roles[0].port_map["http"] = 8080  # not published: the host's network is used
    app.roles[0].num_replicas = 3
    app.roles[0].resource.cpu = 2
    opts = cfg(host_network=True, shm_size="")
    check_golden("echo_host_network", await submitted_script(sched, local, app, opts))


def _cluster_host() -> lsf_fakes.FakeHost:
    host = lsf_fakes.FakeHost("fake login1")
    host.reply("bhosts", lsf_fakes.Reply(lsf_fakes.recorded("bhosts.txt")))
    host.respond("/bin/bash", lsf_fakes.submitted)
    host.respond("bqueues", lsf_fakes.bqueues)
    host.respond("sh", lsf_fakes.shared_jobdirs)
    return host


# -- the script run by a real bash --------------------------------------------------------------

BSUB = """#!{python}
# Stand-in for bsub: keeps its arguments, then runs the job script it reads from stdin at once
# with /bin/sh in the -cwd directory, as LSF would run it on an execution host.
import json, os, subprocess, sys
d = os.environ["FAKE_LSF"]
n = 700 + len([f for f in os.listdir(d) if f.startswith("bsub.")])
json.dump(sys.argv[1:], open(f"{{d}}/bsub.{{n}}.json", "w"))
if str(n - 700 + 1) == os.environ.get("FAKE_LSF_REFUSE", ""):
    print("Bad resource requirement syntax. Job not submitted.", file=sys.stderr)
    sys.exit(255)
with open(f"{{d}}/job.{{n}}.sh", "w") as f:
    f.write(sys.stdin.read())
cwd = sys.argv[sys.argv.index("-cwd") + 1] if "-cwd" in sys.argv else d
subprocess.run(["/bin/sh", f"{{d}}/job.{{n}}.sh"], cwd=cwd, check=True)
print(f"Job <{{n}}> is submitted to queue <normal>.")
"""

DOCKER = """#!{python}
# Stand-in for docker: keeps its argv, by container name, and writes to stdout and stderr.
import json, os, sys
name = next(a for a in sys.argv if a.startswith("--name=")).split("=", 1)[1]
json.dump(sys.argv[1:], open(os.environ["FAKE_LSF"] + f"/docker.{{name}}.json", "w"))
print("out of", name)
print("err of", name, file=sys.stderr)
"""


class ShellHost(lsf_fakes.FakeHost):
    """Runs the submit script and the jobdir precheck with the real shells; everything else is
    fake."""

    async def _run(
        self, argv: tuple[str, ...], input: bytes | None, env: Mapping[str, str] | None = None
    ) -> Result:
        if argv[0] in ("/bin/bash", "sh"):
            self.runs.append((argv, input))
            return await LocalHost()._run(argv, input, env)
        return await super()._run(argv, input, env)


@pytest.fixture
def shims(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir, state = tmp_path / "bin", tmp_path / "lsf"
    bin_dir.mkdir()
    state.mkdir()
    for name, text in (("bsub", BSUB), ("docker", DOCKER)):
        path = bin_dir / name
        path.write_text(text.format(python=sys.executable))
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_LSF", str(state))
    return state


@pytest.fixture
def shell_sched(hosts: Any) -> LsfScheduler:
    host = hosts.put(None, ShellHost("this host, real bash"))
    host.reply("bhosts", lsf_fakes.Reply(lsf_fakes.recorded("bhosts.txt")))
    host.reply("bkill", lsf_fakes.Reply(b"Job <700> is being terminated\n"))
    host.respond("bqueues", lsf_fakes.bqueues)
    return LsfScheduler("test", hosts=hosts)


async def test_values_reach_docker_exactly(shims: Path, shell_sched: LsfScheduler) -> None:
    app = ddp_app()
    jobdir = shims.parent / "jobs dir"  # a space in the path, too
    info = await shell_sched.submit_dryrun(app, cfg(jobdir=str(jobdir), lsf_queue="gpu"), CTX)
    done = await shell_sched.schedule(info)
    app_id = done.app_id
    assert app_id == "ddp-bcdfghjklmnp"
    assert done.native["job_ids"] == ["700", "701", "702"]

    argv = json.loads((shims / "docker.ddp-bcdfghjklmnp-trainer-1.json").read_text())
    env = dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "-e")
    for key, value in TRICKY_ENV.items():
        assert env[key] == value, key
    assert env["TORCHX_JOB_ID"] == "lsf://test/ddp-bcdfghjklmnp"
    assert env["TORCHX_RANK0_HOST"] == "gpu-node-01"  # first host with 8 slots and 2 GPUs
    image_at = argv.index("ghcr.io/acme/train:1.4")
    assert argv[image_at + 1 :] == [
        "-c",
        "torchrun --nnodes 2 --node_rank 1 --rdzv_endpoint ${TORCHX_RANK0_HOST:=localhost}:29500 "
        "train.py --out /data/ddp-bcdfghjklmnp",
    ]
    assert argv[image_at - 3 : image_at] == ["--entrypoint", "bash", "--rm"]

    head = json.loads((shims / "bsub.700.json").read_text())
    assert head[:6] == ["-P", app_id, "-J", f"{app_id}-trainer-0", "-m", "gpu-node-01"]
    assert head[-4:-2] == ["-R", "span[hosts=1] rusage[mem=16384]"]
    assert head[-2:] == ["-gpu", "num=2:mode=shared:j_exclusive=yes"]
    second = json.loads((shims / "bsub.701.json").read_text())
    assert second[4:6] == ["-w", f'started("{app_id}-trainer-0")']
    assert second[6:8] == ["-R", "select[hname!='gpu-node-01']"]
    assert second[8:12] == ["-cwd", str(jobdir), "-outdir", str(jobdir)]
    ps = json.loads((shims / "bsub.702.json").read_text())
    assert ps[3] == f"{app_id}-paramserver-0"
    assert ps[-2:] == ["-R", "span[hosts=1] rusage[mem=4096]"]

    # the containers' output went to <jobdir>/<job>.out and .err
    assert (
        jobdir / f"{app_id}-paramserver-0.out"
    ).read_text() == f"out of {app_id}-paramserver-0\n"
    assert (jobdir / f"{app_id}-trainer-1.err").read_text() == f"err of {app_id}-trainer-1\n"


async def test_a_refused_bsub_stops_the_script_and_kills_what_started(
    shims: Path,
    shell_sched: LsfScheduler,
    hosts: lsf_fakes.FakeHosts,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAKE_LSF_REFUSE", "2")
    info = await shell_sched.submit_dryrun(ddp_app(), {}, CTX)
    with pytest.raises(FailedPrecondition) as err:
        await shell_sched.schedule(info)
    msg = str(err.value)
    assert "ddp-bcdfghjklmnp-trainer-1" in msg
    assert "Bad resource requirement syntax. Job not submitted." in msg
    assert "killed the 1 job(s) already submitted" in msg
    assert hosts.made[None].argvs("bkill") == [("bkill", "700")]
    assert not (shims / "bsub.702.json").exists()  # set -e: nothing after the refused bsub


async def test_nasty_values_reach_docker_exactly(shims: Path, shell_sched: LsfScheduler) -> None:
    """tests/nasty.py's table as args and env, and a job dir named with it, through the
    script, bash, the heredoc and the execution host's /bin/sh."""
    role = Role(
        name="r",
        image="img:1",
        entrypoint="python",
        args=nasty.nasty_args(),
        env=nasty.nasty_env(),
        num_replicas=2,
    )
    app = AppDef(name="nasty", roles=[role])
    jobdir = shims.parent / nasty.NASTY_DIR
    await shell_sched.schedule(await shell_sched.submit_dryrun(app, cfg(jobdir=str(jobdir)), CTX))
    runs = sorted(shims.glob("docker.*.json"))
    assert len(runs) == 2
    for run in runs:
        argv = json.loads(run.read_text())
        env = dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "-e")
        assert {k: v for k, v in env.items() if k.startswith("NASTY_")} == nasty.nasty_env()
        tail = ["--entrypoint", "python", "--rm", "img:1", *nasty.nasty_args()]
        assert argv[argv.index("img:1") - 3 :] == tail
    head = json.loads((shims / "bsub.700.json").read_text())
    assert head[head.index("-cwd") + 1] == str(jobdir)
    assert not os.path.exists(nasty.PWNED)
    # bsub's -cwd/-oo and the script's lines cannot hold a line break: refused, by name
    newline = cfg(jobdir=str(shims.parent / nasty.NASTY_DIR_NEWLINE))
    with pytest.raises(InvalidArgument) as err:
        await shell_sched.submit_dryrun(app, newline, CTX)
    assert err.value.field == "cfg.jobdir"
    assert "no line break" in str(err.value)
