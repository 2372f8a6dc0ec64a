"""The request limits of the protos, one at a time, at the limit and one past it, and the
defects the fuzz test (test_fuzz.py) found, each as a fixed case: INVALID_ARGUMENT naming the
field where there was UNKNOWN (bad UTF-8), INTERNAL (timestamps out of range, a regex nested
too deep) or a RESOURCE_EXHAUSTED with no field (an error quoting a huge value overflowed the
client's trailer limit)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp
from txd import defaults
from txd.v1 import AppDef, CfgValue, Role
from txd.v1 import runner_pb2 as pb
from txd_testing import sh_app

KiB, MiB = 1 << 10, 1 << 20


@pytest.fixture
def channel(shared_daemon: Any) -> Iterator[grpc.Channel]:
    options = [
        ("grpc.max_send_message_length", -1),
        ("grpc.max_receive_message_length", defaults.MAX_RESPONSE_BYTES),
    ]
    with grpc.insecure_channel(f"unix:{shared_daemon.socket}", options=options) as ch:
        yield ch


def _call(channel: grpc.Channel, method: str, data: bytes) -> Any:
    if method == "Logs":
        return list(channel.unary_stream(f"/txd.v1.Runner/{method}")(data, timeout=60))
    return channel.unary_unary(f"/txd.v1.Runner/{method}")(data, timeout=60)


def _app(*roles: Role) -> AppDef:
    return AppDef(name="lim", roles=list(roles) or [Role(name="r", entrypoint="true")])


def _role(**kw: Any) -> Role:
    return Role(name=kw.pop("name", "r"), entrypoint=kw.pop("entrypoint", "true"), **kw)


def _dry(app: AppDef, **kw: Any) -> tuple[str, Message]:
    return "DryRun", pb.DryRunRequest(app=app, **kw)


# (id, (method, request) over a limit or otherwise bad, the field named)
OVER: list[tuple[str, tuple[str, Message], str]] = [
    ("roles", _dry(_app(*[_role(name=f"r{i}") for i in range(1001)])), "app.roles"),
    ("replicas-per-role", _dry(_app(_role(num_replicas=10_001))), "app.roles[0].num_replicas"),
    (
        "replicas-in-all",
        _dry(_app(_role(name="a", num_replicas=6000), _role(name="b", num_replicas=4001))),
        "app.roles[1].num_replicas",
    ),
    ("replicas-int32-max", _dry(_app(_role(num_replicas=2**31 - 1))), "app.roles[0].num_replicas"),
    ("args-count", _dry(_app(_role(args=["a"] * 10_001))), "app.roles[0].args"),
    ("arg-bytes", _dry(_app(_role(args=["a", "x" * (128 * KiB + 1)]))), "app.roles[0].args[1]"),
    ("args-bytes", _dry(_app(_role(args=["x" * (100 * KiB)] * 11))), "app.roles[0].args"),
    ("env-count", _dry(_app(_role(env={f"K{i}": "" for i in range(4097)}))), "app.roles[0].env"),
    ("env-entry", _dry(_app(_role(env={"K": "v" * (128 * KiB)}))), "app.roles[0].env[K]"),
    (
        "per-replica-bytes",
        _dry(_app(_role(num_replicas=1000, args=["x" * (17 * KiB)]))),
        "app.roles[0]",
    ),
    (
        "metadata",
        _dry(AppDef(name="m", roles=[_role()], metadata={"k": "v" * MiB})),
        "app.metadata",
    ),
    ("image", _dry(_app(_role(image="i" * (4 * KiB + 1)))), "app.roles[0].image"),
    ("entrypoint-nul", _dry(_app(_role(entrypoint="tr\0ue"))), "app.roles[0].entrypoint"),
    ("retry-policy", _dry(_app(_role(retry_policy=7))), "app.roles[0].retry_policy"),
    ("cfg-value", _dry(_app(), cfg={"log_dir": CfgValue(str="d" * (64 * KiB + 1))}), "cfg.log_dir"),
    ("cwd", _dry(_app(), cwd="/" * (4 * KiB + 1)), "cwd"),
    ("caller-env", _dry(_app(), env={"A=B": "x"}), "env"),
    ("scheduler", _dry(_app(), scheduler="s" * 129), "scheduler"),
    ("handle", ("Status", pb.StatusRequest(app_handle="h" * 100_000)), "app_handle"),
    ("handle-non-ascii", ("Status", pb.StatusRequest(app_handle="\u00e9" * 6000)), "app_handle"),
    ("logs-role", ("Logs", pb.LogsRequest(app_handle="x", role="r" * 100_000)), "role"),
    ("regex-nested", ("Logs", pb.LogsRequest(app_handle="x", regex="(" * 2000)), "regex"),
    ("logs-stream", ("Logs", pb.LogsRequest(app_handle="x", streams=9)), "streams"),
    (
        "logs-since",
        ("Logs", pb.LogsRequest(app_handle="x", since=Timestamp(seconds=2**62))),
        "since",
    ),
    (
        "logs-until-nanos",
        ("Logs", pb.LogsRequest(app_handle="x", until=Timestamp(seconds=1, nanos=-5))),
        "until",
    ),
    (
        "logs-until-before-since",
        (
            "Logs",
            pb.LogsRequest(
                app_handle="x", since=Timestamp(seconds=100), until=Timestamp(seconds=99)
            ),
        ),
        "until",
    ),
    (
        "list-since",
        ("List", pb.ListRequest(created_since=Timestamp(seconds=-(2**62)))),
        "created_since",
    ),
    ("list-states", ("List", pb.ListRequest(states=[3] * 101)), "states"),
    ("list-token", ("List", pb.ListRequest(page_token="t" * (4 * KiB + 1))), "page_token"),
    (
        "prune-before",
        ("Prune", pb.PruneRequest(created_before=Timestamp(seconds=2**40), dry_run=True)),
        "created_before",
    ),
    ("runopts", ("RunOpts", pb.RunOptsRequest(scheduler="s" * 100_000)), "scheduler"),
]


@pytest.mark.parametrize(("call", "field"), [c[1:] for c in OVER], ids=[c[0] for c in OVER])
def test_over_a_limit(channel: grpc.Channel, call: tuple[str, Message], field: str) -> None:
    method, request = call
    with pytest.raises(grpc.RpcError) as info:
        _call(channel, method, request.SerializeToString())
    err = info.value
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    assert err.details().startswith(f"{field}: "), err.details()
    assert len(err.details().encode()) <= 1024


# At the limits: accepted (a DryRun, so nothing runs).
AT: list[tuple[str, AppDef]] = [
    ("1000-replicas-16KiB-each", _app(_role(num_replicas=1000, args=["x" * (16 * KiB - 8)]))),
    (
        "10000-replicas",
        _app(_role(name="a", num_replicas=6000), _role(name="b", num_replicas=4000)),
    ),
    ("args-1MiB", _app(_role(args=["x" * (128 * KiB)] * 7 + ["x" * (128 * KiB - 4)]))),
    ("env-4096", _app(_role(env={f"K{i}": "" for i in range(4096)}))),
]


@pytest.mark.parametrize("app", [a[1] for a in AT], ids=[a[0] for a in AT])
def test_at_the_limit(channel: grpc.Channel, app: AppDef) -> None:
    raw = _call(channel, "DryRun", pb.DryRunRequest(app=app).SerializeToString())
    assert pb.DryRunResponse.FromString(raw).request


def test_bad_utf8_names_the_field(channel: grpc.Channel) -> None:
    """Was UNKNOWN ("Unexpected DecodeError"), from gRPC's own parsing of the request."""
    marker = "\ue000\ue001"
    app = _app(_role(env={"HOME": marker}))
    raw = pb.DryRunRequest(app=app).SerializeToString().replace(marker.encode(), b"\xff" * 6)
    with pytest.raises(grpc.RpcError) as info:
        _call(channel, "DryRun", raw)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details().startswith("app.roles[0].env[HOME]: not valid UTF-8")


