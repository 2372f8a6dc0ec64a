"""aws_sagemaker's framework mode, offline: txd's CreateTrainingJob request and code upload for
each case of sagemaker_sdk_cases equal, field by field, what TorchX 0.7 made of the same app
and cfg through the SageMaker SDK (its requests as captured on moto, in
fixtures/sagemaker-sdk; test_aws_sagemaker_framework.py checks they are still what the SDK
sends). txd adds its own tags (txd.dev/*), and nothing else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sagemaker_apps import validate
from sagemaker_sdk_cases import (
    CASES,
    MOTO_ACCOUNT,
    REGION,
    fixture,
    make_tree,
    normalised,
    spec_in,
)
from txd.schedulers.api import SubmitContext
from txd.schedulers.aws import sagemaker_framework as sf
from txd.schedulers.aws.sagemaker_request import SageMakerOpts, TrainingJob
from txd.schedulers.errors import InvalidArgument
from txd.schedulers.options import resolve, to_cfg_value
from txd.v1.app_pb2 import AppDef, Role

NAME = "train-bcdfghjklmnp"


def app_of(spec: dict[str, Any]) -> AppDef:
    role = Role(
        name="trainer",
        image=spec["image"],
        entrypoint=spec["entrypoint"],
        args=spec["args"],
        env=spec["env"],
        num_replicas=1,
    )
    return AppDef(name=spec["name"], roles=[role], metadata=spec["metadata"])


def build(spec: dict[str, Any], **cfg: Any) -> TrainingJob:
    opts = resolve(SageMakerOpts, {k: to_cfg_value(v) for k, v in {**spec["cfg"], **cfg}.items()})
    ctx = SubmitContext(cwd=spec["cwd"], env={})
    return sf.framework_job(
        app_of(spec), opts, ctx, session="txd", region=REGION, account=MOTO_ACCOUNT, name=NAME
    )


def without_own_tags(request: dict[str, Any]) -> dict[str, Any]:
    tags = [t for t in request["Tags"] if not t["Key"].startswith("txd.dev/")]
    return {**request, "Tags": tags}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    make_tree(tmp_path)
    return tmp_path


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_request_is_the_sdks(case: str, root: Path) -> None:
    job = build(spec_in(case, root))
    want = fixture(case)
    got = normalised(without_own_tags(job.request), NAME, MOTO_ACCOUNT)
    assert set(got) == set(want["request"])
    for field in want["request"]:
        assert got[field] == want["request"][field], field
    assert job.upload is not None
    upload = {"Bucket": job.upload.bucket, "Key": job.upload.key, **job.upload.extra}
    assert normalised(upload, NAME, MOTO_ACCOUNT) == want["put"]
    validate(job.request)  # and SageMaker's service model takes it


def test_the_default_bucket_waits_for_the_account(root: Path) -> None:
    """Offline the account is not known: the request names ACCOUNT until submission."""
    spec = spec_in("default", root)
    opts = resolve(SageMakerOpts, {k: to_cfg_value(v) for k, v in spec["cfg"].items()})
    job = sf.framework_job(
        app_of(spec), opts, SubmitContext(cwd=spec["cwd"], env={}), session="s", region=REGION
    )
    assert job.request["OutputDataConfig"]["S3OutputPath"] == "s3://sagemaker-us-east-1-<account>/"
    assert job.upload is not None and job.upload.bucket == "sagemaker-us-east-1-<account>"
    assert job.upload.extra["ExpectedBucketOwner"] == "<account>"


def test_a_source_dir_in_s3_is_not_uploaded(root: Path) -> None:
    spec = spec_in("default", root)
    job = build(spec, source_dir="s3://code/src.tar.gz")
    assert job.upload is None
    params = job.request["HyperParameters"]
    assert params["sagemaker_submit_directory"] == '"s3://code/src.tar.gz"'


@pytest.mark.parametrize(
    ("args", "field", "says"),
    [
        (["-m", "train"], "app.roles[0].args[0]", "only python programs (*.py)"),
        (["run.sh"], "app.roles[0].args[0]", "only python programs (*.py)"),
        ([], "app.roles[0].args", "needs the script"),
        (["train.py", "data"], "app.roles[0].args[1]", "'data' has no value"),
        (["train.py", "-v", "1"], "app.roles[0].args[1]", "'-v': framework mode passes args"),
    ],
)
def test_what_framework_mode_cannot_run_is_refused_by_name(
    root: Path, args: list[str], field: str, says: str
) -> None:
    spec = {**spec_in("default", root), "args": args}
    with pytest.raises(InvalidArgument) as err:
        build(spec)
    assert err.value.field == field
    assert says in str(err.value)


def test_a_missing_script_is_said_not_refused_offline(root: Path) -> None:
    """As TorchX's dry run, which does not look; the run is refused (the SDK's check)."""
    spec = {**spec_in("default", root), "args": ["missing.py"]}
    upload = build(spec).upload
    assert upload is not None
    assert upload.missing_script() == (
        f"no file named 'missing.py' in the source directory {spec['cwd']}"
    )
    assert upload.describe().endswith(": a run is refused)")
    assert build(spec_in("default", root)).upload.missing_script() == ""  # type: ignore[union-attr]


def test_bad_paths_are_refused_by_name(root: Path) -> None:
    spec = spec_in("default", root)
    with pytest.raises(InvalidArgument) as err:
        build(spec, source_dir=str(root / "nope"))
    assert err.value.field == "cfg.source_dir"
    with pytest.raises(InvalidArgument) as err:
        build(spec, dependencies=[str(root / "nope")])
    assert err.value.field == "cfg.dependencies"
    with pytest.raises(InvalidArgument) as err:
        build(spec, code_location="bucket/code")
    assert err.value.field == "cfg.code_location"


def test_args_become_hyperparameters_as_torchx_parses_them(root: Path) -> None:
    spec = {**spec_in("default", root), "args": ["train.py", "--a", "1", "--b=x=y", "--a", "2"]}
    params = build(spec).request["HyperParameters"]
    assert params["a"] == '"2"' and params["b"] == '"x=y"'


def test_macros_are_substituted(root: Path) -> None:
    """A txd difference: TorchX passes ${app_id} through as it is."""
    spec = {**spec_in("default", root), "args": ["train.py", "--run", "${app_id}"]}
    assert build(spec).request["HyperParameters"]["run"] == f'"{NAME}"'


def test_the_archive_holds_what_the_dry_run_counts(root: Path, tmp_path: Path) -> None:
    import tarfile

    from txd.schedulers.aws.sagemaker_source import count, pack

    job = build(spec_in("source-dir", root))
    assert job.upload is not None
    target = str(tmp_path / "out.tar.gz")
    pack(job.upload, target)
    with tarfile.open(target) as tar:
        files = [m for m in tar.getmembers() if m.isfile()]
        names = sorted(m.name for m in tar.getmembers())
    assert count(job.upload.members()) == (len(files), sum(m.size for m in files))
    assert names == ["entry.py", "lib1", "lib1/util.py"]


def test_a_link_cycle_is_refused_not_followed_forever(root: Path, tmp_path: Path) -> None:
    from txd.schedulers.aws.sagemaker_source import LinkCycle, pack

    (root / "wd" / "pkg" / "loop").symlink_to("..")
    job = build(spec_in("default", root))
    assert job.upload is not None
    with pytest.raises(LinkCycle, match="links back to"):
        job.upload.describe()
    with pytest.raises(LinkCycle):
        pack(job.upload, str(tmp_path / "out.tar.gz"))
    assert not (tmp_path / "out.tar.gz").exists()
