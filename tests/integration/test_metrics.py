"""The daemon's metrics from a real txd: the Metrics RPC (`txctl metrics`) in both text formats,
checked by Prometheus's own `promtool check metrics` with jobs of every state; counters that
move by what known calls did; the node_exporter textfile, replaced whole; the HTTP endpoint on a
Unix socket; and the TCP listener, which gives them only with its token.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om
from prometheus_client.parser import text_string_to_metric_families as parse_text
from txd.daemon.jobstore import JobRecord, JobStore
from txd.v1 import AppDef, AppState, AppStatus, Role
from txd.v1 import runner_pb2 as pb
from txd.v1.runner_pb2_grpc import RunnerStub
from txd_testing import clean_env, log_alarms, remove_tree, sh_app, short_tmpdir

pytest.importorskip("cryptography")
from observe_testing import Served, start

TIMEOUT = 30
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def promtool(text: str) -> None:
    """`promtool check metrics` on `text`: it must pass without a lint problem."""
    tool = shutil.which("promtool")
    if tool is None:
        if shutil.which("apt-get"):
            pytest.fail("promtool is missing: scripts/test installs it (Debian's prometheus)")
        pytest.skip("promtool is missing and apt-get is not here to install it")
    proc = subprocess.run(
        [tool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=TIMEOUT
    )
    assert proc.returncode == 0, (proc.stdout, proc.stderr)


def samples(text: str, openmetrics: bool = False) -> Samples:
    families = parse_om(text) if openmetrics else parse_text(text)
    return {(s.name, frozenset(s.labels.items())): s.value for f in families for s in f.samples}


def value(found: Samples, name: str, **labels: str) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


def _unknown_record(scheduler: str = "retired") -> JobRecord:
    """A job the store holds as UNKNOWN, of a scheduler no longer installed: the daemon cannot
    follow it after its start, so UNKNOWN it stays (a live state for the store: a local_cwd
    job in it would be settled FAILED at the start)."""
    app_id = "forgotten-1"
    handle = f"{scheduler}://txd/{app_id}"
    status = AppStatus(
        state=AppState.UNKNOWN,
        msg="the backend no longer knows this job",
        app_handle=handle,
        scheduler=scheduler,
        app_id=app_id,
        name="forgotten",
    )
    created = time.time() - 60
    status.created.FromNanoseconds(int(created * 1e9))
    return JobRecord(
        handle=handle,
        scheduler=scheduler,
        app_id=app_id,
        created=created,
        app=AppDef(name="forgotten", roles=[Role(name="r", entrypoint="true")]),
        status=status,
        cfg={},
        native={"app_dir": f"/nonexistent/txd-forgotten/{app_id}", "replicas": []},
    )


@pytest.fixture
def served() -> Iterator[Served]:
    root = short_tmpdir("txdt-metrics-")
    out = root / "metrics"
    out.mkdir()
    state = root / "state"
    state.mkdir(mode=0o700)
    store = JobStore.in_state_dir(state)
    try:
        store.insert_many([_unknown_record()])
    finally:
        store.close()
    t = start(
        root,
        "--set", f"metrics.textfile={out / 'txd.prom'}",
        "--set", "metrics.interval=1",
        "--set", f"metrics.listen=unix:{out / 'metrics.sock'}",
    )  # fmt: skip
    try:
        yield t
    finally:
        t.daemon.close()
        log = t.daemon.log()
        remove_tree(root)
        assert not log_alarms(log), log


async def _until(c: Any, handle: str, state: int) -> None:
    async with asyncio.timeout(TIMEOUT):
        async for status in c.watch(handle):
            if status.state == state:
                return
    raise AssertionError(f"{handle} ended before reaching {AppState.Name(state)}")


async def _every_state(c: Any) -> dict[str, str]:
    """A local_cwd job in each state but UNKNOWN (seeded in the store): their handles."""
    handles = {
        "SUCCEEDED": await c.run(sh_app("true")),
        "FAILED": await c.run(sh_app("exit 3")),
        "CANCELLED": await c.run(sh_app("sleep 300")),
        "RUNNING": await c.run(sh_app("sleep 300")),
    }
    for state in ("SUCCEEDED", "FAILED"):
        assert (await c.wait(handles[state], timeout=TIMEOUT)).state == AppState.Value(state)
    await _until(c, handles["CANCELLED"], AppState.RUNNING)
    await c.cancel(handles["CANCELLED"])
    assert (await c.wait(handles["CANCELLED"], timeout=TIMEOUT)).state == AppState.CANCELLED
    await _until(c, handles["RUNNING"], AppState.RUNNING)
    return handles


def test_promtool_passes_with_jobs_of_every_state(served: Served) -> None:
    d = served.daemon

    async def go() -> tuple[str, str]:
        async with d.client() as c:
            await _every_state(c)
            om = await c.metrics()
            text = await c.metrics(prometheus=True)
            assert om.content_type.startswith("application/openmetrics-text; version=1.0.0")
            assert text.content_type.startswith("text/plain; version=0.0.4")
            return om.text, text.text

    om, text = asyncio.run(go())
    promtool(text)
    assert om.endswith("# EOF\n")
    found = samples(om, openmetrics=True)  # the strict OpenMetrics parser takes it
    for state in ("SUCCEEDED", "FAILED", "CANCELLED", "RUNNING"):
        assert value(found, "txd_jobs", scheduler="local_cwd", state=state) == 1, state
    assert value(found, "txd_jobs", scheduler="retired", state="UNKNOWN") == 1
    # The same numbers in both formats (but the histogram's sum and the process's, which move).
    plain = samples(text)
    assert value(plain, "txd_jobs", scheduler="local_cwd", state="RUNNING") == 1
    for name in ("grpc_server_started_total", "grpc_server_msg_sent_total"):
        assert (
            value(plain, name, grpc_type="unary", grpc_service="txd.v1.Runner", grpc_method="Run")
            == 4
        )
    # txctl prints the same exposition.
    proc = d.txctl("metrics", "--format", "prometheus", check=True)
    promtool(proc.stdout)
    assert d.txctl("metrics", check=True).stdout.endswith("# EOF\n")
    # No label takes a job's values: no handle, app id or user anywhere.
    for key in found:
        for label, label_value in key[1]:
            assert "://" not in label_value and "forgotten" not in label_value, (label, key)


def test_counters_move_by_what_calls_did(served: Served) -> None:
    d = served.daemon
    rpc = {"grpc_service": "txd.v1.Runner"}

    def last_seq() -> int:
        db = sqlite3.connect(f"file:{d.state_dir / 'jobs.db'}?mode=ro", uri=True)
        try:
            return int(
                db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone()[0]
            )
        finally:
            db.close()

    seqs: list[int] = []

    async def go() -> tuple[Samples, Samples]:
        async with d.client() as c:
            before = samples((await c.metrics(prometheus=True)).text)
            seqs.append(last_seq())
            for _ in range(3):
                with pytest.raises(Exception, match="no job"):
                    await c.status("local_cwd://txd/none")
            for _ in range(2):
                await c.list()
            handle = await c.run(sh_app("echo one; echo two"))
            assert (await c.wait(handle, timeout=TIMEOUT)).state == AppState.SUCCEEDED
            statuses = [s async for s in c.watch(handle)]
            assert len(statuses) == 1
            after = samples((await c.metrics(prometheus=True)).text)
            seqs.append(last_seq())
            return before, after

    before, after = asyncio.run(go())

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    unary = {**rpc, "grpc_type": "unary"}
    assert moved("grpc_server_started_total", **unary, grpc_method="Status") == 3
    assert (
        moved("grpc_server_handled_total", **unary, grpc_method="Status", grpc_code="NotFound") == 3
    )
    assert moved("grpc_server_handled_total", **unary, grpc_method="List", grpc_code="OK") == 2
    assert moved("grpc_server_msg_sent_total", **unary, grpc_method="Status") == 0
    assert moved("grpc_server_handling_seconds_count", **unary, grpc_method="List") == 2
    stream = {**rpc, "grpc_type": "server_stream", "grpc_method": "Watch"}
    assert moved("grpc_server_msg_received_total", **stream) == 1
    assert moved("grpc_server_msg_sent_total", **stream) == 1
    assert moved("grpc_server_handled_total", **stream, grpc_code="OK") == 1
    local = {"scheduler": "local_cwd"}
    assert moved("txd_backend_calls_total", **local, op="submit") == 1
    assert moved("txd_backend_failures_total", **local, op="submit") == 0
    assert moved("txd_job_transitions_total", **local, state="SUBMITTED") == 1
    assert moved("txd_job_transitions_total", **local, state="SUCCEEDED") == 1
    assert moved("txd_jobs", **local, state="SUCCEEDED") == 1
    # Every status recorded is an event (a replica's change within a state too): as many as the
    # job store's event numbers moved.
    assert moved("txd_events_committed_total") == seqs[1] - seqs[0] >= 2


def test_the_textfile_is_replaced_whole(served: Served) -> None:
    path = served.daemon.root / "metrics" / "txd.prom"
    assert path.exists()  # written before the daemon said it was ready
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # node_exporter is another user
    inodes: set[int] = set()
    deadline = time.monotonic() + TIMEOUT
    reads = 0
    # Read it over and over while it is rewritten (every second): every read is a whole file,
    # and it is a new file each time (renamed over the old one, never rewritten in place).
    while len(inodes) < 3 and time.monotonic() < deadline:
        with open(path, "rb") as f:
            inode = os.fstat(f.fileno()).st_ino
            text = f.read().decode()
        reads += 1
        found = samples(text)
        assert ("txd_event_subscribers", frozenset()) in found, text[-200:]
        assert text.endswith("\n")
        inodes.add(inode)
    assert len(inodes) >= 3, f"the textfile was not rewritten within {TIMEOUT} s"
    promtool(path.read_text())
    leftovers = [p.name for p in path.parent.iterdir() if p.name.endswith(".prom")]
    assert leftovers == ["txd.prom"], leftovers
    assert served.daemon.stop() == 0
    assert not path.exists()  # a stopped daemon's numbers are not current


def _http(path: Path, request: bytes, head_only: bool = False) -> tuple[str, dict[str, str], bytes]:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(TIMEOUT)
        s.connect(str(path))
        s.sendall(request)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status, *lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    if head_only:
        assert body == b"" and int(headers["content-length"]) > 0
    else:
        assert int(headers["content-length"]) == len(body)
    return status, headers, body


def test_http_on_the_unix_socket(served: Served) -> None:
    sock = served.daemon.root / "metrics" / "metrics.sock"
    assert stat.S_ISSOCK(sock.stat().st_mode)
    assert stat.S_IMODE(sock.stat().st_mode) == 0o600
    status, headers, body = _http(sock, b"GET /metrics HTTP/1.1\r\nHost: txd\r\n\r\n")
    assert status == "HTTP/1.1 200 OK"
    assert headers["content-type"].startswith("text/plain; version=0.0.4")
    promtool(body.decode())
    accept = b"Accept: application/openmetrics-text; version=1.0.0,text/plain;q=0.5\r\n"
    status, headers, body = _http(sock, b"GET /metrics HTTP/1.1\r\n" + accept + b"\r\n")
    assert headers["content-type"].startswith("application/openmetrics-text")
    assert body.endswith(b"# EOF\n") and samples(body.decode(), openmetrics=True)
    status, headers, _ = _http(sock, b"HEAD /metrics HTTP/1.1\r\n\r\n", head_only=True)
    assert status == "HTTP/1.1 200 OK" and headers["content-type"].startswith("text/plain")
    status, _, _ = _http(sock, b"GET /jobs HTTP/1.1\r\n\r\n")
    assert status == "HTTP/1.1 404 Not Found"
    status, _, _ = _http(sock, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
    assert status == "HTTP/1.1 405 Method Not Allowed"
    assert served.daemon.stop() == 0
    assert not sock.exists()


def test_over_tcp_only_with_the_token(served: Served) -> None:
    with served.channel() as ch:
        metrics = RunnerStub(ch).Metrics
        for metadata in ([], served.metadata("txd_" + "B" * 43)):
            with pytest.raises(grpc.RpcError) as info:
                metrics(pb.MetricsRequest(), metadata=metadata, timeout=TIMEOUT)
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        got = metrics(pb.MetricsRequest(), metadata=served.metadata(), timeout=TIMEOUT)
    refused = value(
        samples(got.text, openmetrics=True),
        "grpc_server_handled_total",
        grpc_type="unary",
        grpc_service="txd.v1.Runner",
        grpc_method="Metrics",
        grpc_code="Unauthenticated",
    )
    assert refused == 2
    assert served.token not in got.text


def test_stale_statuses_and_backend_failures(plugin_daemon: Any) -> None:
    """fakepoll's backend down: its job's status goes stale, its polls are failures."""
    down = Path(plugin_daemon.state_dir) / "schedulers" / "fakepoll" / "down"
    down.parent.mkdir(parents=True, exist_ok=True)
    down.touch()

    async def go() -> tuple[Samples, Samples]:
        async with plugin_daemon.client() as c:
            app = AppDef(name="stale", roles=[Role(name="r", entrypoint="anything")])
            handle = await c.run(app, "fakepoll", cwd="/")
            async with asyncio.timeout(TIMEOUT):
                async for status in c.watch(handle):
                    if status.HasField("stale_since"):
                        break
            down_now = samples((await c.metrics(prometheus=True)).text)
            down.unlink()
            async with asyncio.timeout(TIMEOUT):
                async for status in c.watch(handle):
                    if not status.HasField("stale_since"):
                        break
            await c.cancel(handle)
            return down_now, samples((await c.metrics(prometheus=True)).text)

    down_now, up = asyncio.run(go())
    fake = {"scheduler": "fakepoll"}
    assert value(down_now, "txd_status_stale_jobs", **fake) == 1
    assert value(down_now, "txd_backend_failures_total", **fake, op="describe") >= 1
    calls = value(down_now, "txd_backend_calls_total", **fake, op="describe")
    assert calls >= value(down_now, "txd_backend_failures_total", **fake, op="describe")
    assert value(up, "txd_status_stale_jobs", **fake) == 0
    assert value(up, "txd_backend_calls_total", **fake, op="cancel") == 1


@pytest.mark.parametrize(
    ("setting", "words"),
    [
        ("metrics.textfile=/tmp/txd-metrics.txt", "reads only files named *.prom"),
        ("metrics.textfile=/nonexistent/dir/txd.prom", "cannot write it"),
        ("metrics.listen=tcp://127.0.0.1:9100", "expected unix:PATH"),
        ("metrics.port=9100", "unknown key 'port'"),
    ],
)
def test_a_bad_metrics_setting_stops_the_start(tmp_path: Path, setting: str, words: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "txd.daemon", "--socket", str(tmp_path / "run" / "txd.sock"),
         "--state-dir", str(tmp_path / "state"), "--set", setting],
        capture_output=True, text=True, env=clean_env(), timeout=TIMEOUT,
    )  # fmt: skip
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert words in proc.stderr and "[metrics]" in proc.stderr, proc.stderr
