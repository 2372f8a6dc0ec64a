"""`txd --log-format json`: a real daemon serving the Unix socket and the TLS+token TCP listener,
its every log line one JSON object; one access line per RPC naming the method, its code, its
duration and the door; and nothing of a job's env or args, nor a token, anywhere in the log.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import secrets
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from txd.v1 import AppState
from txd.v1 import runner_pb2 as pb
from txd.v1.runner_pb2_grpc import RunnerStub
from txd_testing import Daemon, log_alarms, read_logs, remove_tree, sh_app, short_tmpdir

pytest.importorskip("cryptography")
from observe_testing import Served, start

TIMEOUT = 30


@pytest.fixture
def jsond() -> Iterator[Served]:
    root = short_tmpdir("txdt-json-")
    t = start(root, "--log-format", "json", "--log-level", "debug")
    try:
        yield t
    finally:
        t.daemon.close()
        remove_tree(root)


def _lines(log: str) -> list[dict[str, Any]]:
    out = []
    for n, line in enumerate(log.splitlines(), 1):
        try:
            record = json.loads(line)
        except ValueError:
            raise AssertionError(f"line {n} is not JSON: {line!r}") from None
        assert isinstance(record, dict), line
        assert {"time", "level", "logger", "msg"} <= record.keys(), line
        when = dt.datetime.fromisoformat(record["time"])  # RFC 3339, with its zone
        assert when.tzinfo is not None, line
        out.append(record)
    return out


def _access(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["logger"] == "txd.access"]


def test_json_lines_name_every_rpc_and_hold_no_secret(jsond: Served) -> None:
    d = jsond.daemon
    env_secret = "envsecret-" + secrets.token_hex(16)
    arg_secret = "argsecret-" + secrets.token_hex(16)
    caller_secret = "callersecret-" + secrets.token_hex(16)
    wrong_token = "txd_" + secrets.token_urlsafe(32)
    token = jsond.token

    async def over_the_socket() -> str:
        async with d.client() as client:
            # The secret in the args is also in the script's text: both are the job's args.
            app = sh_app(
                f'echo "$TXD_T_SECRET" | wc -c; : {arg_secret}', env={"TXD_T_SECRET": env_secret}
            )
            handle = await client.run(
                app, env={"CALLER_SECRET": caller_secret, "PATH": "/usr/bin:/bin"}
            )
            status = await client.wait(handle, timeout=TIMEOUT)
            assert status.state == AppState.SUCCEEDED, status
            assert (await read_logs(client, handle)).strip() == b"43"
            statuses = [s async for s in client.watch(handle)]
            assert statuses[-1].state == AppState.SUCCEEDED
            return handle

    handle = asyncio.run(over_the_socket())
    with jsond.channel() as ch:
        runner = RunnerStub(ch)
        listed = runner.List(pb.ListRequest(), metadata=jsond.metadata(), timeout=TIMEOUT)
        assert [s.app_handle for s in listed.apps] == [handle]
        with pytest.raises(grpc.RpcError) as info:
            runner.Status(
                pb.StatusRequest(app_handle="local_cwd://txd/nope"),
                metadata=jsond.metadata(),
                timeout=TIMEOUT,
            )
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.RpcError) as info:
            runner.List(pb.ListRequest(), metadata=jsond.metadata(wrong_token), timeout=TIMEOUT)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert d.stop() == 0

    log = d.log()
    for secret in (env_secret, arg_secret, caller_secret, token, wrong_token):
        assert secret not in log, secret[:12]
    records = _lines(log)
    assert not log_alarms(log), log
    access = _access(records)
    seen = {(r["method"], r["code"], r["door"]) for r in access}
    runner_ = "/txd.v1.Runner/"
    for method in ("Run", "Wait", "Logs"):
        assert (runner_ + method, "OK", "unix") in seen, (method, seen)
    assert (runner_ + "Watch", "OK", "watch") in seen, seen  # the client's watch: its door
    assert (runner_ + "List", "OK", "tcp") in seen, seen
    assert (runner_ + "Status", "NOT_FOUND", "tcp") in seen, seen
    assert (runner_ + "List", "UNAUTHENTICATED", "tcp") in seen, seen
    for r in access:
        assert isinstance(r["ms"], float | int) and r["ms"] >= 0, r
        assert r["level"] == "INFO", r
        if r["door"] == "tcp":
            assert r["peer"].startswith("ipv4:127.0.0.1:"), r
        else:
            assert "peer" not in r, r  # a Unix socket's peer is no one in particular
    (refused,) = [r for r in access if r["code"] == "UNAUTHENTICATED"]
    assert refused["type"] == "unary", refused  # the method's own type, not the refusal's
    (logs_line,) = [r for r in access if r["method"] == runner_ + "Logs"]
    assert logs_line["type"] == "server_stream" and logs_line["sent"] >= 1, logs_line
    (watch_line,) = [r for r in access if r["method"] == runner_ + "Watch"]
    assert watch_line["received"] == 1 and watch_line["sent"] == 1, watch_line
    # Every RPC got exactly one line: the Run, and the one Status.
    assert sum(r["method"] == runner_ + "Run" for r in access) == 1
    assert sum(r["method"] == runner_ + "Status" for r in access) == 1
    # The daemon's other records are JSON too, with their own loggers.
    assert any(r["logger"] == "txd.daemon.server" for r in records), records


def test_text_format_keeps_access_lines_at_debug() -> None:
    root = short_tmpdir("txdt-text-")
    (root / "a").mkdir()
    (root / "b").mkdir()
    quiet, loud = Daemon(root / "a"), Daemon(root / "b", args=["--log-level", "debug"])
    try:
        for d in (quiet, loud):
            d.start()
            d.txctl("list", check=True)
            assert d.stop() == 0
        assert "/txd.v1.Runner/List" not in quiet.log(), quiet.log()
        line = next(x for x in loud.log().splitlines() if "/txd.v1.Runner/List" in x)
        assert " DEBUG txd.access: /txd.v1.Runner/List OK " in line and "via unix" in line, line
        assert not loud.log().lstrip().startswith("{")
    finally:
        quiet.close()
        loud.close()
        remove_tree(root)
