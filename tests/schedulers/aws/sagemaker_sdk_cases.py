"""The apps whose framework-mode request txd must make exactly as TorchX 0.7 does through the
SageMaker SDK (importable as `sagemaker_sdk_cases`), and what the SDK made of each.

Each case is an app and TorchX's cfg, given to TorchX's aws_sagemaker in a working directory
laid out by `make_tree` (paths in a case are relative to that tree's root). What the SDK sent
for it (its PutObject of sourcedir.tar.gz and its CreateTrainingJob, captured by
sagemaker_sdk_capture.py on moto: `capture`) is kept in fixtures/sagemaker-sdk/<case>.json;
`python tests/schedulers/aws/sagemaker_sdk_cases.py ENDPOINT` (with TorchX's venv, a moto
server at ENDPOINT) writes them again. The job's name (random on both sides) and the account
(moto's) are replaced by JOB and ACCOUNT.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures" / "sagemaker-sdk"
CAPTURE = HERE / "sagemaker_sdk_capture.py"
REPO = HERE.parents[2]
JOB = "<job>"
ACCOUNT = "<account>"
MOTO_ACCOUNT = "123456789012"
REGION = "us-east-1"
ROLE_ARN = "arn:aws:iam::123456789012:role/SageMakerRole"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainer:1"

# The working directory: text, a file of every byte value, a package, a link (packed as the
# file it points to), an empty directory; a source directory of its own; a dependency.
TREE: dict[str, bytes] = {
    "wd/train.py": b"print('training')\n",
    "wd/data.bin": bytes(range(256)) * 4,
    "wd/pkg/__init__.py": b"",
    "wd/pkg/mod.py": b"x = 1\n",
    "wd/src/entry.py": b"print('entry')\n",
    "deps/lib1/util.py": b"y = 2\n",
}
LINKS = {"wd/link.py": "train.py"}
EMPTY_DIRS = ("wd/empty",)

_BASE: dict[str, Any] = {
    "name": "train",
    "image": IMAGE,
    "entrypoint": "python",
    "env": {"LOG_LEVEL": "info"},
    "metadata": {"team": "vision"},
    "cwd": "wd",
}
CASES: dict[str, dict[str, Any]] = {
    # The defaults: the SDK's bucket, the working directory uploaded, two instances.
    "default": {
        **_BASE,
        "args": ["train.py", "--lr", "0.1", "--epochs=3"],
        "cfg": {"role": ROLE_ARN, "instance_type": "ml.p3.2xlarge", "instance_count": 2},
    },
    # Options: code_location, output_path, hyperparameters and environment merged, log level,
    # retries, profiler and debugger off, KMS, volume, warm pool.
    "options": {
        **_BASE,
        "args": ["train.py", "--lr", "0.1"],
        "buckets": ["bucket", "codebucket"],
        "cfg": {
            "role": ROLE_ARN,
            "instance_type": "ml.m5.xlarge",
            "output_path": "s3://bucket/out",
            "hyperparameters": {"seed": "1", "lr": "9"},
            "environment": {"A": "1", "LOG_LEVEL": "x"},
            "container_log_level": 10,
            "code_location": "s3://codebucket/code",
            "max_retry_attempts": 3,
            "disable_profiler": True,
            "debugger_hook_config": False,
            "volume_size": 50,
            "max_run": 3600,
            "output_kms_key": "kmsout",
            "keep_alive_period_in_seconds": 60,
        },
    },
    # source_dir and dependencies, the code in output_path's bucket (with its KMS key),
    # checkpoints (which turn the debugger off), spot, VPC, a model channel, and the rest.
    "source-dir": {
        **_BASE,
        "args": ["entry.py", "--x=1"],
        "buckets": ["bucket"],
        "cfg": {
            "role": ROLE_ARN,
            "instance_type": "ml.m5.xlarge",
            "output_path": "s3://bucket/out/",
            "output_kms_key": "kmsout",
            "source_dir": "wd/src",
            "dependencies": ["deps/lib1"],
            "checkpoint_s3_uri": "s3://bucket/ckpt",
            "checkpoint_local_path": "/opt/ml/checkpoints",
            "use_spot_instances": True,
            "max_wait": 90000,
            "subnets": ["subnet-1"],
            "security_group_ids": ["sg-1"],
            "enable_infra_check": False,
            "enable_sagemaker_metrics": True,
            "input_mode": "FastFile",
            "encrypt_inter_container_traffic": True,
            "model_uri": "s3://bucket/model.tar.gz",
            "volume_kms_key": "kmsvol",
            "training_repository_access_mode": "Vpc",
            "training_repository_credentials_provider_arn": (
                "arn:aws:lambda:us-east-1:123456789012:function:f"
            ),
            "disable_output_compression": True,
        },
    },
    # Network isolation: the code reaches the job as an input channel.
    "isolated": {
        **_BASE,
        "args": ["train.py"],
        "cfg": {
            "role": ROLE_ARN,
            "instance_type": "ml.m5.xlarge",
            "enable_network_isolation": True,
            "debugger_hook_config": True,
        },
    },
}
PATH_OPTIONS = ("source_dir",)


def make_tree(root: Path) -> None:
    for name, data in TREE.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    for name, target in LINKS.items():
        (root / name).symlink_to(target)
    for name in EMPTY_DIRS:
        (root / name).mkdir(parents=True, exist_ok=True)


def spec_in(case: str, root: Path) -> dict[str, Any]:
    """The case with its paths made absolute below `root`."""
    spec = json.loads(json.dumps(CASES[case]))
    spec["cwd"] = str(root / spec["cwd"])
    cfg = spec["cfg"]
    for option in PATH_OPTIONS:
        if option in cfg:
            cfg[option] = str(root / cfg[option])
    if "dependencies" in cfg:
        cfg["dependencies"] = [str(root / d) for d in cfg["dependencies"]]
    return spec


def normalised(value: Any, job: str, account: str) -> Any:
    """`value` with the job's name and the account replaced by JOB and ACCOUNT."""
    text = json.dumps(value).replace(job, JOB).replace(account, ACCOUNT)
    return json.loads(text)


