"""INVALID_ARGUMENT carries the bad field's path machine-readably: a google.rpc.Status in the
`grpc-status-details-bin` trailer holding one google.rpc.BadRequest, for every RPC, read here
with the raw stubs as any gRPC client would (the Python client's `.field` is checked for every
invalid AppDef in test_validation.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from google.rpc import code_pb2, error_details_pb2, status_pb2
from txd.client import InvalidArgumentError
from txd.v1 import AppDef, CfgValue, Role, runner_pb2_grpc
from txd.v1 import runner_pb2 as pb
from txd_testing import run_python


@pytest.fixture
def stub(shared_daemon: Any) -> Iterator[runner_pb2_grpc.RunnerStub]:
    with grpc.insecure_channel(f"unix:{shared_daemon.socket}") as channel:
        yield runner_pb2_grpc.RunnerStub(channel)


def _rich_status(err: grpc.RpcError) -> status_pb2.Status:
    [raw] = [v for k, v in err.trailing_metadata() if k == "grpc-status-details-bin"]
    return status_pb2.Status.FromString(raw)


# (id, call on the stub, the field path expected)
CALLS: list[tuple[str, Callable[[runner_pb2_grpc.RunnerStub], Any], str]] = [
    (
        "run-replicas",
        lambda s: s.Run(
            pb.RunRequest(
                app=AppDef(name="x", roles=[Role(name="r", entrypoint="true", num_replicas=0)])
            ),
            timeout=10,
        ),
        "app.roles[0].num_replicas",
    ),
    ("run-no-app-name", lambda s: s.Run(pb.RunRequest(), timeout=10), "app.name"),
    (
        "dryrun-option",
        lambda s: s.DryRun(
            pb.DryRunRequest(
                app=AppDef(name="x", roles=[Role(name="r", entrypoint="true")]),
                cfg={"bogus": CfgValue(str="1")},
            ),
            timeout=10,
        ),
        "cfg.bogus",
    ),
    (
        "status-handle",
        lambda s: s.Status(pb.StatusRequest(app_handle="local_cwd://nope"), timeout=10),
        "app_handle",
    ),
    ("list-page-size", lambda s: s.List(pb.ListRequest(page_size=-1), timeout=10), "page_size"),
    (
        "list-page-token",
        lambda s: s.List(pb.ListRequest(page_token="bogus"), timeout=10),
        "page_token",
    ),
    ("list-states", lambda s: s.List(pb.ListRequest(states=[3, 42]), timeout=10), "states[1]"),
]


@pytest.mark.parametrize(("call", "field"), [c[1:] for c in CALLS], ids=[c[0] for c in CALLS])
def test_bad_request_names_the_field(stub: Any, call: Any, field: str) -> None:
    with pytest.raises(grpc.RpcError) as info:
        call(stub)
    err = info.value
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    status = _rich_status(err)
    assert status.code == code_pb2.INVALID_ARGUMENT
    assert status.message == err.details()
    [detail] = status.details
    bad = error_details_pb2.BadRequest()
    assert detail.Unpack(bad), detail.type_url
    [violation] = bad.field_violations
    assert violation.field == field
    assert err.details() == f"{field}: {violation.description}"
    assert violation.description


def test_bad_regex_in_a_log_stream(stub: Any, shared_daemon: Any) -> None:
    """A streaming RPC carries the details too."""
    app = AppDef(name="x", roles=[Role(name="r", entrypoint="true")])
    handle = stub.Run(pb.RunRequest(app=app), timeout=10).app_handle
    with pytest.raises(grpc.RpcError) as info:
        list(stub.Logs(pb.LogsRequest(app_handle=handle, regex="("), timeout=10))
    [detail] = _rich_status(info.value).details
    bad = error_details_pb2.BadRequest()
    assert detail.Unpack(bad)
    assert [v.field for v in bad.field_violations] == ["regex"]


def test_other_errors_carry_no_field(stub: Any) -> None:
    with pytest.raises(grpc.RpcError) as info:
        stub.Status(pb.StatusRequest(app_handle="local_cwd://nosuch/app"), timeout=10)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    assert _rich_status(info.value).details == []


async def test_python_client_exposes_the_field(client: Any) -> None:
    app = AppDef(
        name="x",
        roles=[
            Role(name="a", entrypoint="true"),
            Role(name="b", entrypoint="true", max_retries=-1),
        ],
    )
    with pytest.raises(InvalidArgumentError) as info:
        await client.run(app)
    assert info.value.field == "app.roles[1].max_retries"
    assert info.value.violations == [("app.roles[1].max_retries", "must be >= 0, got -1")]


def test_details_are_parsed_only_when_asked(shared_daemon: Any) -> None:
    """txctl pays nothing for the details: a failed `txctl status` loads no google.rpc module;
    the client loads them when `.field` is read."""
    code = (
        "import sys\n"
        "from txd.client import cli\n"
        "rc = cli.main(sys.argv[1:])\n"
        "print('AFTER_CLI', any(m.startswith('google.rpc') for m in sys.modules))\n"
        "from txd.client import Client, InvalidArgumentError\n"
        "with Client(sys.argv[2]) as c:\n"
        "    try:\n"
        "        c.status('local_cwd://not-a-handle')\n"
        "    except InvalidArgumentError as e:\n"
        "        print('LOADED', any(m.startswith('google.rpc') for m in sys.modules))\n"
        "        print('FIELD', e.field)\n"
        "        print('AFTER_FIELD', 'google.rpc.error_details_pb2' in sys.modules)\n"
        "sys.exit(rc)\n"
    )
    proc = run_python(
        code,
        "--socket",
        str(shared_daemon.socket),
        "--no-autostart",
        "status",
        "local_cwd://not-a-handle",
        env=shared_daemon.txctl_env(),
    )
    assert proc.returncode == 2, proc.stderr
    assert "app_handle" in proc.stderr
    assert proc.stdout.split() == [
        "AFTER_CLI",
        "False",
        "LOADED",
        "False",
        "FIELD",
        "app_handle",
        "AFTER_FIELD",
        "True",
    ], proc.stdout
