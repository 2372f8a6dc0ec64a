"""The committed stubs match the protos; the daemon serves gRPC health and reflection (v1 and
v1alpha), so any gRPC client can explore it without txd's stubs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2
from txd_testing import REPO

STUB_DIR = REPO / "proto" / "txd" / "v1"


def test_generated_stubs_are_up_to_date(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_protos.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    fresh = {p.name: p.read_bytes() for p in (tmp_path / "txd" / "v1").glob("*_pb2*.py*")}
    committed = {p.name: p.read_bytes() for p in STUB_DIR.glob("*_pb2*.py*")}
    assert fresh, "the generator wrote nothing"
    assert sorted(fresh) == sorted(committed), "stub files added or removed"
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert stale == [], f"stale stubs (run scripts/gen_protos.py): {stale}"
    # Every proto has its messages and type stubs.
    for proto in STUB_DIR.glob("*.proto"):
        assert f"{proto.stem}_pb2.py" in fresh
        assert f"{proto.stem}_pb2.pyi" in fresh


@pytest.fixture
def channel(shared_daemon: Any) -> Any:
    with grpc.insecure_channel(f"unix:{shared_daemon.socket}") as ch:
        yield ch


def test_health_check(channel: Any) -> None:
    stub = health_pb2_grpc.HealthStub(channel)
    for service in ("", "txd.v1.Runner"):
        resp = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
        assert resp.status == health_pb2.HealthCheckResponse.SERVING, service
    with pytest.raises(grpc.RpcError) as info:
        stub.Check(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=10)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND


REFLECTION = ["grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"]


def _reflect(channel: Any, service: str, **request: Any) -> Any:
    """One request to `service`'s ServerReflectionInfo, called by its method path. v1 and
    v1alpha have the same messages (field names and numbers), so v1alpha's classes encode both."""
    call = channel.stream_stream(
        f"/{service}/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    responses = list(call(iter([reflection_pb2.ServerReflectionRequest(**request)]), timeout=10))
    assert len(responses) == 1
    return responses[0]


def _files(resp: Any) -> list[descriptor_pb2.FileDescriptorProto]:
    assert not resp.HasField("error_response"), resp.error_response
    return [
        descriptor_pb2.FileDescriptorProto.FromString(raw)
        for raw in resp.file_descriptor_response.file_descriptor_proto
    ]


@pytest.mark.parametrize("service", REFLECTION)
def test_reflection_lists_and_describes_runner(channel: Any, service: str) -> None:
    resp = _reflect(channel, service, list_services="")
    names = {s.name for s in resp.list_services_response.service}
    assert {"txd.v1.Runner", "grpc.health.v1.Health", *REFLECTION} <= names

    files = _files(_reflect(channel, service, file_containing_symbol="txd.v1.Runner"))
    runner = next(f for f in files if f.name == "txd/v1/runner.proto")
    [service] = [s for s in runner.service if s.name == "Runner"]
    methods = {m.name for m in service.method}
    assert methods == {
        "Run",
        "DryRun",
        "Status",
        "Wait",
        "Watch",
        "Describe",
        "List",
        "Cancel",
        "Delete",
        "Prune",
        "Logs",
        "Schedulers",
        "RunOpts",
        "Where",
        "Events",
        "Metrics",
    }
    streaming = {m.name for m in service.method if m.server_streaming}
    assert streaming == {"Watch", "Logs", "Events"}


def test_reflection_describes_v1_itself(channel: Any) -> None:
    """The v1 service is described as grpc's reflection/v1/reflection.proto defines it."""
    [file] = _files(
        _reflect(
            channel, REFLECTION[0], file_containing_symbol="grpc.reflection.v1.ServerReflection"
        )
    )
    assert (file.name, file.package) == (
        "grpc/reflection/v1/reflection.proto",
        "grpc.reflection.v1",
    )
    [method] = file.service[0].method
    assert method.name == "ServerReflectionInfo"
    assert method.input_type == ".grpc.reflection.v1.ServerReflectionRequest"
    assert method.client_streaming and method.server_streaming
    fields = {(m.name, f.name): (f.number, f.type_name) for m in file.message_type for f in m.field}
    # A few numbers from the upstream v1 proto, and its references to its own package.
    assert fields["ServerReflectionRequest", "file_containing_symbol"] == (4, "")
    assert fields["ServerReflectionRequest", "list_services"] == (7, "")
    assert fields["ServerReflectionResponse", "list_services_response"] == (
        6,
        ".grpc.reflection.v1.ListServiceResponse",
    )
    assert fields["ServerReflectionResponse", "original_request"] == (
        2,
        ".grpc.reflection.v1.ServerReflectionRequest",
    )


def test_socket_is_private(shared_daemon: Any) -> None:
    mode = shared_daemon.socket.stat().st_mode & 0o777
    assert mode & 0o077 == 0, oct(mode)
