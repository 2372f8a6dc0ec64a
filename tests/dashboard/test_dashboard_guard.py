"""Only the holder of the token gets data or changes a job, and nothing a server on another
127.0.0.1 port gets from the same browser makes it a holder: a wrong or missing token gets 403
and no data (API, streams); the token never goes to another port (no cookie), and a replay of
all that port received, claiming the dashboard's own Origin, cancels nothing; a cancel with a
foreign Origin or Host is refused, while the page's own Cancel works; every answer carries the
page's Content-Security-Policy."""

from __future__ import annotations

import http.client
import http.server
import json
import re
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from dashboard_testing import Dashboard
from test_dashboard_live import loaded, row, run
from txd import install
from txd_testing import TXCTL, Gates

EVIL_PAGE = """<!doctype html><html><body><form id="f" method="post" action="{target}"
enctype="text/plain" target="sink"><input name='{{"handle":"{handle}","x":"' value='"}}'>
</form><iframe name="sink"></iframe><script>
fetch("{target}", {{method: "POST", mode: "no-cors", credentials: "include",
  headers: {{"Content-Type": "text/plain"}}, body: JSON.stringify({{handle: "{handle}"}})}})
  .finally(() => fetch("/more", {{method: "POST", credentials: "include", body: "x"}}))
  .finally(() => {{ document.getElementById("f").submit(); document.title = "sent"; }});
</script></body></html>"""


@pytest.fixture
def running(daemon: Any, tmp_path: Path) -> Iterator[str]:
    """A job held RUNNING by its gate (let go at the end)."""
    with Gates(tmp_path) as gates:
        handle = run(daemon, f"{gates.new('hold').wait}; echo released")
        _until_running(daemon, handle)
        yield handle


def _until_running(daemon: Any, handle: str) -> None:
    cmd = [*TXCTL, "--socket", str(daemon.socket), "--no-autostart", "events", "--snapshot"]
    cmd += ["-f", "--handle", handle]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=daemon.txctl_env()) as proc:
        try:
            assert proc.stdout is not None
            for line in proc.stdout:  # bounded: the job runs at once (a test timeout else)
                if " RUNNING" in line:
                    return
        finally:
            proc.kill()


def _state(daemon: Any, handle: str) -> str:
    out = daemon.txctl("status", handle, "--json", check=True).stdout
    m = re.search(r'"state": "(\w+)"', out)
    assert m, out
    return m.group(1)


@dataclass
class Foreign:
    """A server on another 127.0.0.1 port, and every request it received, whole."""

    url: str
    received: list[bytes]


