"""Only the holder of the token gets anything, and only the dashboard's own page can change a
job: a wrong or missing token gets 403 and no data (page, API, streams), and a cancel from
another origin (a page on another 127.0.0.1 port, in the same browser that holds the cookie)
or with a foreign Origin or Host is refused, while the page's own Cancel works."""

from __future__ import annotations

import http.server
import re
import subprocess
import threading
from collections.abc import Iterator
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


@pytest.fixture
def evil_site(dash: Dashboard, running: str) -> Iterator[str]:
    """A page on another 127.0.0.1 port that POSTs a cancel to the dashboard (fetch, form)."""
    page = EVIL_PAGE.format(target=f"{dash.origin}/api/cancel", handle=running).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_a_wrong_or_missing_token_gets_no_data(daemon: Any, dash: Dashboard, page: Any) -> None:
    handle = run(daemon, "echo secret-output")
    daemon.txctl("wait", handle, check=True)
    name = handle.rsplit("/", 1)[1]
    paths = [
        "/",
        "/static/app.js",
        "/api/events",
        f"/api/job?handle={handle}",
        f"/api/logs?handle={handle}",
    ]
    wrong = dash.token[:-1] + ("A" if dash.token[-1] != "A" else "B")
    for path in paths:
        for headers in (
            {},
            {"Authorization": f"Bearer {wrong}"},
            {"Cookie": f"txd-dashboard-{dash.port}={wrong}"},
        ):
            status, body = dash.request("GET", path, headers)
            assert status == 403, (path, headers, status)
            assert name.encode() not in body and b"secret" not in body
        sep = "&" if "?" in path else "?"
        status, body = dash.request("GET", f"{path}{sep}token={wrong}")
        assert (status, name.encode() in body) == (403, False), path
    # The right token gets the data (the same requests, so the 403s above were the token's).
    status, body = dash.request("GET", f"/api/job?handle={handle}", dash.bearer())
    assert status == 200 and name.encode() in body
    with dash.sse("/api/events", dash.bearer()) as events:
        kind, data = next(events)
    assert kind == "snapshot" and [r["handle"] for r in data["rows"]] == [handle]
    # In the browser: a wrong token in the URL is a 403 page without the job, and no cookie.
    response = page.goto(f"{dash.origin}/?token={wrong}")
    assert response.status == 403
    assert name not in page.content()
    assert page.context.cookies() == []
    # Nor does a host name other than 127.0.0.1/localhost get in, token or not (DNS rebinding).
    status, body = dash.request(
        "GET", "/api/events", dash.bearer(Host=f"rebound.example:{dash.port}")
    )
    assert (status, name.encode() in body) == (403, False)
    dash.wait_stderr(r"refused GET /api/events: Host 'rebound\.example:\d+' is not this")
    assert not any(dash.token in line or wrong in line for line in dash.err)


def test_cancel_needs_the_token_and_the_dashboards_own_origin(
    daemon: Any, dash: Dashboard, page: Any, running: str, evil_site: str
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
    # The browser holds the cookie (the page was opened), then a page on another 127.0.0.1
    # port (the same site, so SameSite lets the cookie go) POSTs a cancel: refused by Origin.
    loaded(page, dash)
    evil = page.context.new_page()
    evil.goto(evil_site)
    evil.wait_for_function("document.title === 'sent'")
    dash.wait_stderr(r"refused POST /api/cancel: a POST from Origin 'http://127\.0\.0\.1:\d+'")
    assert _state(daemon, handle) == "RUNNING"
    evil.close()
    # The page's own Cancel: asks first (dismissed: nothing happens), then cancels.
    page.click(f"{row(handle)} td.handle a")
    page.wait_for_selector("#cancel:not([disabled])")
    page.once("dialog", lambda d: d.dismiss())
    page.click("#cancel")
    assert _state(daemon, handle) == "RUNNING"
    page.once("dialog", lambda d: d.accept())
    page.click("#cancel")
    page.wait_for_selector("#job-state.s-CANCELLED")
    assert _state(daemon, handle) == "CANCELLED"
    dash.wait_stderr(f"cancel {re.escape(handle)}$")
    # Delete, confirmed, goes back to the table, where the job is gone.
    page.once("dialog", lambda d: d.accept())
    page.click("#delete")
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
