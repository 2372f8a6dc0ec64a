"""The read door's wire (txd.v1.ReadReply documents it): what the daemon's door process and its
clients share. A connection starts with PREFACE; then each request and each reply is a frame,
a serialized message after its length (HEADER)."""

from __future__ import annotations

import struct

PREFACE = b"txd-read/1\n"
HEADER = struct.Struct(">I")  # a frame's length, 4 bytes big-endian


def frame(payload: bytes) -> bytes:
    return HEADER.pack(len(payload)) + payload
