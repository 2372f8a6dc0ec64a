"""Property-based: thousands of generated requests through the real gRPC API of one real daemon.

Random and boundary AppDefs (empty, blank, NUL, non-ASCII and huge strings at and over each
limit, wide maps and lists, int32/int64 extremes, every enum value and numbers out of range),
run options, handles, log queries, list filters and request ids, sent as DryRun (Run-shaped
requests that would start processes) and as a bounded number of real Runs of `true` on
local_cwd; then requests whose string fields carry bytes that are not UTF-8 (same-length bytes
patched into the serialized message, as any client can put on the wire), and random bytes.

For every request: the daemon answers it OK or with INVALID_ARGUMENT (its google.rpc.BadRequest
naming a field of that request), NOT_FOUND, ALREADY_EXISTS, or RESOURCE_EXHAUSTED (only for a
request over the 4 MiB message limit); never UNKNOWN, INTERNAL or anything else. Every Watch
goes to the watch door too (txd.daemon.watchdoor), which must end it as the socket does, and
every Status to the read door (its own wire), which must answer it as the socket does. After every
example a second client's Health check is answered by the same daemon process, and at the end
its log holds no traceback. Hypothesis runs each property a fixed number of examples under a
per-example deadline, with no example database (nothing written to the repository).
"""

from __future__ import annotations

import socket
import string
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from txd import defaults
from txd.v1 import (
    AppDef,
    BindMount,
    CfgValue,
    DeviceMount,
    Mount,
    Resource,
    Role,
    VolumeMount,
)
from txd.v1 import runner_pb2 as pb
from txd.v1.scheduler_pb2 import StringList, StringMap
from txd_testing import Daemon, log_alarms, remove_tree, short_tmpdir

