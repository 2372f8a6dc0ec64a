"""Reads of logs holding one huge line, on a real daemon. A filtered read (--regex, --since) of a
200 MiB line: other RPCs stay fast while it runs, the line is searched whole
(txd.schedulers.logfiles.LINE_LIMIT, txd.schedulers.longlines), the daemon's memory stays
bounded, and a client that leaves stops the scan. A needle deep in a 40 MB line is found; the
--tail 1 of a 100 MiB line arrives whole."""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import os
import time
from asyncio.subprocess import PIPE
from pathlib import Path
from typing import Any

from txd.client import DeadlineExceededError
from txd.schedulers.logfiles import LINE_LIMIT
from txd.v1 import AppState
from txd_testing import TXCTL, py_app, read_logs

MiB = 1 << 20
LONG = 200 * MiB
LONG_LINE_HEAD = b"BEGIN"
SHORT_LINE = b"short needle\n"
# Each Status call during a scan: a blocked event loop makes them wait for minutes.
STATUS_BOUND = 1.0
STATUS_DEADLINE = 5.0
READ_TIMEOUT = 60.0
MAX_PINGS = 100_000
# The daemon's peak RSS during filtered reads, above what it had before them. The filter holds
# at most about LINE_LIMIT bytes of a line; the rest is gRPC's and the allocator's slack (about
# 5 MiB measured). Holding a line whole costs twice its length.
RSS_GROWTH_BOUND_MIB = 16


def _writer(size: int, then: bytes = SHORT_LINE) -> str:
    """Code writing one line of "BEGIN" + `size` bytes of "x" (in 1 MiB blocks), then `then`
    (a short line)."""
    return (
        "import sys\n"
        "w = sys.stdout.buffer\n"
        f"w.write({LONG_LINE_HEAD!r})\n"
        "block = b'x' * (1 << 20)\n"
        f"for _ in range({size // MiB}):\n"
        "    w.write(block)\n"
        f"w.write(b'\\n' + {then!r})\n"
    )


async def _write_long_line(client: Any, size: int, then: bytes = SHORT_LINE) -> str:
    handle = await client.run(py_app(_writer(size, then)))
    status = await client.wait(handle, timeout=120)
    assert status.state == AppState.SUCCEEDED, status
    return handle


async def _read_while_pinging(
    daemon: Any, handle: str, **kw: Any
) -> tuple[int, str, bytes, list[float]]:
    """Reads the logs (size, sha256, first bytes) while two other clients call Status in a
    loop until the read ends; returns each Status call's latency too."""
    size, digest, head = 0, hashlib.sha256(), b""
    latencies: list[float] = []
    async with (
        daemon.client() as reader,
        daemon.client(timeout=STATUS_DEADLINE) as p1,
        daemon.client(timeout=STATUS_DEADLINE) as p2,
    ):

        async def read() -> None:
            nonlocal size, head
            async for chunk in reader.logs(handle, **kw):
                if len(head) < 64:
                    head += chunk.data[:64]
                digest.update(chunk.data)
                size += len(chunk.data)

        async def ping(pinger: Any) -> None:
            for _ in range(MAX_PINGS):
                if reading.done():
                    return
                start = time.monotonic()
                try:
                    await pinger.status(handle)
                except DeadlineExceededError:
                    raise AssertionError(
                        f"Status took over {STATUS_DEADLINE} s during a filtered read {kw}: "
                        "the daemon's event loop is blocked"
                    ) from None
                latencies.append(time.monotonic() - start)

        reading = asyncio.get_running_loop().create_task(read())
        try:
            async with asyncio.timeout(READ_TIMEOUT):
                await asyncio.gather(ping(p1), ping(p2))
                await reading
        finally:
            reading.cancel()
    return size, digest.hexdigest(), head, latencies


def _vm(pid: int, field: str) -> int:
    """A /proc/<pid>/status field in KiB (VmRSS, VmHWM)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field}")


def _reset_peak_rss(pid: int) -> None:
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS


def _assert_rss_growth_bounded(pid: int, rss_before_kib: int) -> None:
    growth_mib = (_vm(pid, "VmHWM") - rss_before_kib) / 1024
    assert growth_mib < RSS_GROWTH_BOUND_MIB, (
        f"the daemon's RSS peaked {growth_mib:.0f} MiB above its baseline during the reads"
        f" (line limit {LINE_LIMIT // MiB} MiB)"
    )


async def _warm_up(daemon: Any, handle: str) -> None:
    """Plain reads of the whole log, through the client and through txctl, then the peak RSS
    reset: what gRPC keeps in flight for a reader slower than the daemon (up to about 30 MiB,
    whatever the read) and the allocator's arenas are then part of the baseline, and a bound
    measures what a read itself holds."""
    async with daemon.client() as c, asyncio.timeout(READ_TIMEOUT):
        async for _ in c.logs(handle):
            pass
    code, _, err = await _txctl_logs(daemon, handle)
    assert code == 0, err
    _reset_peak_rss(daemon.pid)


def _bytes_read(pid: int) -> int:
    """Bytes the process has passed to read()/pread() so far (files and sockets alike)."""
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    raise AssertionError("no rchar")


def _log_readers(pid: int, state_dir: Path) -> int:
    """How many of the daemon's file descriptors are open on a job log for reading."""
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                flags = next(int(line.split()[1], 8) for line in f if line.startswith("flags:"))
        except FileNotFoundError:  # closed meanwhile
            continue
        if target.startswith(str(state_dir)) and target.endswith(".log"):
            n += flags & os.O_ACCMODE == os.O_RDONLY
    return n


