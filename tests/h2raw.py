"""A raw HTTP/2 client for the daemon's side doors (daemon.h2door): gRPC's framing done by hand
over h2's client state machine, with nothing of gRPC's client library in the way, so that a test
can send what a gRPC client never would (a malformed request, a tiny flow-control window)."""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import h2.config
import h2.connection
import h2.events
import h2.settings

TIMEOUT = 30
M = TypeVar("M")


def framed(message: bytes, flag: int = 0) -> bytes:
    """One gRPC message: its compression flag, its length, its bytes."""
    return bytes([flag]) + len(message).to_bytes(4, "big") + message


@dataclass
class Answer:
    headers: dict[bytes, bytes] = field(default_factory=dict)
    data: bytearray = field(default_factory=bytearray)
    trailers: dict[bytes, bytes] = field(default_factory=dict)
    ended: bool = False

    @property
    def status(self) -> tuple[int, str]:
        end = self.trailers or self.headers  # a trailers-only answer has them in its headers
        return int(end[b"grpc-status"]), end.get(b"grpc-message", b"").decode()

    def messages(self, parse: Callable[[bytes], M]) -> list[M]:
        out, rest = [], bytes(self.data)
        while rest:
            size = int.from_bytes(rest[1:5], "big")
            out.append(parse(rest[5 : 5 + size]))
            rest = rest[5 + size :]
        return out


class RawClient:
    """An HTTP/2 client connection to a door calling `method` unless told otherwise: it
    acknowledges data only if told (`ack`); `window` is its streams' initial flow-control
    window."""

    def __init__(
        self, path: Path, method: str, window: int | None = None, ack: bool = True
    ) -> None:
        self.method = method
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(TIMEOUT)
        self.sock.connect(str(path))
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding=None)
        )
        self.h2.initiate_connection()
        if window is not None:
            self.h2.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
        self.ack = ack
        self.answers: dict[int, Answer] = {}
        self._flush()

    def call(
        self,
        body: bytes,
        *,
        method: str | None = None,
        verb: bytes = b"POST",
        extra: list[tuple[bytes, bytes]] | None = None,
    ) -> int:
        sid = self.h2.get_next_available_stream_id()
        headers = [
            (b":method", verb),
            (b":scheme", b"http"),
            (b":path", (method or self.method).encode()),
            (b":authority", b"localhost"),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
            *(extra or []),
        ]
        self.h2.send_headers(sid, headers)
        self.h2.send_data(sid, body, end_stream=True)
        self.answers[sid] = Answer()
        self._flush()
        return sid

    def read(self, sid: int, until: Any) -> Answer:
        """Takes frames until `until(answer)` holds for stream `sid`."""
        answer = self.answers[sid]
        while not until(answer):
            data = self.sock.recv(65536)
            assert data, "the door closed the connection"
            for event in self.h2.receive_data(data):
                got = self.answers.get(getattr(event, "stream_id", 0))
                if got is None:
                    continue
                if isinstance(event, h2.events.ResponseReceived):
                    got.headers = dict(event.headers)  # type: ignore[arg-type]
                elif isinstance(event, h2.events.DataReceived):
                    got.data += event.data or b""
                    if self.ack:
                        self.h2.acknowledge_received_data(
                            event.flow_controlled_length, event.stream_id
                        )
                elif isinstance(event, h2.events.TrailersReceived):
                    got.trailers = dict(event.headers)  # type: ignore[arg-type]
                elif isinstance(event, h2.events.StreamEnded):
                    got.ended = True
            self._flush()
        return answer

    def finish(self, sid: int) -> Answer:
        return self.read(sid, lambda a: a.ended)

    def credit(self, sid: int, n: int) -> None:
        self.h2.increment_flow_control_window(n, stream_id=sid)
        self.h2.increment_flow_control_window(n)
        self._flush()

    def _flush(self) -> None:
        self.sock.sendall(self.h2.data_to_send())

    def close(self) -> None:
        self.sock.close()
