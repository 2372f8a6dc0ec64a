"""txd.client.runner: code written against `torchx.runner.get_runner()` runs on txd with one
changed import, and gets TorchX's own objects back. Against a real daemon."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from txd import install
from txd.client import InvalidArgumentError
from txd_testing import clean_env, remove_tree, run_python, short_tmpdir, unique, wait_ended

specs = pytest.importorskip("torchx.specs")

# The seed page "Basic Concepts" (shared/seeds/004_...): its AppDef, component and Runner
# snippets as printed there, but for two lines: the import (`from torchx.runner import
# get_runner`) and the scheduler ("kubernetes" there; there is no Kubernetes here). The lines
# marked "added" glue the snippets into one program and print what the test checks.
SEED_PROGRAM = textwrap.dedent("""
    import torchx.specs as specs
    app = specs.AppDef(
        name="echo",
        roles=[
            specs.Role(
                name="echo",
                entrypoint="/bin/echo",
                image="/tmp",
                args=["hello world"],
            )
        ],
    )

    def ddp(name: str, nnodes: int, image: str, entrypoint: str, *args: str) -> specs.AppDef:
        return specs.AppDef(
            name=name,
            roles=[
                specs.Role(
                    name="trainer",
                    entrypoint=entrypoint,
                    image=image,
                    resource=specs.Resource(cpu=4, gpu=1, memMB=1024),
                    args=list(args),
                    num_replicas=nnodes,
                )
            ],
        )

    app = ddp("seedrunner", 2, "/tmp", "/bin/echo", "hello world")  # added: a "trainer" role

    from txd.client.runner import get_runner

    with get_runner() as runner:
        # Option 1: run a named component (same resolution as the CLI)
        app_handle = runner.run_component(
            "dist.ddp", ["--script", "train.py"], scheduler="local_cwd",
        )
        print("component", app_handle)  # added
        # Option 2: run an AppDef you built directly
        app_handle = runner.run(app, scheduler="local_cwd")

        # Monitor the job
        status = runner.status(app_handle) # poll current state
        final = runner.wait(app_handle)    # block until terminal
        runner.cancel(app_handle)          # request cancellation

        # Fetch logs for replica 0 of the "trainer" role
        for line in runner.log_lines(app_handle, "trainer", k=0):
            print(line, end="")
        print("status", type(status).__module__, status.state in specs.AppState)  # added
        ok = final.state == specs.AppState.SUCCEEDED  # added
        print("final", final.state, final.is_terminal(), ok)  # added