SERVICE = "/txd.v1.Runner/"
STREAMS = {"Watch", "Logs"}
ACCEPTED = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}
CALL_TIMEOUT = 60.0
FUZZ = settings(
    database=None,  # no .hypothesis folder in the repository
    deadline=30_000,  # ms per example: a 10,000-replica DryRun takes a few seconds here
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@dataclass
class Wire:
    """Raw calls to one daemon: requests as bytes, so a test may send any bytes at all."""

    daemon: Daemon
    channel: grpc.Channel
    probe: health_pb2_grpc.HealthStub  # on a channel of its own: the "other client"
    door: grpc.Channel  # the watch door's: every Watch is sent there too, with the same outcome
    read_door: ReadDoor  # every Status is sent there too, with the same outcome
    sent: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    handles: list[str] = field(default_factory=list)
    runs: int = 0

    def call(self, method: str, data: bytes) -> list[bytes]:
        """The response messages' bytes, or grpc.RpcError."""
        self.sent += 1
        if method == "Watch":
            return self._watched(data)
        if method == "Status":
            return self._statused(data)
        if method in STREAMS:
            stream = self.channel.unary_stream(SERVICE + method)
            return list(stream(data, timeout=CALL_TIMEOUT))
        return [self.channel.unary_unary(SERVICE + method)(data, timeout=CALL_TIMEOUT)]

    def _watched(self, data: bytes) -> list[bytes]:
        """A Watch at the socket and at the watch door: the same error (code, message and
        trailers), or the same last status (a job may end between the two calls)."""
        outcomes: list[Any] = []
        for channel in (self.channel, self.door):
            try:
                stream = channel.unary_stream(SERVICE + "Watch")
                outcomes.append(list(stream(data, timeout=CALL_TIMEOUT)))
            except grpc.RpcError as e:
                outcomes.append(e)
        at_socket, at_door = outcomes
        if isinstance(at_socket, grpc.RpcError):
            assert isinstance(at_door, grpc.RpcError), at_door
            assert _ending(at_door) == _ending(at_socket)
            raise at_socket
        assert not isinstance(at_door, grpc.RpcError), _ending(at_door)
        assert at_door[-1:] == at_socket[-1:]
        return list(at_socket)

    def _statused(self, data: bytes) -> list[bytes]:
        """A Status at the read door and at the socket: the same error (code, message and
        rich details), or the same status (asked again, door first, while a job changed
        between the two asks)."""
        for _ in range(3):
            reply = self.read_door.ask(data)
            try:
                at_socket = self.channel.unary_unary(SERVICE + "Status")(data, timeout=CALL_TIMEOUT)
            except grpc.RpcError as e:
                code, details, trailers = _ending(e)
                rich = dict(trailers).get("grpc-status-details-bin", b"")
                assert reply.WhichOneof("answer") == "error", reply
                error = reply.error
                assert (error.code, error.message, error.status_details) == (
                    code.value[0],
                    details,
                    rich,
                )
                raise
            assert reply.WhichOneof("answer") == "status", reply
            if reply.status.SerializeToString() == at_socket:
                return [at_socket]
        raise AssertionError(f"the read door answered {reply} where the socket {at_socket!r}")

    def check(self, method: str, request: Message, data: bytes | None = None) -> list[bytes]:
        """Sends request (or `data` as its bytes) and asserts the answer is one txd may give;
        returns the responses ([] when refused)."""
        data = request.SerializeToString() if data is None else data
        try:
            out = self.call(method, data)
        except grpc.RpcError as e:
            self._count(e.code().name)
            try:
                _assert_refusal(e, request, len(data))
            except AssertionError as failed:
                shown = str(request)[:1000]
                raise AssertionError(f"{method}({shown}) -> {failed}") from None
            return []
        self._count("OK")
        return out

    def _count(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1

    def alive(self) -> None:
        """The daemon is the same process and still answers another client."""
        assert self.daemon.running(), self.daemon.log()[-4000:]
        reply = self.probe.Check(health_pb2.HealthCheckRequest(), timeout=CALL_TIMEOUT)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


class ReadDoor:
    """A connection to the daemon's read door, on its wire (a preface, then length-prefixed
    messages: txd.v1.ReadReply), made again where the door closed it (a request over 4 MiB)."""

    PREFACE = b"txd-read/1\n"

    def __init__(self, path: str) -> None:
        self.path = path
        self.sock: socket.socket | None = None

    def ask(self, data: bytes) -> pb.ReadReply:
        if self.sock is None:
            self.sock = socket.socket(socket.AF_UNIX)
            self.sock.settimeout(CALL_TIMEOUT)
            self.sock.connect(self.path)
            self.sock.sendall(self.PREFACE)
        self.sock.sendall(struct.pack(">I", len(data)) + data)
        (size,) = struct.unpack(">I", self._exactly(4))
        reply = pb.ReadReply.FromString(self._exactly(size))
        if len(data) > defaults.MAX_REQUEST_BYTES:  # answered, then closed
            self.close()
        return reply

    def _exactly(self, n: int) -> bytes:
        assert self.sock is not None
        out = b""
        while len(out) < n:
            more = self.sock.recv(n - len(out))
            assert more, "the read door closed the connection"
            out += more
        return out

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def _read_door(d: Daemon) -> ReadDoor:
    """The daemon's read door, once its process serves (started after the socket serves)."""
    path = defaults.read_door(d.socket)
    deadline = time.monotonic() + CALL_TIMEOUT
    while "read door on " not in d.log():
        assert time.monotonic() < deadline, d.log()
        time.sleep(0.02)
    return ReadDoor(path)


def _ending(e: Any) -> tuple[Any, ...]:
    trailers = sorted((k, v) for k, v in e.trailing_metadata() or ())
    return e.code(), e.details(), trailers


def _assert_refusal(e: grpc.RpcError, request: Message, size: int) -> None:
    code, details = e.code(), e.details() or ""
    assert code in ACCEPTED, f"{code.name}: {details[:500]}"
    assert details and "\n" not in details, details[:500]
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        assert size > defaults.MAX_REQUEST_BYTES, details
        assert str(defaults.MAX_REQUEST_BYTES) in details, details
    if code != grpc.StatusCode.INVALID_ARGUMENT:
        return
    [raw] = [v for k, v in e.trailing_metadata() or () if k == "grpc-status-details-bin"]
    [detail] = status_pb2.Status.FromString(raw).details
    bad = error_details_pb2.BadRequest()
    assert detail.Unpack(bad), detail.type_url
    [violation] = bad.field_violations
    top = violation.field.split(".")[0].split("[")[0]
    fields = {f.name for f in request.DESCRIPTOR.fields} | {"request"}
    assert top in fields, (violation.field, details)
    assert violation.description, details
    assert details.startswith(violation.field[:200]), (violation.field, details)


@pytest.fixture(scope="module")
def wire() -> Iterator[Wire]:
    root = short_tmpdir("txdt-fuzz-")
    d = Daemon(root).start()
    pid = d.pid
    # The fuzzing client may send what the client library would refuse to (over 4 MiB).
    options = [("grpc.max_send_message_length", -1)]
    try:
        with (
            grpc.insecure_channel(f"unix:{d.socket}", options=options) as channel,
            grpc.insecure_channel(f"unix:{d.socket}") as other,
            grpc.insecure_channel(f"unix:{defaults.watch_door(d.socket)}", options=options) as door,
        ):
            read_door = _read_door(d)
            w = Wire(d, channel, health_pb2_grpc.HealthStub(other), door, read_door)
            yield w
            read_door.close()
            w.alive()
            assert d.pid == pid
            print(f"\nfuzz: {w.sent} requests, outcomes {w.outcomes}, {w.runs} real runs")
        alarms = log_alarms(d.log())
        assert not alarms, "the daemon logged errors:\n" + d.log()[-8000:]
    finally:
        d.close()
        remove_tree(root)


# -- strategies -------------------------------------------------------------------------------

KiB, MiB = 1 << 10, 1 << 20
# Sizes at and just over the documented limits (validate.py), and a few ordinary ones.
SIZES = [0, 1, 2, 127, 128, 129, 1024, 1025, 4096, 4097, 128 * KiB, 128 * KiB + 1]
CHARS = ["a", "é", "\u6f22", "\U0001f600", " ", "\t", "\n", "\0", "$", "'", '"', "\\"]
INT32 = [0, 1, -1, 2, 10_000, 10_001, 65535, 65536, 2**31 - 1, -(2**31)]

small_text = st.text(max_size=12)
big_text = st.builds(lambda c, n: c * n, st.sampled_from(CHARS), st.sampled_from(SIZES))
text = st.one_of(
    small_text, small_text, small_text, big_text, st.sampled_from(["", " ", "  \t", "\0", "x\0y"])
)
valid_name = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}", fullmatch=True)
name = st.one_of(
    valid_name,
    st.sampled_from(["a" * 128, "a" * 129, ".x", "-x", "ok\n", "caf\u00e9", ""]),
    text,
)
int32 = st.one_of(st.integers(-(2**31), 2**31 - 1), st.sampled_from(INT32))
int64 = st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from([0, -1, 2**63 - 1]))