def torchx_python() -> str | None:
    """The python of TorchX 0.7's venv with the SageMaker SDK (scripts/torchx-venv), if any."""
    venv = Path(os.environ.get("TXD_TORCHX_VENV") or REPO / ".torchx-venv")
    python = venv / "bin" / "python"
    if not python.exists():
        return None
    probe = subprocess.run(
        [str(python), "-c", "import sagemaker, torchx"], capture_output=True, check=False
    )
    return str(python) if probe.returncode == 0 else None


def capture(python: str, endpoint: str, case: str) -> dict[str, Any]:
    """What the SDK sends for `case` (normalised), on the moto server at `endpoint`."""
    with tempfile.TemporaryDirectory(prefix="sdk-case-") as tmp:
        root = Path(tmp)
        make_tree(root)
        spec_path, out_path = root / "spec.json", root / "out.json"
        spec_path.write_text(json.dumps(spec_in(case, root)))
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(root),
            "PYTHONDONTWRITEBYTECODE": "1",
            "SAGEMAKER_SUPPRESS_V2_WARNING": "1",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": REGION,
            "AWS_CONFIG_FILE": "/dev/null",
            "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
        }
        done = subprocess.run(
            [python, str(CAPTURE), endpoint, str(spec_path), str(out_path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            raise AssertionError(f"the SDK capture of {case} failed:\n{done.stderr[-4000:]}")
        out = json.loads(out_path.read_text())
    calls = out["calls"]
    put = next(c for c in calls if c["op"] == "PutObject")
    create = next(c for c in calls if c["op"] == "CreateTrainingJob")
    kept = {k: v for k, v in put.items() if k in ("Bucket", "Key", *UPLOAD_ARGS)}
    request = {k: v for k, v in create.items() if k not in ("service", "op")}
    return normalised({"put": kept, "request": request}, out["job_name"], MOTO_ACCOUNT)


# The PutObject arguments that say where and how the code is stored (not how it is sent).
UPLOAD_ARGS = ("ServerSideEncryption", "SSEKMSKeyId", "ExpectedBucketOwner")


def fixture(case: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{case}.json").read_text())
    return data


def main(endpoint: str) -> None:
    python = torchx_python()
    if python is None:
        sys.exit("no TorchX venv with the SageMaker SDK: run scripts/torchx-venv")
    FIXTURES.mkdir(parents=True, exist_ok=True)
    for case in CASES:
        (FIXTURES / f"{case}.json").write_text(
            json.dumps(capture(python, endpoint, case), indent=2) + "\n"
        )


if __name__ == "__main__":
    main(sys.argv[1])
