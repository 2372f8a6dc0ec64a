"""gRPC server reflection under both names clients ask for: grpc.reflection.v1 (grpcurl and
newer clients try it first) and grpc.reflection.v1alpha (older clients).

grpcio-reflection (1.85) serves only v1alpha. v1 is the same protocol under another package:
the same messages with the same field names and numbers (grpc's reflection/v1/reflection.proto
is v1alpha's, renamed), so v1alpha's servicer answers v1 calls too, byte for byte. The v1 file
descriptor is derived from v1alpha's and added to the descriptor pool, so that reflection can
describe the v1 service itself.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

# The asyncio servicer, public as `reflection.aio.ReflectionServicer` (grpc-stubs omit `aio`).
from grpc_reflection.v1alpha._async import ReflectionServicer

V1ALPHA = reflection.SERVICE_NAME  # grpc.reflection.v1alpha.ServerReflection
V1 = "grpc.reflection.v1.ServerReflection"
_V1_FILE = "grpc/reflection/v1/reflection.proto"


def enable(server: grpc.aio.Server, service_names: Sequence[str]) -> None:
    """Serves reflection v1 and v1alpha, listing `service_names` and both reflection services."""
    _add_v1_descriptor()
    servicer = ReflectionServicer([*service_names, V1, V1ALPHA])
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(servicer, server)
    v1 = grpc.method_handlers_generic_handler(
        V1,
        {
            "ServerReflectionInfo": grpc.stream_stream_rpc_method_handler(
                servicer.ServerReflectionInfo,
                request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
                response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
            )
        },
    )
    server.add_generic_rpc_handlers((v1,))


def _add_v1_descriptor() -> None:
    pool = descriptor_pool.Default()
    try:
        pool.FindFileByName(_V1_FILE)
        return  # added before (another server in this process), or shipped by a newer library
    except KeyError:
        pass
    proto = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(proto)
    old, new = f".{proto.package}.", ".grpc.reflection.v1."
    proto.name, proto.package = _V1_FILE, "grpc.reflection.v1"
    proto.ClearField("options")  # v1alpha's java/go package names
    for message in proto.message_type:
        for field in message.field:
            if field.type_name.startswith(old):
                field.type_name = new + field.type_name.removeprefix(old)
    for service in proto.service:
        for method in service.method:
            method.input_type = new + method.input_type.removeprefix(old)
            method.output_type = new + method.output_type.removeprefix(old)
    pool.AddSerializedFile(proto.SerializeToString())
