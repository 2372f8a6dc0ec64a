"""The metrics' opt-in exposition besides the Metrics RPC (`[metrics]` in the config file):

- `textfile = "PATH.prom"`: node_exporter's textfile collector format (Prometheus text 0.0.4),
  rewritten every `interval` seconds (default 30) as a new file renamed over the old one, so
  node_exporter never reads half a file; removed when the daemon stops. Mode 0644: node_exporter
  runs as another user. For login nodes whose admins already run node_exporter.
- `listen = "unix:PATH"`: plain HTTP/1.1 `GET /metrics` on a Unix socket of mode 0600 (Prometheus
  and vmagent scrape Unix sockets), OpenMetrics when the scraper's Accept asks for it, else text
  0.0.4. Nothing else is served there.

Over TCP the metrics are the Metrics RPC on `--listen`, behind its TLS and token: a second,
HTTP port would need the same TLS and token checks in an HTTP server of its own, one more door
facing strangers, for what a scraper on the host gets from the textfile or the Unix socket and
a remote user from `txctl --host ... metrics`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path

from txd.daemon import socketfile
from txd.daemon.atomicfile import write_atomic
from txd.daemon.backends import SettingsError
from txd.daemon.metrics import OPENMETRICS, PROMETHEUS, Metrics, MetricsSettings
from txd.daemon.tasks import Tasks

log = logging.getLogger(__name__)

READ_TIMEOUT = 10.0  # seconds a scraper has to send its request
MAX_REQUEST = 16 << 10  # bytes of request line and headers


async def start(metrics: Metrics, settings: MetricsSettings, tasks: Tasks) -> None:
    """Starts what `settings` asks for; a path that cannot be used stops the daemon's start
    with a SettingsError naming it."""
    if (path := settings.textfile_path) is not None:
        try:
            write_textfile(metrics, path)
        except OSError as e:
            raise SettingsError(
                f"settings [metrics] textfile {path}: cannot write it: {e.strerror}"
            ) from None
        tasks.create_task(_textfile(metrics, path, settings.interval), name="metrics textfile")
    if (sock := settings.listen_path) is not None:
        server = await _listen(metrics, sock)
        tasks.create_task(_serve(server, sock), name="metrics http")
        log.info("metrics served over HTTP on unix:%s", sock)


def write_textfile(metrics: Metrics, path: Path) -> None:
    """The metrics in `path`, written whole under another name (not *.prom, so node_exporter
    skips it) and renamed over it."""
    data, _ = metrics.render(PROMETHEUS)
    write_atomic(path, data, mode=0o644)


async def _textfile(metrics: Metrics, path: Path, interval: float) -> None:
    failing = False
    try:
        while True:
            await asyncio.sleep(interval)
            try:
                write_textfile(metrics, path)
            except OSError as e:
                if not failing:  # once per run of failures
                    log.warning("cannot write the metrics textfile %s: %s", path, e.strerror)
                failing = True
            else:
                failing = False
    finally:
        with contextlib.suppress(OSError):
            path.unlink()  # a stopped daemon's numbers are not current


async def _listen(metrics: Metrics, path: Path) -> asyncio.Server:
    _claim(path)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(READ_TIMEOUT):
                head = await reader.readuntil(b"\r\n\r\n")
            status, body, ctype = _answer(metrics, head)
            # HEAD: the headers GET would get, no body.
            shown = b"" if head.startswith(b"HEAD ") else body
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + shown
            )
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            pass  # a scraper that went away or sent no request: nothing to answer
        finally:
            writer.close()

    try:
        server = await asyncio.start_unix_server(handle, str(path), limit=MAX_REQUEST)
    except OSError as e:
        raise SettingsError(
            f"settings [metrics] listen unix:{path}: cannot listen there: {e.strerror}"
        ) from None
    os.chmod(path, 0o600)
    return server


def _answer(metrics: Metrics, head: bytes) -> tuple[str, bytes, str]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    plain = "text/plain; charset=utf-8"
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return "400 Bad Request", b"not an HTTP request\n", plain
    method, target = parts[0], parts[1].split("?", 1)[0]
    if target != "/metrics":
        return "404 Not Found", b"only /metrics is served here\n", plain
    if method not in ("GET", "HEAD"):
        return "405 Method Not Allowed", b"GET /metrics\n", plain
    accept = ""
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "accept":
            accept = value
    fmt = OPENMETRICS if "application/openmetrics-text" in accept else PROMETHEUS
    body, ctype = metrics.render(fmt)
    return "200 OK", body, ctype


def _claim(path: Path) -> None:
    """Removes a stale socket of the user's at `path` (nobody listens); refuses anything else."""
    there = socketfile.clear_stale(path)
    if there is not None and there.live:
        raise SettingsError(f"settings [metrics] listen unix:{path}: another process listens there")
    if there is not None:
        raise SettingsError(
            f"settings [metrics] listen unix:{path}: something that is not a stale socket of "
            "yours is there: txd never removes it"
        )


async def _serve(server: asyncio.Server, path: Path) -> None:
    try:
        await server.serve_forever()
    finally:
        server.close()
        with contextlib.suppress(OSError):
            path.unlink()
