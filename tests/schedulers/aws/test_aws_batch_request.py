"""aws_batch's request builder (schedulers/aws/batch_request.py) against golden JSON in
tests/schedulers/aws/fixtures/request-*.json: what DryRun prints and schedule sends. Rewrite
them after a deliberate change with

    .venv/bin/python tests/schedulers/aws/test_aws_batch_request.py --update-golden
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from txd.schedulers.aws import batch_request as request
from txd.schedulers.aws.batch_request import BatchOpts, build
from txd.schedulers.errors import InvalidArgument
from txd.v1 import AppDef, BindMount, DeviceMount, Mount, Resource, Role, VolumeMount

GOLDEN = Path(__file__).with_name("fixtures")


def container_app() -> AppDef:
    role = Role(
        name="trainer",
        image="123456789012.dkr.ecr.us-east-1.amazonaws.com/train:1",
        entrypoint="python",
        args=["-m", "train", "--rank", "${replica_id}", "--app", "${app_id}"],
        env={"LR": "0.1"},
        max_retries=2,
        resource=Resource(
            cpu=8,
            gpu=1,
            mem_mb=61 * 1024,
            capabilities={"node.kubernetes.io/instance-type": "p3.2xlarge"},
            devices={"vpc.amazonaws.com/efa": 2},
        ),
        mounts=[
            Mount(bind=BindMount(src_path="/data", dst_path="/data", read_only=True)),
            Mount(volume=VolumeMount(src="fs-0123", dst_path="/efs")),
            Mount(device=DeviceMount(src_path="/dev/fuse", permissions="rw")),
        ],
    )
    return AppDef(name="train.v1", roles=[role], metadata={"team": "ml"})


def multinode_app() -> AppDef:
    res = Resource(cpu=4, mem_mb=8192)
    worker = Role(
        name="worker",
        image="img:1",
        entrypoint="sh",
        args=["-c", "echo ${replica_id} ${rank0_env}"],
        num_replicas=3,
        resource=res,
    )
    ps = Role(name="ps", image="img:1", entrypoint="ps-server", resource=res)
    return AppDef(name="dist", roles=[worker, ps])


CASES = {
    "container": (
        container_app,
        BatchOpts(
            queue="gpu-q",
            user="alice",
            privileged=True,
            share_id="teamA",
            priority=10,
            job_role_arn="arn:aws:iam::123456789012:role/job",
            execution_role_arn="arn:aws:iam::123456789012:role/exec",
            timeout=3600,
            job_type="container",
        ),
    ),
    "multinode": (multinode_app, BatchOpts(queue="cpu-q", user="bob")),
    # One replica, by default a one-node multi-node job (TorchX's), Batch's node variables set.
    "single": (container_app, BatchOpts(queue="gpu-q", user="alice")),
}


def _render(case: str, monkeypatch: pytest.MonkeyPatch | None = None) -> str:
    make_app, opts = CASES[case]
    fixed = lambda name: f"{name}-bcdfghjklmnp"  # noqa: E731 (make_unique's random suffix)
    if monkeypatch is not None:
        monkeypatch.setattr(request, "make_unique", fixed)
    else:
        request.make_unique = fixed  # type: ignore[assignment]
    return build(make_app(), opts, session="txd", user="daemon-user").render() + "\n"


@pytest.mark.parametrize("case", sorted(CASES))
def test_request_matches_the_golden_json(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = (GOLDEN / f"request-{case}.json").read_text()
    assert _render(case, monkeypatch) == expected


def test_app_id_is_queue_and_job_name() -> None:
    req = build(multinode_app(), BatchOpts(queue="q"), session="s", user="u")
    queue, _, name = req.app_id.partition(":")
    assert queue == "q" and name.startswith("dist-") and name == req.submit["jobName"]
    assert req.role_nodes == [("worker", 0, 3), ("ps", 3, 1)]


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        (lambda a: a.roles[0].ClearField("image"), "app.roles[0].image", "runs images"),
        (lambda a: a.roles[0].resource.ClearField("mem_mb"), "mem_mb", "needs each replica"),
        (lambda a: a.roles[0].env.update({"AWS_BATCH_X": "1"}), "env", "reserves AWS_BATCH"),
        (lambda a: setattr(a.roles[0], "max_retries", 10), "max_retries", "at most 10 attempts"),
        (lambda a: a.roles[0].resource.devices.update({"x.io/gpu": 1}), "devices", "no device"),
        (lambda a: setattr(a.roles[0], "num_replicas", 1001), "app.roles", "at most 1000 nodes"),
        (lambda a: a.roles.extend([a.roles[0]] * 5), "app.roles", "at most 5 roles"),
    ],
)
def test_what_batch_cannot_run_is_refused_naming_the_field(
    change: object, field: str, message: str
) -> None:
    app = container_app()
    change(app)  # type: ignore[operator]
    with pytest.raises(InvalidArgument, match=message) as e:
        build(app, BatchOpts(queue="q"), session="s", user="u")
    assert field in e.value.field


@pytest.mark.parametrize(
    ("opts", "field"),
    [
        (BatchOpts(queue="q", timeout=30), "cfg.timeout"),
        (BatchOpts(queue="q", priority=10_000), "cfg.priority"),
    ],
)
def test_bad_options_are_refused(opts: BatchOpts, field: str) -> None:
    with pytest.raises(InvalidArgument) as e:
        build(container_app(), opts, session="s", user="u")
    assert e.value.field == field


@pytest.mark.parametrize(
    ("app", "job_type", "message"),
    [
        (container_app, "fargate", "cfg.job_type: expected multinode or container, got 'fargate'"),
        (
            multinode_app,
            "container",
            "cfg.job_type: a container job runs one replica, the app has 4",
        ),
    ],
)
def test_a_job_type_batch_cannot_run_is_refused(
    app: Callable[[], AppDef], job_type: str, message: str
) -> None:
    with pytest.raises(InvalidArgument) as e:
        build(app(), BatchOpts(queue="q", job_type=job_type), session="s", user="u")
    assert str(e.value).startswith(message), e.value


def test_retries_are_attempts_minus_one() -> None:
    """max_retries=1 is two attempts (TorchX asks for max(max_retries, 1): one)."""
    app = multinode_app()
    app.roles[1].max_retries = 1
    req = build(app, BatchOpts(queue="q"), session="s", user="u")
    assert req.job_definition["retryStrategy"] == {"attempts": 2}


def _update_golden() -> None:
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for case in CASES:
        (GOLDEN / f"request-{case}.json").write_text(_render(case))


if __name__ == "__main__":
    if sys.argv[1:] != ["--update-golden"]:
        sys.exit(f"usage: {sys.argv[0]} --update-golden")
    _update_golden()