""")


def test_seed_runner_snippets(shared_daemon: Any, workdir: Path) -> None:
    proc = run_python(
        SEED_PROGRAM,
        env=shared_daemon.txctl_env(TXD_SOCKET=str(shared_daemon.socket)),
        cwd=workdir,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert re.fullmatch(r"component local_cwd://txd/train-[a-z0-9]+", lines[0])
    assert lines[1:] == [
        "hello world",
        "status torchx.specs.api True",
        "final SUCCEEDED True True",
    ]


@pytest.fixture
def runner(shared_daemon: Any, workdir: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    from txd.client.runner import Runner

    monkeypatch.chdir(workdir)  # local_cwd runs jobs in the caller's directory
    with Runner(socket=shared_daemon.socket) as r:
        yield r


def _trainer_app(name: str) -> Any:
    return specs.AppDef(
        name=name,
        roles=[
            specs.Role(
                name="trainer",
                image="/tmp",
                entrypoint="sh",
                args=["-c", f"echo one {specs.macros.replica_id}; echo two >&2; printf three"],
                num_replicas=2,
                min_replicas=1,
                max_retries=1,
                retry_policy=specs.RetryPolicy.REPLICA,
                resource=specs.resource(h="cpu.small"),
                port_map={"http": 8080},
                env={"A": "1"},
                mounts=[specs.BindMount(src_path="/tmp", dst_path="/t", read_only=True)],
            )
        ],
        metadata={"k": "v"},
    )


def test_runner_round_trip(runner: Any) -> None:
    app = _trainer_app(unique("rt"))
    handle = runner.run(app, scheduler="local_cwd")
    final = runner.wait(handle, wait_interval=0.1)
    assert isinstance(final, specs.AppStatus)
    assert final.state == specs.AppState.SUCCEEDED and str(final.state) == "SUCCEEDED"
    assert [r.role for r in final.roles] == ["trainer"]
    assert sorted(r.id for r in final.roles[0].replicas) == [0, 1]
    assert all(r.state == specs.AppState.SUCCEEDED for r in final.roles[0].replicas)
    final.raise_for_status()

    # describe gives the torchx AppDef back, equal to what was run, field by field (local_cwd
    # adds TORCHX_JOB_ID to every role's env)
    described = runner.describe(handle)
    assert isinstance(described, specs.AppDef)
    assert described.roles[0].env.pop("TORCHX_JOB_ID") == "local_cwd://txd/${app_id}"
    assert described == app

    # logs as TorchX gives them: lines with their newline, the last one maybe without
    from torchx.schedulers.api import Stream

    out = list(runner.log_lines(handle, "trainer", k=1, streams=Stream.STDOUT))
    assert out == ["one 1\n", "three"]
    assert list(runner.log_lines(handle, "trainer", k=0, streams=Stream.STDERR)) == ["two\n"]
    assert list(runner.log_lines(handle, "trainer", k=0, regex="^t", streams="stdout")) == ["three"]

    listed = [r for r in runner.list("local_cwd") if r.app_handle == handle]
    assert [(r.app_id, r.state) for r in listed] == [
        (handle.rsplit("/", 1)[1], specs.AppState.SUCCEEDED)
    ]
    assert "local_cwd" in runner.scheduler_backends()

    runner.delete(handle)
    assert runner.status(handle) is None
    assert runner.wait(handle) is None
    assert runner.describe(handle) is None
    runner.cancel(handle)  # unknown: nothing happens, as in TorchX
    runner.delete(handle)


def test_runner_log_lines_of_a_long_line(runner: Any) -> None:
    """A 2 MiB line with "needle" at its end: found by a pattern of bounded reach; missed by
    one whose match spans the line, and then a warning names the line (as txctl's stderr)."""
    line = "B" + "x" * (2 << 20) + "needle"
    code = "print('short'); print('B' + 'x' * (2 << 20) + 'needle', end='')"
    role = specs.Role(name="r", image="/tmp", entrypoint=sys.executable, args=["-c", code])
    app = specs.AppDef(name=unique("long"), roles=[role])
    handle = runner.run(app, scheduler="local_cwd")
    assert runner.wait(handle, wait_interval=0.1).state == specs.AppState.SUCCEEDED
    assert list(runner.log_lines(handle, "r", regex="xneedle$")) == [line]
    with pytest.warns(UserWarning, match=r"r/0: the line at byte 6 \(2097159 bytes\)"):
        assert list(runner.log_lines(handle, "r", regex="^B.*needle")) == []


def test_runner_cancel_and_dryrun(runner: Any) -> None:
    app = specs.AppDef(
        name=unique("rc"),
        roles=[specs.Role(name="s", image="/tmp", entrypoint="sleep", args=["60"])],
    )
    info = runner.dryrun(app, "local_cwd", cfg={"log_dir": "/tmp"})
    assert isinstance(info, specs.AppDryRunInfo)
    assert "sleep" in str(info) and info._app.roles[0].name == "s"
    handle = runner.run(app, "local_cwd")
    runner.cancel(handle)
    assert runner.wait(handle).state == specs.AppState.CANCELLED
    # TorchX's older name for cancel, with TorchX's warning
    handle = runner.run(app, "local_cwd")
    with pytest.warns(PendingDeprecationWarning, match="please use `cancel` instead"):
        runner.stop(handle)
    assert runner.wait(handle).state == specs.AppState.CANCELLED


def test_runner_components(runner: Any, workdir: Path) -> None:
    handle = runner.run_component("utils.echo", ["--msg", "from runner"], "local_cwd")
    assert runner.wait(handle).state == specs.AppState.SUCCEEDED
    assert list(runner.log_lines(handle, "echo")) == ["from runner\n"]
    info = runner.dryrun_component("utils.sh", ["echo", "hi"], "local_cwd")
    assert info._app.roles[0].args == ["-c", "echo hi"]
    with pytest.raises(TypeError, match="list of strings, not dict"):
        runner.run_component("utils.echo", {"msg": "x"}, "local_cwd")
    # A workspace goes to the daemon; local_cwd ignores it, a missing one is refused.
    runner.dryrun_component("utils.echo", [], "local_cwd", workspace=str(workdir))
    with pytest.raises(InvalidArgumentError, match=r"workspace: .* is not an existing directory"):
        runner.run_component("utils.echo", [], "local_cwd", workspace=str(workdir / "nope"))


def test_runner_hands_the_parent_run_and_trackers_to_the_job(
    runner: Any, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As TorchX's Runner: parent_run_id and the configured trackers reach every role's
    environment (TORCHX_PARENT_RUN_ID in the caller's environment wins)."""
    for name in [k for k in os.environ if k.startswith("TORCHX_")]:
        monkeypatch.delenv(name)
    (workdir / ".txdconfig").write_text(
        "[torchx:tracker]\nmine =\n\n[tracker:mine]\nconfig = m.cfg\n"
    )
    said = "echo $TORCHX_PARENT_RUN_ID $TORCHX_TRACKERS $TORCHX_TRACKER_MINE_CONFIG"
    role = specs.Role(name="r", image="/tmp", entrypoint="sh", args=["-c", said])
    app = specs.AppDef(name=unique("pr"), roles=[role])
    handle = runner.run(app, "local_cwd", parent_run_id="exp-3")
    assert runner.wait(handle).state == specs.AppState.SUCCEEDED
    assert list(runner.log_lines(handle, "r")) == ["exp-3 mine m.cfg\n"]
    assert "TORCHX_PARENT_RUN_ID" not in role.env  # the caller's AppDef is left as it was

    info = runner.dryrun_component("utils.echo", [], "local_cwd", parent_run_id="exp-4")
    assert info._app.roles[0].env["TORCHX_PARENT_RUN_ID"] == "exp-4"
    scheduled = runner.schedule(info)
    assert runner.describe(scheduled).roles[0].env["TORCHX_PARENT_RUN_ID"] == "exp-4"

    monkeypatch.setenv("TORCHX_PARENT_RUN_ID", "from-env")
    info = runner.dryrun(app, "local_cwd", parent_run_id="exp-5")
    assert info._app.roles[0].env["TORCHX_PARENT_RUN_ID"] == "from-env"


def test_runner_component_defaults(shared_daemon: Any, workdir: Path) -> None:
    from txd.client.runner import Runner

    with Runner(
        component_defaults={"utils.echo": {"msg": "configured"}}, socket=shared_daemon.socket
    ) as r:
        info = r.dryrun_component("utils.echo", [], "local_cwd")
    assert info._app.roles[0].args == ["configured"]


def test_get_runner_refuses_scheduler_params() -> None:
    from txd.client.runner import get_runner

    with pytest.raises(ValueError, match=r"scheduler parameters \(log_dir\) are set on the txd"):
        get_runner(log_dir="/tmp")


def test_runner_without_torchx_says_how_to_install() -> None:
    code = (
        # torchx is not installed, as far as this Python can tell
        "import sys\nsys.modules['torchx'] = None\n"
        "from txd.client.torchx_compat import TorchXError\n"
        "from txd.client.runner import get_runner\n"
        "try:\n    get_runner()\nexcept TorchXError as e:\n    print(e)\n"
    )
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (
        f"torchx is not installed in this Python ({install.command('torchx')})\n"
    )


# -- dryrun's request: TorchX's request type of each scheduler ---------------------------------


@pytest.fixture(scope="module")
def offline_runner() -> Any:
    """A Runner on a daemon of its own that reaches no backend: no kubeconfig, no Docker
    engine, no AWS endpoint (dry runs need none), for a dry run on every scheduler."""
    from txd.client.runner import Runner
    from txd_testing import Daemon, remove_tree, short_tmpdir

    root = short_tmpdir()
    d = Daemon(
        root,
        env={
            "KUBECONFIG": "/nonexistent/txd-tests/kubeconfig",
            "DOCKER_HOST": f"unix://{root}/no-docker.sock",
            "AWS_DEFAULT_REGION": "us-east-1",
        },
    ).start()
    try:
        with Runner(socket=d.socket) as r:
            yield r
    finally:
        d.close()
        remove_tree(root)


def _two_roles() -> Any:
    """Two roles, three replicas, env values holding ',' and '$', retries."""
    trainer = specs.Role(
        name="trainer",
        image="img:1",
        entrypoint="python",
        args=["-m", "train", "--x", "a b"],
        env={"A": "1,2", "B": "$x"},
        num_replicas=2,
        max_retries=2,
        resource=specs.Resource(cpu=2, gpu=0, memMB=2048),
    )
    ps = specs.Role(
        name="ps",
        image="img:1",
        entrypoint="echo",
        args=["ps"],
        max_retries=1,
        resource=specs.Resource(cpu=1, gpu=0, memMB=1024),
    )
    return specs.AppDef(name="two", roles=[trainer, ps])


def _one_role() -> Any:
    role = specs.Role(
        name="ps", image="img:1", entrypoint="echo", args=["ps"], resource=specs.resource(cpu=1)
    )
    return specs.AppDef(name="one", roles=[role])


def test_dryrun_kubernetes_request_is_torchx_kubernetes_job(offline_runner: Any) -> None:
    import yaml
    from torchx.schedulers.kubernetes_scheduler import KubernetesJob

    info = offline_runner.dryrun(_two_roles(), "kubernetes", cfg={"queue": "research"})
    req = info.request
    assert isinstance(req, KubernetesJob) and req.images_to_push == {}
    assert req.resource["spec"]["queue"] == "research"  # the issue's example
    assert (req.resource["apiVersion"], req.resource["kind"]) == (
        "batch.volcano.sh/v1alpha1",
        "Job",
    )
    tasks = req.resource["spec"]["tasks"]
    assert [t["name"] for t in tasks] == ["trainer-0", "trainer-1", "ps-0"]
    env = {e["name"]: e["value"] for e in tasks[0]["template"]["spec"]["containers"][0]["env"]}
    # txd's values: '$' doubled so that Kubernetes passes it as it is (TorchX's would expand)
    assert (env["A"], env["B"]) == ("1,2", "$$x")
    # printing the request needs no `kubernetes` package; it is the resource as YAML
    assert yaml.safe_load(str(req)) == req.resource
    # printing the info shows txd's request as the daemon renders it
    assert f"name: {req.resource['metadata']['name']}" in str(info)
    assert info._scheduler == "kubernetes" and info._cfg["queue"] == "research"
    assert info._app.roles[0].env["A"] == "1,2"


def test_dryrun_kubernetes_mcad_request(offline_runner: Any) -> None:
    from torchx.schedulers.kubernetes_mcad_scheduler import KubernetesMCADJob

    req = offline_runner.dryrun(_two_roles(), "kubernetes_mcad").request
    assert isinstance(req, KubernetesMCADJob)
    assert req.resource["kind"] == "AppWrapper"
    assert req.resource["apiVersion"].startswith("workload.codeflare.dev/")


def test_dryrun_slurm_request_is_torchx_slurm_batch_request(offline_runner: Any) -> None:
    from torchx.schedulers.slurm_scheduler import SlurmBatchRequest, SlurmReplicaRequest

    cfg = {"precheck": False, "mail-user": "me@example.org", "job_dir": "/tmp/jd"}
    info = offline_runner.dryrun(_two_roles(), "slurm", cfg=cfg)
    req = info.request
    assert isinstance(req, SlurmBatchRequest)
    assert list(req.replicas) == ["trainer-0", "trainer-1", "ps-0"]
    t1 = req.replicas["trainer-1"]
    assert isinstance(t1, SlurmReplicaRequest)
    assert (t1.name, t1.entrypoint, t1.args) == (
        "trainer-1",
        "python",
        ["-m", "train", "--x", "a b"],
    )
    assert t1.env["A"] == "1,2" and t1.env["B"] == "$x"
    assert t1.sbatch_opts["cpus-per-task"] == "2" and t1.sbatch_opts["mem"] == "2048"
    assert "requeue" in t1.sbatch_opts  # it has retries
    assert (t1.srun_opts["wait"], t1.srun_opts["kill-on-bad-exit"]) == ("60", "1")
    assert req.replicas["ps-0"].sbatch_opts["mem"] == "1024"
    assert req.cmd[:2] == ["sbatch", "--parsable"]
    assert "--mail-user=me@example.org" in req.cmd and "--chdir=/tmp/jd" in req.cmd
    assert (req.job_dir, req.max_retries) == ("/tmp/jd", 1)  # the fewest retries of a role
    # It is TorchX's own type: its methods work on it.
    assert "#SBATCH --job-name=ps-0 " in req.materialize()
    assert info._cfg["mail-user"] == "me@example.org" and "mail_user" not in info._cfg


def test_dryrun_lsf_request_is_torchx_lsf_bsub(offline_runner: Any) -> None:
    from torchx.schedulers.lsf_scheduler import LsfBsub

    info = offline_runner.dryrun(_two_roles(), "lsf", cfg={"precheck": False, "jobdir": "/j"})
    req = info.request
    assert isinstance(req, LsfBsub)
    assert f"bsub -P {req.app_id} " in str(info)
    assert (req.jobdir, req.cmd, req.app) == ("/j", ["/bin/bash"], info._app)
    assert info._cfg["shm_size"] == "64m"  # defaults filled, as TorchX's dry-run info holds


def test_dryrun_local_docker_request_is_torchx_docker_job(offline_runner: Any) -> None:
    from torchx.schedulers.docker_scheduler import DockerContainer, DockerJob

    req = offline_runner.dryrun(_two_roles(), "local_docker").request
    assert isinstance(req, DockerJob)
    assert len(req.containers) == 3 and all(isinstance(c, DockerContainer) for c in req.containers)
    c = req.containers[1]
    assert (c.image, c.command) == ("img:1", ["python", "-m", "train", "--x", "a b"])
    assert c.kwargs["name"] == f"{req.app_id}-trainer-1"
    assert c.kwargs["environment"]["A"] == "1,2"
    assert c.kwargs["restart_policy"] == {"Name": "on-failure", "MaximumRetryCount": 2}
    assert (c.kwargs["mem_limit"], c.kwargs["nano_cpus"]) == ("2048m", 2_000_000_000)


def test_dryrun_local_cwd_request_is_torchx_popen_request(offline_runner: Any) -> None:
    from torchx.schedulers.local_scheduler import PopenRequest, ReplicaParam

    app = specs.AppDef(
        name="lc", roles=[specs.Role(name="s", image="", entrypoint="echo", args=["x"])]
    )
    req = offline_runner.dryrun(app, "local_cwd").request
    assert isinstance(req, PopenRequest)
    [param] = req.role_params["s"]
    assert isinstance(param, ReplicaParam)
    assert param.args == ["echo", "x"] and param.env["TORCHX_JOB_ID"].endswith(req.app_id)
    assert param.cwd == str(Path.cwd()) and req.role_log_dirs["s"] == [req.log_dir]


def test_dryrun_aws_batch_request_is_torchx_batch_job(offline_runner: Any) -> None:
    from torchx.schedulers.aws_batch_scheduler import BatchJob

    req = offline_runner.dryrun(_two_roles(), "aws_batch", cfg={"queue": "q1"}).request
    assert isinstance(req, BatchJob)
    assert (req.queue, req.share_id, req.images_to_push) == ("q1", None, {})
    assert req.job_def["jobDefinitionName"] == req.name
    assert req.job_def["nodeProperties"]["numNodes"] == 3


def test_dryrun_aws_sagemaker_request(offline_runner: Any) -> None:
    cfg = {
        "role": "arn:aws:iam::123456789012:role/r",
        "output_path": "s3://b/o",
        "instance_type": "ml.m5.xlarge",
        "mode": "container",  # `echo ps`: framework mode runs only a .py script
    }
    req = offline_runner.dryrun(_one_role(), "aws_sagemaker", cfg=cfg).request
    # TorchX's AWSSageMakerJob where its module imports (it needs the sagemaker SDK), else a
    # class of the same name and fields
    assert type(req).__name__ in ("AWSSageMakerJob", "SageMakerJob")
    assert req.job_name == req.job_def["TrainingJobName"] and req.images_to_push == {}
    assert req.job_def["RoleArn"] == cfg["role"]


def test_schedule_submits_a_dryrun(runner: Any) -> None:
    app = specs.AppDef(
        name=unique("sched"),
        roles=[specs.Role(name="e", image="/tmp", entrypoint="echo", args=["scheduled"])],
    )
    info = runner.dryrun(app, "local_cwd")
    handle = runner.schedule(info)
    assert runner.wait(handle).state == specs.AppState.SUCCEEDED
    assert list(runner.log_lines(handle, "e")) == ["scheduled\n"]
    # an edited request cannot be honoured (the daemon builds it anew): refused, not lost
    info.request.role_params["e"][0].args.append("more")
    with pytest.raises(ValueError, match=r"dryrun_info.request was changed after the dry run"):
        runner.schedule(info)
    with pytest.raises(ValueError, match=r"takes an AppDryRunInfo from this Runner's dryrun"):
        runner.schedule(specs.AppDryRunInfo("request", str))


def test_scheduler_run_opts_are_torchx_runopts(runner: Any) -> None:
    slurm = runner.scheduler_run_opts("slurm")
    assert isinstance(slurm, specs.runopts)
    names = [name for name, _ in slurm]
    assert "mail-user" in names and "mail_user" not in names  # TorchX's names
    opt = slurm.get("mail-user")
    assert (opt.opt_type, opt.default, opt.is_required) == (str, None, False)
    assert slurm.get("exclusive").opt_type is bool and slurm.get("exclusive").default is False
    assert slurm.get("quiet") is None  # TorchX's slurm has none
    docker = runner.scheduler_run_opts("local_docker")
    assert docker.get("quiet").default is False
    assert docker.get("quiet").help.startswith("accepted and ignored by txd: ")
    # TorchX's own methods work on it: list options parse from text, defaults resolve
    assert docker.cfg_from_str("copy_env=A,B") == {"copy_env": ["A", "B"]}
    assert docker.resolve({})["privileged"] is False
    sm = runner.scheduler_run_opts("aws_sagemaker")
    assert sm.get("role").is_required and sm.get("role").default is None
    with pytest.raises(specs.InvalidRunConfigException, match="Required run option: role"):
        sm.resolve({})


def test_errors_are_torchx_exceptions_and_txd_errors(runner: Any) -> None:
    from torchx.specs.finder import ComponentNotFoundException, ComponentValidationException
    from txd.client import NotFoundError
    from txd.client.components import ComponentError

    app = _one_role()
    with pytest.raises(KeyError, match="unknown scheduler 'nope'") as unknown:
        runner.dryrun(app, "nope")
    assert isinstance(unknown.value, specs.UnknownSchedulerException | NotFoundError)
    assert str(unknown.value).startswith("unknown scheduler 'nope' (known: ")  # no KeyError repr
    for call in (runner.scheduler_run_opts, runner.list):
        with pytest.raises(specs.UnknownSchedulerException):
            call("nope")

    with pytest.raises(specs.InvalidRunConfigException) as bad_cfg:
        runner.dryrun(app, "local_cwd", cfg={"log_dir": 3})
    assert bad_cfg.value.cfg_key == "log_dir" and isinstance(bad_cfg.value, InvalidArgumentError)
    with pytest.raises(specs.InvalidRunConfigException, match=r"cfg\.bogus: unknown option"):
        runner.run(app, "local_cwd", cfg={"bogus": "1"})

    with pytest.raises(ValueError, match=r"app\.roles: an app needs at least one role"):
        runner.dryrun(specs.AppDef(name="empty", roles=[]), "local_cwd")

    with pytest.raises(ComponentNotFoundException, match=r"unknown component 'nope\.x'") as nf:
        runner.run_component("nope.x", [], "local_cwd")
    assert isinstance(nf.value, ComponentError)
    with pytest.raises(ComponentNotFoundException, match="component file not found"):
        runner.dryrun_component("missing.py:f", [], "local_cwd")
    with pytest.raises(ComponentValidationException, match="unknown argument --bogus"):
        runner.dryrun_component("utils.echo", ["--bogus"], "local_cwd")

    with pytest.raises(specs.MalformedAppHandleException, match="app_handle: empty"):
        runner.status("")
    with pytest.raises(specs.UnknownAppException, match="local_cwd://txd/nope-x") as ua:
        list(runner.log_lines("local_cwd://txd/nope-x", "r"))
    assert isinstance(ua.value, NotFoundError)


def test_quiet_through_the_python_client_warns_where_torchx_has_it(
    shared_daemon: Any, workdir: Path
) -> None:
    from txd.client import Client

    app = specs.AppDef(name="q", roles=[specs.Role(name="e", image="img", entrypoint="echo")])
    with Client(shared_daemon.socket) as c:
        with pytest.warns(UserWarning, match="option 'quiet' is ignored on local_docker"):
            resp = c.dryrun(app, "local_docker", {"quiet": True}, workspace=None)
        assert "quiet" not in resp.request
        with pytest.raises(InvalidArgumentError, match=r"cfg\.quiet: unknown option"):
            c.dryrun(app, "local_cwd", {"quiet": True})


AUTOSTART_PROGRAM = textwrap.dedent("""
    from txd.client.runner import get_runner

    with get_runner() as runner:
        app_handle = runner.run_component("utils.echo", ["--msg", "started"], "local_cwd")
        print(runner.wait(app_handle).state, "".join(runner.log_lines(app_handle, "echo")))
""")


def test_the_runner_starts_a_daemon_where_none_answers(workdir: Path) -> None:
    """As torchx's get_runner() just runs, txd's starts the daemon (as txctl does) when none
    answers on the socket; TXD_NO_AUTOSTART=1 says none answers instead."""
    root = short_tmpdir("txdt-runner-")
    socket = root / "txd.sock"
    env = clean_env(TXD_SOCKET=str(socket), TXD_STATE_DIR=str(root / "state"))
    try:
        refused = run_python(AUTOSTART_PROGRAM, env={**env, "TXD_NO_AUTOSTART": "1"}, cwd=workdir)
        assert refused.returncode == 1
        assert f"no txd daemon answers on {socket} (start one with `txd`)" in refused.stderr
        assert not socket.exists()
        proc = run_python(AUTOSTART_PROGRAM, env=env, cwd=workdir)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == "SUCCEEDED started\n\n"
        said = re.fullmatch(rf"txd\.client: started txd \(pid (\d+)\) on {socket}\n", proc.stderr)
        assert said, proc.stderr
        again = run_python(AUTOSTART_PROGRAM, env=env, cwd=workdir)  # the same daemon answers
        assert (again.returncode, again.stdout, again.stderr) == (0, "SUCCEEDED started\n\n", "")
        assert _serving(socket) == [int(said[1])]
    finally:
        for pid in _serving(socket):  # however the test ended: the daemon it started
            os.kill(pid, signal.SIGTERM)
            wait_ended(pid, 30)
        remove_tree(root)


RESTART_PROGRAM = textwrap.dedent("""
    from txd.client.runner import get_runner

    with get_runner() as runner:
        app_handle = runner.run_component("utils.sh", ["sleep", "600"], "local_cwd")
        print("waiting", flush=True)
        print(runner.wait(app_handle).state, flush=True)
""")


def test_the_runner_starts_the_daemon_again_when_it_dies_during_a_wait(workdir: Path) -> None:
    """As txctl's reconnects do: the daemon killed under a wait is started again, its crash
    recovery ends the orphaned replica, and the wait returns that end."""
    root = short_tmpdir("txdt-runner-")
    socket = root / "txd.sock"
    env = clean_env(TXD_SOCKET=str(socket), TXD_STATE_DIR=str(root / "state"))
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", RESTART_PROGRAM],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=workdir,
        )
        assert proc.stderr is not None and proc.stdout is not None
        first = re.fullmatch(
            r"txd\.client: started txd \(pid (\d+)\) on .*\n", proc.stderr.readline()
        )
        assert first, "the Runner started no daemon"
        assert proc.stdout.readline() == "waiting\n"
        os.kill(int(first[1]), signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert out == "CANCELLED\n"
        again = re.search(r"txd\.client: started txd \(pid (\d+)\) on ", err)
        assert again and int(again[1]) != int(first[1]), err
        assert err.rstrip().endswith("goes on"), err
        assert _serving(socket) == [int(again[1])]
    finally:
        for pid in _serving(socket):
            os.kill(pid, signal.SIGTERM)
            wait_ended(pid, 30)
        remove_tree(root)


def _serving(socket: Path) -> list[int]:
    """The pids of the daemons started on `socket` (their command line names it)."""
    found = subprocess.run(["pgrep", "-f", f"txd.daemon --socket {socket} "], capture_output=True)
    return [int(pid) for pid in found.stdout.split()]