def test_not_a_message(channel: grpc.Channel) -> None:
    with pytest.raises(grpc.RpcError) as info:
        _call(channel, "Status", b"\xff\xff\xff")
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details().startswith("request: not a valid txd.v1.StatusRequest")


async def test_client_refuses_to_send_over_the_limit(client: Any) -> None:
    """The client's send limit is the daemon's receive limit: the same RESOURCE_EXHAUSTED."""
    from txd.client import ResourceExhaustedError

    app = _app(_role(args=["x" * (defaults.MAX_REQUEST_BYTES + 1)]))
    with pytest.raises(ResourceExhaustedError):
        await client.dryrun(app)


async def test_time_bounds_at_the_ends_of_the_allowed_years(
    client: Any, channel: grpc.Channel
) -> None:
    """Years 1 and 9999 are allowed but lie past the registry's 64-bit nanoseconds (1677 to
    2262): they bound nothing, instead of an OverflowError (found by test_fuzz: INTERNAL)."""
    handle = await client.run(sh_app("true", "bounds"), "local_cwd")
    await client.wait(handle, timeout=30)
    year_1, year_9999 = Timestamp(seconds=-62135596800), Timestamp(seconds=253402300799)
    req = pb.ListRequest(created_since=year_1, page_size=5000)
    listed = pb.ListResponse.FromString(_call(channel, "List", req.SerializeToString()))
    assert handle in [a.app_handle for a in listed.apps]
    req2 = pb.PruneRequest(created_before=year_9999, dry_run=True)
    pruned = pb.PruneResponse.FromString(_call(channel, "Prune", req2.SerializeToString()))
    assert pruned.pruned  # our job at least: every finished job is before year 9999
