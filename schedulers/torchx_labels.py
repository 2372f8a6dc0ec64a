"""TorchX 0.7's label and tag keys, which txd writes beside its own `txd.*` ones on what it
creates (Kubernetes objects, Docker containers, Batch job definitions and jobs), so that
TorchX's tools, label selectors, quota and cost rules find txd's jobs as they find TorchX's.
txd reads only its own keys: these are written, never read.

The version: TorchX writes `torchx.__version__`, the TorchX release that made the object. txd
writes TORCHX_VERSION, the TorchX release whose model (requests, labels, builtins) txd follows,
whether or not torchx is installed: a selector or tag rule written for TorchX 0.7's jobs
(`torchx.pytorch.org/version=0.7.0`) then matches txd's too, and a value never changes with
what the daemon's environment happens to hold.
"""

from __future__ import annotations

TORCHX_VERSION = "0.7.0"

VERSION = "torchx.pytorch.org/version"
APP_NAME = "torchx.pytorch.org/app-name"
APP_ID = "torchx.pytorch.org/app-id"  # local_docker's
ROLE_INDEX = "torchx.pytorch.org/role-index"
ROLE_NAME = "torchx.pytorch.org/role-name"
REPLICA_ID = "torchx.pytorch.org/replica-id"
USER = "torchx.pytorch.org/user"  # aws_batch's
