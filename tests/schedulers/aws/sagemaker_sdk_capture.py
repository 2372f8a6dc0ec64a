"""What TorchX 0.7's aws_sagemaker sends to AWS for an app: run by the Python of a venv that
has torchx 0.7 and the SageMaker SDK (sagemaker<3), never by txd's own (it imports neither).

    python sagemaker_sdk_capture.py ENDPOINT SPEC OUT

ENDPOINT is a moto server (every client the SDK makes is pointed there, STS's too);
SPEC a JSON file naming the app (name, image, entrypoint, args, env, metadata), TorchX's cfg
the working directory (cwd: TorchX uploads it, source_dir's default) and the buckets
the options name (made first, as they would exist); OUT gets, as JSON,
the job name and every AWS call the SDK made, in order, with its parameters (a file's bytes
are left out: the test reads the upload back from moto). TorchX's scheduler builds the
estimator (its submit_dryrun, then schedule: PyTorch(**job_def).fit(wait=False)), exactly as
`torchx run -s aws_sagemaker` would.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import socket
import sys
from typing import Any

# The SDK's defaults file: telemetry off (it would call AWS's own S3 bucket, not moto).
SDK_CONFIG = """SchemaVersion: '1.0'
SageMaker:
  PythonSDK:
    Modules:
      TelemetryOptOut: true
"""


def loopback_only() -> None:
    """Refuses every connection that is not to a loopback address: whatever the SDK does, the
    capture talks to moto and nothing else."""
    connect = socket.socket.connect

    def guarded(self: socket.socket, address: Any) -> Any:
        inet = self.family in (socket.AF_INET, socket.AF_INET6)
        if inet and not ipaddress.ip_address(address[0]).is_loopback:
            raise ConnectionRefusedError(f"capture: {address[0]} is not loopback")
        return connect(self, address)

    socket.socket.connect = guarded  # type: ignore[method-assign]


def main(endpoint: str, spec_path: str, out_path: str) -> None:
    with open(spec_path) as f:
        spec = json.load(f)
    loopback_only()
    # Beside the spec (the caller's folder, which it removes), never in the uploaded cwd.
    config = os.path.join(os.path.dirname(os.path.abspath(spec_path)), "sdk-config.yaml")
    with open(config, "w") as f:
        f.write(SDK_CONFIG)
    os.environ["SAGEMAKER_USER_CONFIG_OVERRIDE"] = config
    os.environ["SAGEMAKER_ADMIN_CONFIG_OVERRIDE"] = config
    os.chdir(spec["cwd"])

    import boto3
    import botocore.client
    import botocore.session

    # The buckets the app's options name exist in a real account (the SDK creates only its
    # default one): they are made before anything is recorded.
    s3 = boto3.client("s3", endpoint_url=endpoint)
    for bucket in spec.get("buckets") or []:
        with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
            s3.create_bucket(Bucket=bucket)
    from torchx.schedulers.aws_sagemaker_scheduler import create_scheduler
    from torchx.specs import AppDef, Role

    calls: list[dict[str, Any]] = []
    make_call = botocore.client.BaseClient._make_api_call

    def recording(self: Any, operation: str, params: dict[str, Any]) -> Any:
        kept = {k: v for k, v in params.items() if k != "Body"}
        calls.append({"service": self.meta.service_model.service_name, "op": operation, **kept})
        return make_call(self, operation, params)

    botocore.client.BaseClient._make_api_call = recording  # type: ignore[method-assign]
    create_client = botocore.session.Session.create_client

    def to_moto(self: Any, *args: Any, **kwargs: Any) -> Any:
        # The SDK names STS's regional endpoint itself: every client goes to moto all the same.
        kwargs["endpoint_url"] = endpoint
        return create_client(self, *args, **kwargs)

    botocore.session.Session.create_client = to_moto  # type: ignore[method-assign]
    role = Role(
        name=spec.get("role", "trainer"),
        image=spec["image"],
        entrypoint=spec["entrypoint"],
        args=list(spec["args"]),
        env=dict(spec.get("env") or {}),
        num_replicas=int(spec.get("num_replicas", 1)),
    )
    app = AppDef(name=spec["name"], roles=[role], metadata=dict(spec.get("metadata") or {}))
    scheduler = create_scheduler("capture")
    info = scheduler.submit_dryrun(app, dict(spec["cfg"]))
    job_name = scheduler.schedule(info)
    with open(out_path, "w") as f:
        json.dump({"job_name": job_name, "calls": calls}, f, indent=2, default=str)
        f.write("\n")


if __name__ == "__main__":
    main(*sys.argv[1:4])
