"""aws_sagemaker's framework mode (the default) through a real txd on moto's STS, S3 and
SageMaker (behind the stand-in proxy of sagemaker_standin, which hands the test each
CreateTrainingJob request as sent).

- The job txd creates for each case of sagemaker_sdk_cases equals, field by field, what the
  SageMaker SDK sent for the same app and cfg through TorchX 0.7 (fixtures/sagemaker-sdk),
  and moto keeps it so.
- The sourcedir.tar.gz txd uploaded, read back from moto's S3, holds every file of the source
  directory (and dependencies) byte for byte, links followed, and nothing else.
- A dry run asks nothing of AWS (its endpoint here is a closed port): it shows the request,
  the account still unknown, and what would be uploaded.
- With TorchX's venv (scripts/torchx-venv), the fixtures are checked to still be what the SDK
  sends, by capturing it again on this module's moto.
"""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from moto_testing import Moto, aws_env, client
from sagemaker_sdk_cases import (
    CASES,
    MOTO_ACCOUNT,
    capture,
    fixture,
    make_tree,
    normalised,
    spec_in,
    torchx_python,
)
from sagemaker_standin import StandIn
from test_aws_sagemaker import _daemon, standin_moto
from test_aws_sagemaker_framework_request import app_of, without_own_tags
from txd_testing import Daemon, log_alarms, remove_tree, short_tmpdir

pytestmark = pytest.mark.timeout(180)

WAIT = 30.0


@pytest.fixture(scope="module")
def fw_daemon(standin: StandIn) -> Iterator[Daemon]:
    d = _daemon(standin).start()
    try:
        yield d
    finally:
        d.close()
        log = d.log()
        remove_tree(d.root)
        assert not log_alarms(log), "the daemon logged errors:\n" + log


@pytest.fixture
async def fw_client(fw_daemon: Daemon) -> AsyncIterator[Any]:
    async with fw_daemon.client() as c:
        yield c


@pytest.fixture
def sent(standin: StandIn) -> Iterator[dict[str, dict[str, Any]]]:
    """Each CreateTrainingJob request the stand-in passed to moto, by job name."""
    requests: dict[str, dict[str, Any]] = {}

    async def keep(name: str, params: dict[str, Any]) -> None:
        requests[name] = params

    standin.on_create = keep
    try:
        yield requests
    finally:
        standin.on_create = None


@pytest.fixture
def root() -> Iterator[Path]:
    path = short_tmpdir("txd-smfw-")
    make_tree(path)
    try:
        yield path
    finally:
        remove_tree(path)


def expected_members(source: Path, deps: list[Path]) -> dict[str, bytes | None]:
    """What the archive must hold: name -> a file's bytes (None for a directory)."""
    out: dict[str, bytes | None] = {}
    tops = [(p, p.name) for p in sorted(source.iterdir())] + [(d, d.name) for d in deps]
    for path, name in tops:
        if path.is_dir():
            out[name] = None
            for dirpath, dirs, files in os.walk(path, followlinks=True):
                rel = Path(name, Path(dirpath).relative_to(path))
                for d in dirs:
                    out[str(rel / d)] = None
                for f in files:
                    out[str(rel / f)] = Path(dirpath, f).read_bytes()
        else:
            out[name] = path.read_bytes()  # a link: the file it points to
    return out


