"""Untrusted strings (tests/nasty.py's table) in what the schedulers build, offline: Slurm's
sbatch script run by a real bash with a stand-in srun that runs the command it is given (no
cluster), the Kubernetes pod specs, and the AWS Batch and SageMaker requests."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from k8s_apps import SHAPES, build
from nasty import NASTY, NASTY_DIR, NASTY_DIR_NEWLINE, PWNED, nasty_args, nasty_env
from sagemaker_apps import opts as sagemaker_opts
from sagemaker_apps import validate as sagemaker_validate
from txd.schedulers.api import SubmitContext
from txd.schedulers.aws import sagemaker_request as sr
from txd.schedulers.aws.batch_request import BatchOpts
from txd.schedulers.aws.batch_request import build as batch_build
from txd.schedulers.errors import InvalidArgument
from txd.schedulers.hpc.slurm import SlurmScheduler
from txd.schedulers.options import to_cfg_value
from txd.v1 import AppDef, Resource, Role

# Prints what the process was given, as ASCII JSON (one line: SageMaker takes no line break).
REPORT = (
    "import json, os, sys; print(json.dumps({'argv': sys.argv[1:],"
    " 'env': {k: v for k, v in os.environ.items() if k.startswith('NASTY_')}}))"
)
LINE_BREAKS = ("\n", "\r", "\x85", "\u2028", "\u2029")


def nasty_app(image: str = "", replicas: int = 1) -> AppDef:
    role = Role(
        name="r",
        image=image,
        entrypoint=sys.executable,
        args=["-c", REPORT, *nasty_args()],
        env=nasty_env(),
        num_replicas=replicas,
        resource=Resource(cpu=1, mem_mb=1024),
    )
    return AppDef(name="nasty", roles=[role])


def cfg(**values: Any) -> dict[str, Any]:
    return {k: to_cfg_value(v) for k, v in values.items()}


# -- slurm: the sbatch script through bash --------------------------------------------------

# Stand-in for srun: drops its own --options, then runs each heterogeneous component's command
# (split at srun's ":" arguments) as srun would on a node, so the command's argv and env are
# what bash and env(1) made of the script's words.
SRUN = """#!{python}
import subprocess, sys
groups, cur = [], []
for a in sys.argv[1:] + [":"]:
    if a == ":":
        groups.append(cur)
        cur = []
    elif cur or not a.startswith("--"):
        cur.append(a)
sys.exit(max(subprocess.run(g).returncode for g in groups))
"""


def _run_sbatch_script(script: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    srun = bin_dir / "srun"
    srun.write_text(SRUN.format(python=sys.executable))
    srun.chmod(srun.stat().st_mode | stat.S_IXUSR)
    return subprocess.run(
        ["/bin/bash", "-s"],
        input=script,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_ID": "4242"},
        timeout=60,
    )


async def test_slurm_script_runs_every_value_exactly(tmp_path: Path) -> None:
    workdir = tmp_path / NASTY_DIR
    workdir.mkdir()
    opts = cfg(comment=NASTY["subst"] + NASTY["single_quote"], mail_user="u@x.org")
    info = await SlurmScheduler("test").submit_dryrun(
        nasty_app(replicas=2), opts, SubmitContext(cwd=str(workdir), env={})
    )
    script = info.request.script
    directives = [line for line in script.splitlines() if line.startswith("#SBATCH ")]
    assert f"--chdir={workdir}" in [shlex.split(d)[1] for d in directives]
    proc = _run_sbatch_script(script, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    *reports, mark = proc.stdout.splitlines()
    assert mark == "txd: exit code 0", proc.stdout
    assert len(reports) == 2  # both components ran
    for line in reports:
        got = json.loads(line)
        assert got["argv"] == nasty_args()
        assert got["env"] == nasty_env()
    assert not os.path.exists(PWNED)


@pytest.mark.parametrize(
    ("opts", "cwd", "field"),
    [
        ({"comment": NASTY["newline"]}, "/tmp", "cfg.comment"),
        ({"mail_user": "a\rb"}, "/tmp", "cfg.mail_user"),
        ({"partition": "gpu\ntouch /tmp/txd-nasty-pwned #"}, "/tmp", "cfg.partition"),
        ({"job_dir": "/tmp/" + NASTY_DIR_NEWLINE}, "/tmp", "cfg.job_dir"),
        ({}, "/tmp/" + NASTY_DIR_NEWLINE, "cwd"),
    ],
)
async def test_slurm_refuses_a_line_break_in_a_directive(
    opts: dict[str, str], cwd: str, field: str
) -> None:
    """An #SBATCH line ends at a newline: what follows would be a line of the script itself."""
    with pytest.raises(InvalidArgument) as err:
        await SlurmScheduler("test").submit_dryrun(
            nasty_app(), cfg(**opts), SubmitContext(cwd=cwd, env={})
        )
    assert err.value.field == field
    assert "line break" in str(err.value)