async def test_filtered_read_of_a_200mib_line_keeps_the_daemon_responsive(daemon: Any) -> None:
    async with daemon.client() as c:
        handle = await _write_long_line(c, LONG)
    long_line = LONG_LINE_HEAD + b"x" * LONG + b"\n"
    _reset_peak_rss(daemon.pid)
    rss_before = _vm(daemon.pid, "VmRSS")

    # Not matched anywhere in it: the long line is dropped, the short one kept.
    size, digest, head, latencies = await _read_while_pinging(daemon, handle, regex="needle")
    assert head == SHORT_LINE
    assert size == len(SHORT_LINE)
    assert len(latencies) >= 3, "the read ended before Status could be called during it"
    assert max(latencies) < STATUS_BOUND, f"Status took up to {max(latencies):.2f} s"

    # Matched at its start: the whole long line is sent, and only it.
    size, digest, head, latencies = await _read_while_pinging(daemon, handle, regex="^BEGINx")
    assert head == long_line[:64]
    assert size == len(long_line)
    assert digest == hashlib.sha256(long_line).hexdigest()
    assert len(latencies) >= 3
    assert max(latencies) < STATUS_BOUND, f"Status took up to {max(latencies):.2f} s"

    # since after the job: every line's first byte is older, so nothing, and quickly.
    since = dt.datetime.now(dt.UTC)
    size, digest, head, latencies = await _read_while_pinging(daemon, handle, since=since)
    assert size == 0
    assert len(latencies) >= 3
    assert max(latencies) < STATUS_BOUND, f"Status took up to {max(latencies):.2f} s"

    _assert_rss_growth_bounded(daemon.pid, rss_before)


async def test_filtered_read_of_a_long_line_keeps_daemon_memory_bounded(daemon: Any) -> None:
    """The same reads of a 24 MiB line, without the Status calls: a line short enough for
    the daemon to finish even when it holds the line whole, which takes twice its size."""
    size = 24 * MiB
    async with daemon.client() as c:
        handle = await _write_long_line(c, size)
        await _warm_up(daemon, handle)
        rss_before = _vm(daemon.pid, "VmRSS")
        async with asyncio.timeout(READ_TIMEOUT):
            assert await read_logs(c, handle, regex="needle") == SHORT_LINE
            _assert_rss_growth_bounded(daemon.pid, rss_before)
            # Sent in messages the client accepts (gRPC's default limit is 4 MiB).
            sent = 0
            async for chunk in c.logs(handle, regex="^BEGINx"):
                sent += len(chunk.data)
            assert sent == len(LONG_LINE_HEAD) + size + 1
            _assert_rss_growth_bounded(daemon.pid, rss_before)
            since = dt.datetime.now(dt.UTC)
            assert await read_logs(c, handle, since=since) == b""
            _assert_rss_growth_bounded(daemon.pid, rss_before)


async def test_client_leaving_a_filtered_read_stops_it(daemon: Any) -> None:
    """A reader that takes the first chunk of the matched long line and then goes away: the
    daemon stops reading the log (closes it) instead of scanning on."""
    async with daemon.client() as c:
        handle = await _write_long_line(c, LONG)
        assert _log_readers(daemon.pid, daemon.state_dir) == 0
        read_before = _bytes_read(daemon.pid)
        stream = c.logs(handle, regex="^BEGIN")
        async with asyncio.timeout(READ_TIMEOUT):
            first = await anext(stream)
        assert first.data.startswith(LONG_LINE_HEAD + b"x")
        # The client reads no more: gRPC's flow control holds the daemon mid-line, log open.
        assert _log_readers(daemon.pid, daemon.state_dir) == 1
        await stream.aclose()  # cancels the call
        deadline = time.monotonic() + 10
        for _ in range(2000):
            if _log_readers(daemon.pid, daemon.state_dir) == 0 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.005)
        assert _log_readers(daemon.pid, daemon.state_dir) == 0, "the log is still being read"
        read_mib = (_bytes_read(daemon.pid) - read_before) / MiB
        assert read_mib < LONG / MiB / 4, f"the daemon read {read_mib:.0f} MiB of a 200 MiB log"
        # And it still answers, with the whole log for a reader that stays.
        assert await read_logs(c, handle, regex="needle") == SHORT_LINE