def wide_map(value: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Maps of a few random entries, or of as many entries as the limits allow and one more."""
    few = st.dictionaries(text, value, max_size=4)
    many = st.builds(
        lambda n, v: {f"K{i}": v for i in range(n)},
        st.sampled_from([1000, 1001, 4096, 4097]),
        st.sampled_from(["", "v", "é" * 100]),
    )
    return st.one_of(few, few, many)


def wide_list(item: st.SearchStrategy[str]) -> st.SearchStrategy[list[str]]:
    few = st.lists(item, max_size=4)
    many = st.builds(
        lambda n, v: [v] * n,
        st.sampled_from([10_000, 10_001]),
        st.sampled_from(["", "a", "é" * 100]),
    )
    return st.one_of(few, few, many)


mount = st.one_of(
    st.builds(
        lambda s, d, r: Mount(bind=BindMount(src_path=s, dst_path=d, read_only=r)),
        text,
        text,
        st.booleans(),
    ),
    st.builds(lambda s, d: Mount(volume=VolumeMount(src=s, dst_path=d)), text, text),
    st.builds(
        lambda s, d, p: Mount(device=DeviceMount(src_path=s, dst_path=d, permissions=p)),
        text,
        text,
        text,
    ),
    st.just(Mount()),
)
resource = st.builds(
    Resource,
    cpu=int32,
    gpu=st.sampled_from([0, 0, 0, 1, -1]),  # no GPUs here: >0 only asks nvidia-smi
    mem_mb=int64,
    capabilities=wide_map(text),
    devices=st.dictionaries(text, int32, max_size=3),
    named=st.sampled_from(
        ["", "", "cpu.small", "gpu.small", "aws_p3.2xlarge", "gpu.smal", "x" * 200]
    ),
)


@st.composite
def roles(draw: st.DrawFn) -> Role:
    role = Role(
        name=draw(name),
        image=draw(st.one_of(st.just(""), text)),
        entrypoint=draw(
            st.sampled_from(["true", "true", "", " ", "no-such-program", "/bin/true"]) | text
        ),
        args=draw(wide_list(text)),
        env=draw(wide_map(text)),
        max_retries=draw(int32),
        retry_policy=draw(st.integers(-2, 5)),
        port_map=draw(st.dictionaries(text, int32, max_size=3)),
        metadata=draw(wide_map(text)),
        mounts=draw(st.lists(mount, max_size=2)),
    )
    if draw(st.booleans()):
        role.resource.CopyFrom(draw(resource))
    if (n := draw(st.none() | int32 | st.sampled_from([10_000, 10_001, 5_000]))) is not None:
        role.num_replicas = n
    if (m := draw(st.none() | int32)) is not None:
        role.min_replicas = m
    return role


apps = st.builds(
    lambda n, rs, md: AppDef(name=n, roles=rs, metadata=md),
    name,
    st.one_of(
        st.lists(roles(), max_size=3),
        st.lists(roles(), max_size=3),
        st.builds(
            lambda n: [Role(name=f"r{i}", entrypoint="true") for i in range(n)],
            st.sampled_from([1000, 1001]),
        ),
    ),
    wide_map(text),
)
cfg_value = st.one_of(
    st.builds(lambda v: CfgValue(str=v), text),
    st.builds(lambda v: CfgValue(int=v), int64),
    st.builds(lambda v: CfgValue(float=v), st.floats()),
    st.builds(lambda v: CfgValue(bool=v), st.booleans()),
    st.builds(lambda v: CfgValue(list=StringList(items=v)), wide_list(text)),
    st.builds(lambda v: CfgValue(dict=StringMap(items=v)), wide_map(text)),
    st.just(CfgValue()),
)
LOCAL_OPTIONS = ["log_dir", "prepend_cwd", "auto_set_cuda_visible_devices"]
cfgs = st.dictionaries(st.sampled_from(LOCAL_OPTIONS) | text, cfg_value, max_size=3)
schedulers = st.sampled_from(["", "local_cwd", "local_cwd", "nosuch", "LOCAL_CWD"]) | text
timestamps = st.builds(
    lambda s, n: Timestamp(seconds=s, nanos=n),
    st.one_of(int64, st.integers(-62_135_596_800, 253_402_300_799)),
    st.one_of(int32, st.integers(0, 999_999_999)),
)


def handles(wire: Wire) -> st.SearchStrategy[str]:
    """Garbage, other schedulers' and unknown handles, and those of the jobs run so far (with
    their app ids and prefixes of them)."""
    known = st.sampled_from(wire.handles) if wire.handles else st.just("")
    return st.one_of(
        text,
        st.sampled_from(
            [
                "",
                "://",
                "local_cwd://",
                "local_cwd://txd/",
                "slurm://txd/123",
                "kubernetes://a/b",
                "nosuch://txd/x",
                "local_cwd://txd/nosuch-1",
                "a/b/c",
                "%",
                "_",
                "*",
            ]
        ),
        known,
        known.map(lambda h: h.rsplit("/", 1)[-1]),
        known.map(lambda h: h.rsplit("/", 1)[-1][:3]),
        known.map(lambda h: h + "x"),
    )


# -- properties ---------------------------------------------------------------------------------


@settings(FUZZ, max_examples=300)
@given(data=st.data())
def test_dryrun_apps(wire: Wire, data: st.DataObject) -> None:
    req = pb.DryRunRequest(
        app=data.draw(apps),
        scheduler=data.draw(schedulers),
        cfg=data.draw(cfgs),
        cwd=data.draw(st.sampled_from(["", "/", "/tmp", "/nonexistent", "relative"]) | text),
        env=data.draw(st.one_of(st.just({}), wide_map(text))),
        workspace=data.draw(st.sampled_from(["", "/nonexistent"]) | text),
    )
    for out in wire.check("DryRun", req):
        assert pb.DryRunResponse.FromString(out).request
    wire.alive()


RUN_ARGS = st.lists(
    st.text(max_size=20) | st.sampled_from(["$(id)", "`id`", "a b", "\u00e9"]), max_size=3
)


@settings(FUZZ, max_examples=40)
@given(data=st.data())
def test_real_runs_and_request_ids(wire: Wire, data: st.DataObject) -> None:
    """Real Runs of harmless `true` on local_cwd, random args, env and request ids (some used
    again with another app: ALREADY_EXISTS); then every job is waited for."""
    role = Role(
        name=data.draw(valid_name),
        entrypoint="true",
        args=data.draw(RUN_ARGS),
        env=data.draw(
            st.dictionaries(
                st.text(string.ascii_letters, min_size=1, max_size=8),
                st.text(max_size=20),
                max_size=3,
            )
        ),
        num_replicas=data.draw(st.sampled_from([1, 1, 2, 0])),
    )
    rid = data.draw(
        st.sampled_from(["", "", "rid-a", "rid-b", "r" * 128, "r" * 129]) | st.text(max_size=20)
    )
    app_name = data.draw(valid_name | name)
    req = pb.RunRequest(app=AppDef(name=app_name, roles=[role]), request_id=rid)
    for out in wire.check("Run", req):
        handle = pb.RunResponse.FromString(out).app_handle
        wire.runs += 1
        if handle not in wire.handles:
            wire.handles.append(handle)
        [waited] = wire.check("Wait", pb.WaitRequest(app_handle=handle))
        assert pb.WaitResponse.FromString(waited).status.state in (4, 5)  # SUCCEEDED, FAILED
    wire.alive()


@settings(FUZZ, max_examples=900)
@given(data=st.data())
def test_handles_logs_and_lists(wire: Wire, data: st.DataObject) -> None:
    handle = data.draw(handles(wire))
    method = data.draw(
        st.sampled_from(
            [
                "Status",
                "Wait",
                "Watch",
                "Describe",
                "Cancel",
                "Logs",
                "List",
                "Prune",
                "RunOpts",
                "Delete",
            ]
        )
    )
    req: Message
    if method == "Logs":
        req = pb.LogsRequest(
            app_handle=handle,
            role=data.draw(st.sampled_from(["", "r"]) | text),
            regex=data.draw(
                st.sampled_from(
                    ["", "(", "a{99999999}", "(" * 200 + ")" * 200, "[", "\\", "x" * 4097]
                )
                | text
            ),
            streams=data.draw(st.integers(-1, 4)),
            follow=False,
        )
        if data.draw(st.booleans()):
            req.replica = data.draw(int32)
        if data.draw(st.booleans()):
            req.tail = data.draw(int32)
        if data.draw(st.booleans()):
            req.since.CopyFrom(data.draw(timestamps))
        if data.draw(st.booleans()):
            req.until.CopyFrom(data.draw(timestamps))
    elif method == "List":
        req = pb.ListRequest(
            scheduler=data.draw(st.sampled_from(["", "nosuch"]) | text),
            backend=data.draw(st.booleans()),
            page_size=data.draw(int32),
            page_token=data.draw(st.sampled_from(["", "AAAA", "x" * 5000]) | text),
            states=data.draw(st.lists(st.integers(-1, 9), max_size=4) | st.just([3] * 101)),
        )
        if data.draw(st.booleans()):
            req.created_since.CopyFrom(data.draw(timestamps))
    elif method == "Prune":
        req = pb.PruneRequest(
            scheduler=data.draw(st.sampled_from(["", "nosuch"]) | text), dry_run=True
        )
        if data.draw(st.booleans()):
            req.created_before.CopyFrom(data.draw(timestamps))
    elif method == "RunOpts":
        req = pb.RunOptsRequest(scheduler=data.draw(schedulers))
    elif method == "Delete":  # never one of the jobs the other properties look at
        req = pb.DeleteRequest(app_handle=data.draw(text))
    else:
        req = getattr(pb, f"{method}Request")(app_handle=handle)
    wire.check(method, req)
    wire.alive()


# Same-length bytes that are not UTF-8, patched over a marker in the serialized message.
MARKER = "\ue000\ue001"  # 6 bytes, private use: nothing else in a request has them
BAD = b"\xff\xfe\xc0\xaf\xed\xa0"
assert len(MARKER.encode()) == len(BAD)


def _role_with(**kw: Any) -> AppDef:
    return AppDef(name="u", roles=[Role(name="r", entrypoint="true", **kw)])


# (method, request with MARKER in one string field, the field path the daemon must name)
UTF8_CASES: list[tuple[str, Callable[[str], Message], str]] = [
    ("Run", lambda m: pb.RunRequest(app=AppDef(name=m)), "app.name"),
    ("DryRun", lambda m: pb.DryRunRequest(app=_role_with(args=["a", m])), "app.roles[0].args[1]"),
    ("DryRun", lambda m: pb.DryRunRequest(app=_role_with(env={"K": m})), "app.roles[0].env[K]"),
    ("DryRun", lambda m: pb.DryRunRequest(app=_role_with(env={m: "v"})), "app.roles[0].env"),
    (
        "Run",
        lambda m: pb.RunRequest(app=_role_with(), cfg={"log_dir": CfgValue(str=m)}),
        "cfg.log_dir",
    ),
    ("Run", lambda m: pb.RunRequest(app=_role_with(), request_id=m), "request_id"),
    ("Run", lambda m: pb.RunRequest(app=_role_with(), env={"A": m}), "env[A]"),
    (
        "DryRun",
        lambda m: pb.DryRunRequest(
            app=_role_with(mounts=[Mount(bind=BindMount(src_path="/", dst_path=m))])
        ),
        "app.roles[0].mounts[0].bind.dst_path",
    ),
    (
        "DryRun",
        lambda m: pb.DryRunRequest(app=_role_with(resource=Resource(capabilities={"c": m}))),
        "app.roles[0].resource.capabilities[c]",
    ),
    ("Status", lambda m: pb.StatusRequest(app_handle=m), "app_handle"),
    ("Logs", lambda m: pb.LogsRequest(app_handle="x", regex=m), "regex"),
    ("List", lambda m: pb.ListRequest(page_token=m), "page_token"),
    ("RunOpts", lambda m: pb.RunOptsRequest(scheduler=m), "scheduler"),
]


@settings(FUZZ, max_examples=150)
@given(
    case=st.sampled_from(UTF8_CASES),
    before=st.text(max_size=8).filter(lambda s: "\ue000" not in s),
    after=st.text(max_size=8).filter(lambda s: "\ue000" not in s),
)
def test_invalid_utf8_names_the_field(
    wire: Wire, case: tuple[str, Callable[[str], Message], str], before: str, after: str
) -> None:
    method, build, path = case
    request = build(before + MARKER + after)
    raw = request.SerializeToString()
    assert raw.count(MARKER.encode()) == 1
    with pytest.raises(grpc.RpcError) as info:
        wire.call(method, raw.replace(MARKER.encode(), BAD))
    err = info.value
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    _assert_refusal(err, request, len(raw))
    assert err.details().startswith(f"{path}: not valid UTF-8"), (path, err.details())
    wire.alive()


METHODS = [
    m
    for m in (
        "Run",
        "DryRun",
        "Status",
        "Wait",
        "Watch",
        "Describe",
        "List",
        "Cancel",
        "Logs",
        "Prune",
        "RunOpts",
        "Schedulers",
        "Where",
    )
]


@settings(FUZZ, max_examples=600)
@given(method=st.sampled_from(METHODS), data=st.binary(max_size=64))
def test_random_bytes(wire: Wire, method: str, data: bytes) -> None:
    """Bytes that are rarely a message: refused as INVALID_ARGUMENT naming `request` (or a
    field), or, when they happen to parse, answered as that request."""
    if method in ("Run", "Delete", "Cancel"):
        method = "DryRun"  # never a real job or a real cancel from random bytes
    wire.check(method, getattr(pb, f"{method}Request")(), data)
    wire.alive()


def test_over_the_message_limit_at_the_watch_door(wire: Wire) -> None:
    req = pb.WatchRequest(app_handle="x" * (defaults.MAX_REQUEST_BYTES + 1))
    with pytest.raises(grpc.RpcError) as info:
        list(wire.door.unary_stream(SERVICE + "Watch")(req.SerializeToString(), timeout=60))
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    _assert_refusal(info.value, req, req.ByteSize())
    wire.alive()


def test_over_the_message_limit(wire: Wire) -> None:
    req = pb.DryRunRequest(app=_role_with(args=["x" * (defaults.MAX_REQUEST_BYTES + 1)]))
    with pytest.raises(grpc.RpcError) as info:
        wire.call("DryRun", req.SerializeToString())
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    _assert_refusal(info.value, req, req.ByteSize())
    wire.alive()
