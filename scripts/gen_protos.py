#!/usr/bin/env python3
"""Generate the Python stubs of proto/txd/v1 next to the .proto files.

Usage: python scripts/gen_protos.py [OUT_DIR]   (OUT_DIR defaults to proto/; the staleness test
writes to a temporary directory and compares).
"""

from __future__ import annotations

import sys
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"


def generate(out_dir: Path) -> list[Path]:
    """Runs protoc for every txd/v1/*.proto into out_dir; returns the files written."""
    v1 = PROTO_ROOT / "txd" / "v1"
    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in v1.glob("*.proto"))
    include = str(Path(protoc.__file__).parent / "_proto")  # google/protobuf/*.proto
    (out_dir / "txd" / "v1").mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    for grpc_file in (out_dir / "txd" / "v1").glob("*_pb2_grpc.py"):
        if "Stub" not in grpc_file.read_text():  # protoc writes one even for service-less files
            grpc_file.unlink()
    return sorted((out_dir / "txd" / "v1").glob("*_pb2*.py*"))


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else PROTO_ROOT
    for path in generate(out):
        print(path)