# -- kubernetes: the pod specs ------------------------------------------------------------------


def kubelet_expand(text: str, env: dict[str, str]) -> str:
    """What Kubernetes makes of a command word or env value (its expansion package, as
    documented for EnvVar.value and Container.args): `$$` is `$`, `$(NAME)` is NAME's value
    when the container defines it (else left as it is), any other `$` stays."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c != "$" or i + 1 == len(text):
            out.append(c)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "(" and ")" in text[i + 2 :]:
            end = text.index(")", i + 2)
            name = text[i + 2 : end]
            out.append(env.get(name, f"$({name})"))
            i = end + 1
        else:
            out.append("$" + nxt if nxt != "(" else "$(")
            i += 2
    return "".join(out)


def _containers(obj: Any) -> list[dict[str, Any]]:
    if isinstance(obj, dict):
        if "containers" in obj:
            return list(obj["containers"])
        return [c for value in obj.values() for c in _containers(value)]
    if isinstance(obj, list):
        return [c for value in obj for c in _containers(value)]
    return []


@pytest.mark.parametrize("shape", SHAPES)
def test_kubernetes_containers_get_every_value_exactly(shape: str) -> None:
    app = nasty_app(image="ghcr.io/x/y:1", replicas=2)
    app.roles[0].args.append("rank ${replica_id}")
    containers = _containers(build(shape, app))
    assert len(containers) in (1, 2), containers  # one per replica, or one Indexed Job
    for container in containers:
        # Each env value a plain string (no shell), every name defined: the worst case for
        # $(NAME) expansion. The index Kubernetes gives an Indexed Job's pod: 1.
        defined = {e["name"]: e.get("value", "1") for e in container["env"]}
        env = {e["name"]: kubelet_expand(e["value"], defined) for e in container["env"]
               if "value" in e and e["name"].startswith("NASTY_")}  # fmt: skip
        assert env == nasty_env()
        command = [kubelet_expand(word, defined) for word in container["command"]]
        assert command[:-1] == [sys.executable, "-c", REPORT, *nasty_args()]
        assert command[-1] in ("rank 0", "rank 1")


# -- aws_batch and aws_sagemaker: the requests ----------------------------------------------------


@pytest.mark.parametrize("replicas", [1, 2])
def test_aws_batch_request_carries_every_value_exactly(replicas: int) -> None:
    """Batch runs the command in exec form (no shell): the request's lists must be the values."""
    req = batch_build(
        nasty_app(image="x.ecr/y:1", replicas=replicas), BatchOpts(queue="q"), session="s", user="u"
    )
    containers = [  # a multi-node job, one replica too
        n["container"] for n in req.job_definition["nodeProperties"]["nodeRangeProperties"]
    ]
    for container in containers:
        assert container["command"] == [sys.executable, "-c", REPORT, *nasty_args()]
        env = {e["name"]: e["value"] for e in container["environment"]}
        assert {k: v for k, v in env.items() if k.startswith("NASTY_")} == nasty_env()
    # and what is sent is JSON that reads back as the same values
    assert json.loads(json.dumps(req.job_definition)) == req.job_definition


def test_aws_sagemaker_request_carries_every_value_exactly() -> None:
    """Exec form too; but SageMaker's API refuses a line break in a command word (`.*`), so
    those values are refused by name, and the rest arrive exactly."""
    app = nasty_app(image="x.ecr/y:1")
    args = list(app.roles[0].args)
    one_line = [a for a in args if not any(b in a for b in LINE_BREAKS)]
    assert len(one_line) < len(args)  # the table has some
    for i, arg in enumerate(args):
        if arg not in one_line:
            with pytest.raises(InvalidArgument) as err:
                _sagemaker(app)
            assert err.value.field == f"app.roles[0].args[{i}]"
            assert "line break" in str(err.value)
            break
    del app.roles[0].args[:]
    app.roles[0].args.extend(one_line)
    job = _sagemaker(app)
    algo = job.request["AlgorithmSpecification"]
    assert algo["ContainerEntrypoint"] == [sys.executable]
    assert algo["ContainerArguments"] == one_line
    env = job.request["Environment"]
    assert {k: v for k, v in env.items() if k.startswith("NASTY_")} == nasty_env()
    sagemaker_validate(job.request)  # SageMaker's service model takes every value as it is


def _sagemaker(app: AppDef) -> sr.TrainingJob:
    return sr.training_job(
        app, sagemaker_opts(instance_type="ml.m5.xlarge"), session="s", name="nasty-1"
    )