async def uploaded_members(moto: Moto, uri: str) -> tuple[dict[str, bytes | None], str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    async with client(moto, "s3") as s3:
        obj = await s3.get_object(Bucket=bucket, Key=key)
        data = await obj["Body"].read()
    members: dict[str, bytes | None] = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for m in tar.getmembers():
            assert m.isfile() or m.isdir(), f"{m.name}: links are packed as their files"
            f = tar.extractfile(m) if m.isfile() else None
            members[m.name.removeprefix("./")] = f.read() if f else None
    return members, str(obj.get("ServerSideEncryption", ""))


async def make_buckets(moto: Moto, names: list[str]) -> None:
    async with client(moto, "s3") as s3:
        for name in names:
            try:
                await s3.create_bucket(Bucket=name)
            except Exception as e:  # made by an earlier test of this module
                if "BucketAlready" not in type(e).__name__ + str(e):
                    raise


@pytest.mark.parametrize("case", sorted(CASES))
async def test_the_job_and_its_code_are_the_sdks(
    case: str,
    fw_client: Any,
    standin: StandIn,
    sent: dict[str, dict[str, Any]],
    root: Path,
) -> None:
    spec = spec_in(case, root)
    moto = standin_moto(standin)
    await make_buckets(moto, spec.get("buckets") or [])
    h = await fw_client.run(app_of(spec), "aws_sagemaker", spec["cfg"], cwd=spec["cwd"])
    name = h.rsplit("/", 1)[1]
    want = fixture(case)
    request = normalised(without_own_tags(sent[name]), name, MOTO_ACCOUNT)
    assert set(request) == set(want["request"])
    for field, value in want["request"].items():
        assert request[field] == value, field
    # moto made the job from that request
    async with client(moto, "sagemaker") as sm:
        job = await sm.describe_training_job(TrainingJobName=name)
    for field in ("HyperParameters", "ResourceConfig", "OutputDataConfig", "RoleArn"):
        assert job[field] == sent[name][field], field
    # the code, byte for byte
    submit = sent[name]["HyperParameters"]["sagemaker_submit_directory"].strip('"')
    uri = submit if submit.startswith("s3://") else sent[name]["InputDataConfig"][-1][
        "DataSource"
    ]["S3DataSource"]["S3Uri"]  # fmt: skip
    assert normalised(uri, name, MOTO_ACCOUNT) == "s3://{Bucket}/{Key}".format(**want["put"])
    source = Path(spec["cfg"].get("source_dir") or spec["cwd"])
    deps = [Path(d) for d in spec["cfg"].get("dependencies") or []]
    members, encryption = await uploaded_members(moto, uri)
    assert members == expected_members(source, deps)
    assert encryption == want["put"]["ServerSideEncryption"]


async def test_the_workspace_is_the_source_directory(
    fw_client: Any, standin: StandIn, sent: dict[str, dict[str, Any]], root: Path
) -> None:
    """txctl's default workspace (the working directory) is uploaded; no image is built."""
    spec = spec_in("isolated", root)
    h = await fw_client.run(
        app_of(spec), "aws_sagemaker", spec["cfg"], cwd=str(root), workspace=spec["cwd"]
    )
    name = h.rsplit("/", 1)[1]
    assert sent[name]["AlgorithmSpecification"]["TrainingImage"] == spec["image"]
    uri = sent[name]["InputDataConfig"][-1]["DataSource"]["S3DataSource"]["S3Uri"]
    members, _ = await uploaded_members(standin_moto(standin), uri)
    assert members == expected_members(Path(spec["cwd"]), [])


async def test_a_dry_run_asks_nothing_of_aws(root: Path) -> None:
    spec = spec_in("default", root)
    d = Daemon(
        short_tmpdir("txd-smdry-"),
        env=aws_env(),
        args=["--set", "aws_sagemaker.endpoint_url=http://127.0.0.1:9"],  # nothing listens
    ).start()
    try:
        async with d.client() as c:
            info = await c.dryrun(app_of(spec), "aws_sagemaker", spec["cfg"], cwd=spec["cwd"])
    finally:
        d.close()
        remove_tree(d.root)
    assert '"S3OutputPath": "s3://sagemaker-us-east-1-<account>/"' in info.request
    assert '"sagemaker_program": "\\"train.py\\""' in info.request
    files = sum(v is not None for v in expected_members(Path(spec["cwd"]), []).values())
    assert info.workspace.startswith(f"would upload {spec['cwd']} ({files} file(s), ")
    assert "to s3://sagemaker-us-east-1-<account>/train-" in info.workspace


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_fixtures_are_what_the_sdk_sends(case: str, sm_moto: Moto) -> None:
    python = torchx_python()
    if python is None:
        pytest.skip("no TorchX venv with the SageMaker SDK (scripts/torchx-venv)")
    assert capture(python, sm_moto.url, case) == fixture(case)


async def test_a_missing_bucket_is_named_and_no_job_is_made(
    fw_client: Any, standin: StandIn, sent: dict[str, dict[str, Any]], root: Path
) -> None:
    """The SDK creates only its own bucket: code_location's must exist."""
    from txd.client import InvalidArgumentError

    spec = spec_in("default", root)
    cfg = {**spec["cfg"], "code_location": "s3://no-such-bucket/code"}
    before = standin.calls["CreateTrainingJob"]
    with pytest.raises(InvalidArgumentError) as e:
        await fw_client.run(app_of(spec), "aws_sagemaker", cfg, cwd=spec["cwd"])
    assert e.value.field == "cfg.code_location"
    assert "s3://no-such-bucket/code/" in str(e.value)
    assert standin.calls["CreateTrainingJob"] == before and not sent


async def test_a_missing_script_is_refused_before_anything_is_uploaded(
    fw_client: Any, standin: StandIn, sent: dict[str, dict[str, Any]], root: Path
) -> None:
    from txd.client import InvalidArgumentError

    spec = {**spec_in("default", root), "args": ["missing.py"]}
    before = dict(standin.calls)
    with pytest.raises(InvalidArgumentError) as e:
        await fw_client.run(app_of(spec), "aws_sagemaker", spec["cfg"], cwd=spec["cwd"])
    assert e.value.field == "app.roles[0].args[0]"
    assert "no file named 'missing.py'" in str(e.value)
    assert not sent
    assert not [p for p, n in standin.calls.items() if n != before.get(p) and "source" in p]


async def test_without_a_region_a_dry_run_works_and_a_run_is_refused(root: Path) -> None:
    """As TorchX's dry run, which needs no region; SageMaker needs one to run."""
    from txd.client import FailedPreconditionError

    spec = spec_in("default", root)
    env = {k: v for k, v in aws_env().items() if "REGION" not in k}
    d = Daemon(
        short_tmpdir("txd-smreg-"),
        env=env,
        args=["--set", "aws_sagemaker.endpoint_url=http://127.0.0.1:9"],  # nothing listens
    ).start()
    try:
        async with d.client() as c:
            info = await c.dryrun(app_of(spec), "aws_sagemaker", spec["cfg"], cwd=spec["cwd"])
            with pytest.raises(FailedPreconditionError) as e:
                await c.run(app_of(spec), "aws_sagemaker", spec["cfg"], cwd=spec["cwd"])
    finally:
        d.close()
        remove_tree(d.root)
    assert '"sagemaker_region": "\\"<region>\\""' in info.request
    assert "s3://sagemaker-<region>-<account>/" in info.request
    assert "no AWS region" in str(e.value)
