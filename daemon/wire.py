"""Requests off the wire: the Runner service registered with a parser of txd's own, so that a
request that is not a valid message is INVALID_ARGUMENT naming its field.

gRPC's generated registration parses each request before the servicer runs, and a parse error
there reaches the client as UNKNOWN ("Unexpected DecodeError") with no field. A proto3 string
that is not UTF-8 is such an error: a client that puts raw bytes into a string field (any
language can, on the wire) gets it. Here the servicer receives the raw bytes and parses them in
`parse`, and for bad UTF-8 `bad_utf8_field` walks the wire format to name the field.
"""

from __future__ import annotations

from typing import Any, cast

import grpc
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message
from txd.schedulers.errors import InvalidArgument
from txd.v1 import runner_pb2

RUNNER = runner_pb2.DESCRIPTOR.services_by_name["Runner"]


def add_runner(servicer: Any, server: grpc.aio.Server) -> None:
    """Registers every Runner method of `servicer`; each gets the request as raw bytes (see
    `parse`). Responses are serialized as usual, or by the servicer's `SERIALIZERS` for the
    methods it names there (a Watch stream's statuses come serialized once, for all)."""
    handlers = {}
    serializers = getattr(servicer, "SERIALIZERS", {})
    for method in RUNNER.methods:
        response = getattr(runner_pb2, method.output_type.name)
        serialize = serializers.get(method.name, response.SerializeToString)
        make = (
            grpc.stream_stream_rpc_method_handler
            if method.client_streaming
            else grpc.unary_stream_rpc_method_handler
            if method.server_streaming
            else grpc.unary_unary_rpc_method_handler
        )
        handlers[method.name] = make(
            getattr(servicer, method.name),
            request_deserializer=None,  # the raw bytes
            response_serializer=serialize,
        )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(RUNNER.full_name, handlers),)
    )


def parse(cls: type[Message], data: bytes) -> Any:
    """The request message of type `cls` in `data`, or InvalidArgument naming the field that
    is not UTF-8 (or the whole request, when the bytes are no message at all)."""
    try:
        return cls.FromString(data)
    except DecodeError as e:
        field = bad_utf8_field(cast(Descriptor, cls.DESCRIPTOR), data)
        if field is not None:
            raise InvalidArgument(field, "not valid UTF-8 (a string field must be)") from None
        raise InvalidArgument(
            "request", f"not a valid {cls.DESCRIPTOR.full_name} message: {e}"
        ) from None


def bad_utf8_field(desc: Descriptor, data: bytes) -> str | None:
    """The path (`app.roles[0].env[KEY]`) of the first string field in `data`, a serialized
    message of type `desc`, whose bytes are not UTF-8; None when there is none or the bytes
    are not a message."""
    try:
        return _walk(desc, data, "")
    except (IndexError, ValueError):
        return None


def _walk(desc: Descriptor, data: bytes, prefix: str) -> str | None:
    seen: dict[int, int] = {}  # field number -> occurrences so far (a repeated field's index)
    for number, value in _fields(data):
        field = desc.fields_by_number.get(number)
        if value is None or field is None:
            continue
        index = seen.get(number, 0)
        seen[number] = index + 1
        path = f"{prefix}.{field.name}" if prefix else field.name
        entry = field.message_type
        if entry is not None and entry.GetOptions().map_entry:
            found = _walk_entry(entry, value, path)
        else:
            if field.is_repeated:
                path = f"{path}[{index}]"
            found = _walk_value(field, value, path)
        if found is not None:
            return found
    return None


def _walk_entry(entry: Descriptor, data: bytes, path: str) -> str | None:
    """A map entry: a bad key names the map, a bad value names the entry (`env[KEY]`, or for
    a message value, as run options are named, `cfg.NAME`)."""
    parts = {number: value for number, value in _fields(data) if value is not None}
    key = parts.get(1, b"")
    try:
        shown = key.decode()
    except UnicodeDecodeError:
        return path
    value = parts.get(2)
    if value is None:
        return None
    field = entry.fields_by_number[2]
    if field.message_type is not None:  # cfg: the option's path is `cfg.<name>`
        return f"{path}.{shown}" if _walk(field.message_type, value, "") else None
    return _walk_value(field, value, f"{path}[{shown}]")


def _walk_value(field: FieldDescriptor, value: bytes, path: str) -> str | None:
    if field.type == FieldDescriptor.TYPE_STRING:
        try:
            value.decode()
        except UnicodeDecodeError:
            return path
        return None
    if field.message_type is not None:
        return _walk(field.message_type, value, path)
    return None  # bytes, or packed numbers


def _fields(data: bytes) -> list[tuple[int, bytes | None]]:
    """(field number, bytes) of each field in a serialized message, in order; None as the
    bytes of a number (wire types 0, 1, 5). ValueError or IndexError when it is no message."""
    out: list[tuple[int, bytes | None]] = []
    pos = 0
    while pos < len(data):
        tag, pos = _varint(data, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            _, pos = _varint(data, pos)
            out.append((number, None))
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
            out.append((number, None))
        elif wire == 2:
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise ValueError("truncated")
            out.append((number, data[pos : pos + size]))
            pos += size
        else:
            raise ValueError(f"wire type {wire} (groups are not used in txd's API)")
    return out


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]  # IndexError past the end
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")