@pytest.fixture
def foreign_site(dash: Dashboard, running: str) -> Iterator[Foreign]:
    """A page on another 127.0.0.1 port that POSTs a cancel to the dashboard (fetch, form) and
    asks its own server for more (fetch with credentials), recording every request."""
    page = EVIL_PAGE.format(target=f"{dash.origin}/api/cancel", handle=running).encode()
    received: list[bytes] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def _record(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            received.append(f"{self.requestline}\r\n{self.headers}".encode() + body)

        def do_GET(self) -> None:
            self._record()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(page)

        def do_POST(self) -> None:
            self._record()
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Foreign(f"http://127.0.0.1:{server.server_address[1]}/", received)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _visit(page: Any, dash: Dashboard, site: Foreign) -> None:
    """The dashboard open in one tab, then the foreign page in another of the same browser."""
    loaded(page, dash)
    foreign = page.context.new_page()
    foreign.goto(site.url)
    foreign.wait_for_function("document.title === 'sent'")
    foreign.close()
    assert site.received, "the foreign server saw no request"


def test_a_wrong_or_missing_token_gets_no_data(daemon: Any, dash: Dashboard, page: Any) -> None:
    handle = run(daemon, "echo secret-output")
    daemon.txctl("wait", handle, check=True)
    name = handle.rsplit("/", 1)[1]
    paths = [
        "/api/events",
        f"/api/job?handle={handle}",
        f"/api/logs?handle={handle}",
        "/api/nothing",
    ]
    wrong = dash.token[:-1] + ("A" if dash.token[-1] != "A" else "B")
    for path in paths:
        sep = "&" if "?" in path else "?"
        # Only the Authorization header carries the token: not a cookie, not the query.
        for where, headers in (
            (path, {}),
            (path, {"Authorization": f"Bearer {wrong}"}),
            (path, {"Authorization": f"Basic {dash.token}"}),
            (path, {"Cookie": f"txd-dashboard-{dash.port}={dash.token}"}),
            (f"{path}{sep}token={dash.token}", {}),
        ):
            status, body = dash.request("GET", where, headers)
            assert status == 403, (where, headers, status)
            assert name.encode() not in body and b"secret" not in body
    # The page, its script and style are the same for everyone, without the token: no data.
    for path in ("/", "/static/app.js", "/static/style.css"):
        status, body = dash.request("GET", path)
        assert status == 200 and name.encode() not in body, path
    # The right token gets the data (the same requests, so the 403s above were the token's).
    status, body = dash.request("GET", f"/api/job?handle={handle}", dash.bearer())
    assert status == 200 and name.encode() in body
    with dash.sse("/api/events", dash.bearer()) as events:
        kind, data = next(events)
    assert kind == "snapshot" and [r["handle"] for r in data["rows"]] == [handle]
    # In the browser: a wrong token in the URL is the page without the job, saying what to do.
    page.goto(f"{dash.origin}/#token={wrong}")
    page.wait_for_selector("#conn[data-state='error']")
    assert "open the URL txctl dashboard printed" in page.inner_text("#conn")
    assert name not in page.content()
    assert page.context.cookies() == []
    # Nor does a host name other than 127.0.0.1/localhost get in, token or not (DNS rebinding).
    status, body = dash.request(
        "GET", "/api/events", dash.bearer(Host=f"rebound.example:{dash.port}")
    )
    assert (status, name.encode() in body) == (403, False)
    dash.wait_stderr(r"refused GET /api/events: Host 'rebound\.example:\d+' is not this")
    assert not any(dash.token in line or wrong in line for line in dash.err)


def _headers(raw: bytes) -> dict[str, str]:
    lines = raw.split(b"\r\n", 1)[1].split(b"\n\n", 1)[0].decode().splitlines()
    return dict(line.split(": ", 1) for line in lines if ": " in line)


def test_another_local_port_gets_no_credential(
    dash: Dashboard, page: Any, foreign_site: Foreign
) -> None:
    """Cookies ignore ports: whatever the dashboard's tab holds must not go with the browser's
    requests to another server on 127.0.0.1, which anyone on the machine can run."""
    _visit(page, dash, foreign_site)
    for raw in foreign_site.received:
        assert dash.token.encode() not in raw, raw
        assert not {"cookie", "authorization"} & {k.lower() for k in _headers(raw)}, raw


def test_what_another_local_port_got_cannot_cancel(
    daemon: Any, dash: Dashboard, page: Any, running: str, foreign_site: Foreign
) -> None:
    """The foreign server replays every header it got from the browser, as a raw request that
    claims the dashboard's own Origin and Host (a server, unlike a page, can send any)."""
    _visit(page, dash, foreign_site)
    assert _state(daemon, running) == "RUNNING"  # the foreign page's own tries failed
    own = {"Origin": dash.origin, "Sec-Fetch-Site": "same-origin"}
    own["Content-Type"] = "application/json"
    skip = {"host", "content-length", "referer", *(k.lower() for k in own)}
    forged = []
    for raw in foreign_site.received:
        captured = {k: v for k, v in _headers(raw).items() if k.lower() not in skip}
        forged.append({**captured, **own})
    for headers in forged:
        for what in ("cancel", "delete"):
            status, body = dash.request("POST", f"/api/{what}", headers, {"handle": running})
            assert status == 403, (what, headers, body)
        status, body = dash.request("GET", f"/api/job?handle={running}", headers)
        assert status == 403 and running.encode() not in body, (headers, body)
    dash.wait_stderr(r"refused POST /api/cancel: no token")
    assert _state(daemon, running) == "RUNNING"
    # The same request with the token is obeyed: the refusals above were for want of it.
    with_token = dash.bearer(**forged[0])
    status, body = dash.request("POST", "/api/cancel", with_token, {"handle": running})
    assert (status, json.loads(body)) == (200, {"ok": True})
    assert _state(daemon, running) == "CANCELLED"


HARDENING = (
    "Content-Security-Policy",
    "X-Frame-Options",
    "X-Content-Type-Options",
    "Referrer-Policy",
    "Cache-Control",
    "Cross-Origin-Resource-Policy",
    "Cross-Origin-Opener-Policy",
)


def test_every_response_carries_the_pages_csp(dash: Dashboard) -> None:
    """The Content-Security-Policy of `/`, and its other guarding headers, on every answer: the
    other HTML, the script, the API, the streams and the errors too."""
    status, headers, _ = dash.exchange("GET", "/", dash.bearer())
    own = {name: headers[name] for name in HARDENING}
    csp = own["Content-Security-Policy"]
    assert status == 200 and "default-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert None not in own.values(), own
    paths = ["/static/index.html", "/static/app.js", "/static/style.css", "/favicon.ico"]
    paths += ["/nothing-here", "/api/job?handle=local_cwd://txd/none", "/api/job"]
    for path in paths:
        for headers in (dash.bearer(), {}):
            for method in ("GET", "HEAD"):
                status, got, _ = dash.exchange(method, path, headers)
                assert {n: got[n] for n in HARDENING} == own, (method, path, headers, status)
    status, got, _ = dash.exchange("POST", "/api/cancel", dash.bearer())  # no Origin
    assert (status, {n: got[n] for n in HARDENING}) == (403, own)
    stream = http.client.HTTPConnection("127.0.0.1", dash.port, timeout=20)
    try:
        stream.request("GET", "/api/events", headers=dash.bearer())
        events = stream.getresponse()  # the headers, sent before the first event
        assert (events.status, {n: events.getheader(n) for n in HARDENING}) == (200, own)
    finally:
        stream.close()


def test_cancel_needs_the_token_and_the_dashboards_own_origin(
    daemon: Any, dash: Dashboard, page: Any, running: str
) -> None:
    handle = running
    body = {"handle": handle}
    own = {"Origin": dash.origin, "Content-Type": "application/json"}
    # Raw requests: no token; the token with a foreign Origin, with none, from another site,
    # with a foreign Host.
    refused = [
        own,
        dash.bearer(**{**own, "Origin": "http://127.0.0.1:1"}),
        dash.bearer(**{**own, "Origin": "null"}),
        dash.bearer(**{k: v for k, v in own.items() if k != "Origin"}),
        dash.bearer(**own, **{"Sec-Fetch-Site": "same-site"}),
        dash.bearer(**own, Host=f"rebound.example:{dash.port}"),
    ]
    for headers in refused:
        for what in ("cancel", "delete"):
            status, _ = dash.request("POST", f"/api/{what}", headers, body)
            assert status == 403, (what, headers)
    assert _state(daemon, handle) == "RUNNING"
    # The page's own Cancel: asks first, with buttons that say what they do; "Keep running"
    # keeps it, then "Cancel job" cancels it.
    loaded(page, dash)
    page.click(f"{row(handle)} td.handle a")
    page.wait_for_selector("#cancel:not([disabled])")
    page.click("#cancel")
    page.wait_for_selector("#ask[open]")
    assert page.inner_text("#ask-text") == f"Cancel {handle}? Its replicas are stopped."
    assert [page.inner_text("#ask-no"), page.inner_text("#ask-yes")] == [
        "Keep running",
        "Cancel job",
    ]
    page.click("#ask-no")
    page.wait_for_selector("#ask", state="hidden")
    assert _state(daemon, handle) == "RUNNING"
    page.click("#cancel")
    page.click("#ask-yes")
    page.wait_for_selector("#job-state.s-CANCELLED")
    assert _state(daemon, handle) == "CANCELLED"
    dash.wait_stderr(f"cancel {re.escape(handle)}$")
    # Delete, confirmed, goes back to the table, where the job is gone.
    page.click("#delete")
    assert page.inner_text("#ask-yes") == "Delete job"
    page.click("#ask-yes")
    page.wait_for_selector("#jobs-view:not([hidden])")
    page.wait_for_selector(row(handle), state="detached")
    assert daemon.txctl("status", handle).returncode == 2


def test_without_aiohttp_it_says_what_to_install(daemon: Any, tmp_path: Path) -> None:
    blocker = tmp_path / "site" / "aiohttp"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('blocked by the test')\n")
    env = daemon.txctl_env(PYTHONPATH=str(blocker.parent))
    out = daemon.txctl("dashboard", "--no-open", env=env, timeout=30)
    assert out.returncode == 2, out
    assert install.command("dashboard") in out.stderr
    assert out.stdout == ""


def test_a_port_in_use_is_a_clear_error(daemon: Any) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = daemon.txctl("dashboard", "--no-open", "--port", str(port), timeout=30)
    assert out.returncode == 2, out
    assert f"cannot listen on 127.0.0.1:{port}" in out.stderr
    bad = daemon.txctl("dashboard", "--port", "70000")
    assert bad.returncode == 2 and "expected a port, 0 to 65535" in bad.stderr
