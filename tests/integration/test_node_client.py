"""A Node.js client (tests/node/client.test.mjs: @grpc/grpc-js and @grpc/proto-loader loading
proto/ at run time) against a real daemon: run, watch, exact log bytes, and a validation
error's code, message and BadRequest field path; and Watch at the watch door (grpc-js: an HTTP/2
implementation other than grpcio's) with the socket's statuses and errors. The Node packages
are installed by scripts/install-node (scripts/test runs it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import google.rpc
import pytest
from txd_testing import REPO

NODE_DIR = REPO / "tests" / "node"
NODE = shutil.which("node")


@pytest.mark.skipif(NODE is None, reason="node is not installed (Debian: apt-get install nodejs)")
def test_node_client(shared_daemon: Any, workdir: Path) -> None:
    assert NODE is not None
    assert (NODE_DIR / "node_modules" / "@grpc" / "grpc-js").is_dir(), (
        "the Node packages are missing: run scripts/install-node"
    )
    # googleapis-common-protos ships the .proto files beside its modules: site-packages/google/rpc.
    google_protos = Path(next(iter(google.rpc.__path__))).parent.parent
    assert (google_protos / "google" / "rpc" / "error_details.proto").is_file()
    env = {
        **os.environ,
        "TXD_SOCKET": str(shared_daemon.socket),
        "TXD_PROTO_ROOT": str(REPO / "proto"),
        "TXD_GOOGLE_PROTOS": str(google_protos),
        "TXD_PYTHON": sys.executable,
        "TXD_WORKDIR": str(workdir),
    }
    proc = subprocess.run(
        [NODE, "--test", "--test-reporter=spec", "client.test.mjs"],
        cwd=NODE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "pass 3" in output and "fail 0" in output, output
