"""A `txctl dashboard` process and the ways tests (and scripts/bench) talk to it.

- `Dashboard(argv, env)`: starts `txctl ... dashboard --no-open`, reads the URL it prints (its
  `port` and `token`), keeps its stderr lines (`wait_stderr(pattern)`), `close()` ends it by
  pid (SIGTERM, then SIGKILL).
- `dashboard.request(method, path, headers=, body=)`: one raw HTTP request (http.client sets
  nothing but what is asked, Host included when given), returns (status, body);
  `exchange(...)` the same with the response's headers: (status, headers, body).
- `dashboard.sse(path, headers=)`: the (event, data) pairs of a Server-Sent Events stream.
- `chromium()`: Debian's /usr/bin/chromium driven by Playwright (never Playwright's own
  browsers), or why it cannot run (`browser_missing()`).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from txd_testing import TXCTL

CHROMIUM = "/usr/bin/chromium"
START_TIMEOUT = 30.0
WAIT_TIMEOUT = 20.0
URL_RE = re.compile(r"(http://127\.0\.0\.1:(\d+)/#token=([A-Za-z0-9_-]+))")
# scripts/test sets it: there a missing browser fails the tier instead of skipping it.
REQUIRED_VAR = "TXD_DASHBOARD_REQUIRED"


def browser_missing() -> str | None:
    if not os.path.exists(CHROMIUM):
        return f"{CHROMIUM} is missing (apt-get install chromium; scripts/test does)"
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install playwright; scripts/test does)"
    return None


def chromium_args() -> list[str]:
    # As root (CI, this machine) Chromium's sandbox cannot start; the pages are our own.
    return ["--no-sandbox"] if os.getuid() == 0 else []


class Dashboard:
    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str | None = None,
        start_timeout: float = START_TIMEOUT,
    ) -> None:
        self.argv = [*argv, "dashboard", "--no-open"]
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(env),
            cwd=cwd,
        )
        self.out: list[str] = []
        self.err: list[str] = []
        self._changed = threading.Condition()
        self._readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self.out), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr, self.err), daemon=True),
        ]
        for reader in self._readers:
            reader.start()
        try:
            m = self._wait(self.out, URL_RE, start_timeout)
        except AssertionError:
            self.close()
            raise
        self.url, self.port, self.token = m[1], int(m[2]), m[3]
        self.origin = f"http://127.0.0.1:{self.port}"

    @classmethod
    def of(cls, daemon: Any, *extra: str) -> Dashboard:
        """The dashboard of a txd_testing.Daemon (its socket, no autostart)."""
        argv = [*TXCTL, "--socket", str(daemon.socket), "--no-autostart", *extra]
        return cls(argv, daemon.txctl_env(), cwd=str(daemon.home))

    def _read(self, stream: Any, lines: list[str]) -> None:
        for line in stream:  # ends at EOF: the process exited
            with self._changed:
                lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def _wait(self, lines: list[str], pattern: re.Pattern[str], timeout: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        seen = 0
        with self._changed:
            while True:  # bounded by the deadline
                for line in lines[seen:]:
                    if m := pattern.search(line):
                        return m
                seen = len(lines)
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._alive()):
                    raise AssertionError(
                        f"no line matching {pattern.pattern!r} from {' '.join(self.argv)} "
                        f"(exit {self.proc.poll()}):\nstdout: {self.out}\nstderr: {self.err}"
                    )
                self._changed.wait(left)

    def _alive(self) -> bool:
        return any(r.is_alive() for r in self._readers)

    def wait_stderr(self, pattern: str, timeout: float = WAIT_TIMEOUT) -> str:
        """The first stderr line matching `pattern` (re.search), waiting for it."""
        return self._wait(self.err, re.compile(pattern), timeout)[0]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for reader in self._readers:
            reader.join(5)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()

    # -- raw HTTP -------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str] | None = None,
        body: Any = None,
    ) -> tuple[int, bytes]:
        status, _, data = self.exchange(method, path, headers, body)
        return status, data

    def exchange(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str] | None = None,
        body: Any = None,
    ) -> tuple[int, http.client.HTTPMessage, bytes]:
        """One raw request: the response's status, headers and body."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=WAIT_TIMEOUT)
        try:
            data = json.dumps(body).encode() if body is not None else None
            conn.request(method, path, body=data, headers=dict(headers or {}))
            resp = conn.getresponse()
            return resp.status, resp.headers, resp.read()
        finally:
            conn.close()

    def bearer(self, **extra: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}", **extra}

    @contextlib.contextmanager
    def sse(
        self, path: str, headers: Mapping[str, str] | None = None, timeout: float = WAIT_TIMEOUT
    ) -> Iterator[Iterator[tuple[str, Any]]]:
        """The stream's (event, data) pairs; a read that waits longer than `timeout` fails."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request("GET", path, headers=dict(headers or {}))
            resp = conn.getresponse()
            assert resp.status == 200, (resp.status, resp.read())

            def events() -> Iterator[tuple[str, Any]]:
                event, data = "message", ""
                for raw in resp:  # bounded by the socket timeout of each read
                    line = raw.decode().rstrip("\n")
                    if line.startswith("event: "):
                        event = line[len("event: ") :]
                    elif line.startswith("data: "):
                        data += line[len("data: ") :]
                    elif not line and data:
                        yield event, json.loads(data)
                        event, data = "message", ""

            yield events()
        finally:
            conn.close()


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """A headless Debian Chromium through Playwright (sync API)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=chromium_args())
        try:
            yield browser
        finally:
            browser.close()


def fill_store(state_dir: Any, jobs: int, name: str = "many") -> list[str]:
    """`jobs` finished local_cwd jobs written into a (stopped) daemon's job store as the daemon
    writes them (txd's JobStore, each with its events), created a second apart, the last
    newest; their handles, oldest first."""
    from txd.daemon.jobstore import JobRecord, JobStore
    from txd.v1 import AppDef, AppState, AppStatus, Role

    app = AppDef(name=name, roles=[Role(name="r", entrypoint="true")])
    now = time.time() - jobs
    store = JobStore.in_state_dir(state_dir)
    try:
        recs = []
        for i in range(jobs):
            app_id = f"{name}-{i:06d}"
            handle = f"local_cwd://txd/{app_id}"
            st = AppStatus(state=AppState.SUCCEEDED, app_handle=handle, app_id=app_id, name=name)
            st.created.FromSeconds(int(now) + i)
            recs.append(JobRecord(handle, "local_cwd", app_id, int(now) + i, app, st, {}, {}))
        store.insert_many(recs)
    finally:
        store.close()
    return [r.handle for r in recs]