async def test_tail_of_a_100mb_line_arrives_whole_in_bounded_daemon_memory(daemon: Any) -> None:
    """`txctl logs --tail 1` of a line larger than gRPC's 64 MiB message limit: whole and
    byte-exact, with and without -f, and through the Python client in small messages, while
    the daemon's memory does not grow with the line (it held the line whole, about 5 times)."""
    size = 100 * MiB
    async with daemon.client() as c:
        handle = await _write_long_line(c, size, then=b"")
    long_line = LONG_LINE_HEAD + b"x" * size + b"\n"
    await _warm_up(daemon, handle)
    rss_before = _vm(daemon.pid, "VmRSS")
    for follow in ([], ["-f"]):
        proc = await asyncio.create_subprocess_exec(
            *TXCTL, "--socket", str(daemon.socket), "--no-autostart", "logs", *follow,
            "--tail", "1", handle,
            stdout=PIPE, stderr=PIPE, env=daemon.txctl_env(),
        )  # fmt: skip
        async with asyncio.timeout(READ_TIMEOUT):
            out, err = await proc.communicate()
        assert proc.returncode == 0, (follow, proc.returncode, err[-2000:])
        assert len(out) == len(long_line), follow
        assert hashlib.sha256(out).digest() == hashlib.sha256(long_line).digest()
        _assert_rss_growth_bounded(daemon.pid, rss_before)
    async with daemon.client() as c, asyncio.timeout(READ_TIMEOUT):
        sizes = [len(chunk.data) async for chunk in c.logs(handle, tail=1)]
    assert sum(sizes) == len(long_line)
    assert max(sizes) <= 4 * MiB  # gRPC's default receive limit
    _assert_rss_growth_bounded(daemon.pid, rss_before)


def _needle_writer(half: int) -> str:
    """Code writing a short line, one line of `half` bytes of "x", "needle", `half` more, then
    a short line."""
    return (
        "import sys\n"
        "w = sys.stdout.buffer\n"
        f"w.write({SHORT_LINE!r} + {LONG_LINE_HEAD!r})\n"
        "block = b'x' * (1 << 20)\n"
        f"for _ in range({half // MiB}):\n"
        "    w.write(block)\n"
        "w.write(b'needle')\n"
        f"for _ in range({half // MiB}):\n"
        "    w.write(block)\n"
        "w.write(b'\\nend\\n')\n"
    )


async def _txctl_logs(daemon: Any, *args: str) -> tuple[int | None, bytes, bytes]:
    proc = await asyncio.create_subprocess_exec(
        *TXCTL, "--socket", str(daemon.socket), "--no-autostart", "logs", *args,
        stdout=PIPE, stderr=PIPE, env=daemon.txctl_env(),
    )  # fmt: skip
    async with asyncio.timeout(READ_TIMEOUT):
        out, err = await proc.communicate()
    return proc.returncode, out, err


async def test_regex_finds_a_needle_20mb_into_a_40mb_line(daemon: Any) -> None:
    """Issue 18, item 6: `txctl logs --regex needle` printed nothing and exited 0 when the
    match lay past the first MiB of a long line. The line is found and sent whole now, in
    bounded daemon memory; a pattern that cannot match prints nothing and says nothing; one
    whose matches can be longer than the search windows names the line it did not match."""
    half = 20 * MiB
    async with daemon.client() as c:
        handle = await c.run(py_app(_needle_writer(half)))
        assert (await c.wait(handle, timeout=120)).state == AppState.SUCCEEDED
    long_line = LONG_LINE_HEAD + b"x" * half + b"needle" + b"x" * half + b"\n"
    await _warm_up(daemon, handle)
    rss_before = _vm(daemon.pid, "VmRSS")

    for follow in ([], ["-f"]):
        code, out, err = await _txctl_logs(daemon, *follow, "--regex", "needle", handle)
        assert code == 0, err
        assert (len(out), hashlib.sha256(out).digest()) == (
            len(SHORT_LINE + long_line),
            hashlib.sha256(SHORT_LINE + long_line).digest(),
        )
        assert err == b""
        _assert_rss_growth_bounded(daemon.pid, rss_before)

    code, out, err = await _txctl_logs(daemon, "--regex", "needles|nothing", handle)
    assert (code, out, err) == (0, b"", b"")

    # `BEGIN.*needle` can match 20 MB: not found in any window, and said so.
    code, out, err = await _txctl_logs(daemon, "--regex", "^BEGIN.*needle", handle)
    assert (code, out) == (0, b"")
    offset = len(SHORT_LINE)
    assert f"at byte {offset} ({len(long_line) - 1} bytes)".encode() in err, err
    async with daemon.client() as c:
        chunks = [x async for x in c.logs(handle, regex="^BEGIN.*needle")]
    assert [(x.long_line.offset, x.long_line.length, x.data) for x in chunks] == [
        (offset, len(long_line) - 1, b"")
    ]
    _assert_rss_growth_bounded(daemon.pid, rss_before)
