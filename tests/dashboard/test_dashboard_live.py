"""The page in a real headless Chromium follows the daemon: the table and the log view change as
the jobs do, over the open event streams, without a reload or polling."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from dashboard_testing import Dashboard, fill_store
from txd_testing import Gates

# Set to a folder (docs/img) to save the screenshots the README shows.
SCREENSHOTS = os.environ.get("TXD_DASHBOARD_SCREENSHOTS")
HANDLE = re.compile(r"local_cwd://txd/\S+")


def run(daemon: Any, script: str, *opts: str) -> str:
    out = daemon.txctl("run", "-s", "local_cwd", "utils.sh", *opts, "sh", "-c", script, check=True)
    m = HANDLE.search(out.stdout)
    assert m, out.stdout
    return m.group(0)


def row(handle: str) -> str:
    return f'#rows tr[data-handle="{handle}"]'


def loaded(page: Any, dash: Dashboard) -> None:
    page.goto(dash.url)
    page.wait_for_selector("body[data-ready='1']")
    page.evaluate("window.__sameDocument = true")


def log_has(page: Any, text: str) -> None:
    page.wait_for_function("t => document.getElementById('log').textContent.includes(t)", arg=text)


def shot(page: Any, name: str) -> None:
    if SCREENSHOTS:
        page.locator("body").screenshot(path=str(Path(SCREENSHOTS) / name))


def test_the_table_follows_state_changes_without_a_reload(
    daemon: Any, dash: Dashboard, page: Any, tmp_path: Path
) -> None:
    done = run(daemon, "echo done")
    failed = run(daemon, "echo oops; exit 3")
    daemon.txctl("wait", done, check=True)
    daemon.txctl("wait", failed, check=1)
    loaded(page, dash)
    # The token went from the URL's fragment into the tab's sessionStorage, and no cookie was
    # set: the address bar no longer shows it.
    assert page.url == f"{dash.origin}/"
    assert page.context.cookies() == []
    page.wait_for_selector(f'{row(done)}[data-state="SUCCEEDED"]')
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    with Gates(tmp_path) as gates:
        gate = gates.new("go")
        handle = run(daemon, f"echo started; {gate.wait}; echo finished", "--num_replicas", "2")
        # A new job appears at the top, and goes to RUNNING, while its gate holds it there.
        page.wait_for_selector(f'{row(handle)}[data-state="RUNNING"]')
        assert page.locator("#rows tr[data-handle]").first.get_attribute("data-handle") == handle
        page.wait_for_function(
            'h => document.querySelector(`#rows tr[data-handle="${h}"]`)'
            ".textContent.includes('2 running')",
            arg=handle,
        )
        cells = page.locator(f"{row(handle)} td").all_inner_texts()
        assert cells[:4] == [handle, "sh", "local_cwd", "RUNNING"], cells
        # The filters: by state, by scheduler, by text.
        page.select_option("#f-state", "RUNNING")
        assert page.locator("#rows tr[data-handle]").count() == 1
        page.select_option("#f-state", "")
        page.fill("#f-text", done.rsplit("/", 1)[1])
        assert [
            r.get_attribute("data-handle") for r in page.locator("#rows tr[data-handle]").all()
        ] == [done]
        page.fill("#f-text", "")
        page.select_option("#f-scheduler", "local_cwd")
        assert page.locator("#rows tr[data-handle]").count() == 3
        assert page.inner_text("#count") == "3 of 3 jobs"
        shot(page, "dashboard-table.png")
        gate.open()
        gate.open()
        page.wait_for_selector(f'{row(handle)}[data-state="SUCCEEDED"]')
    assert page.evaluate("window.__sameDocument") is True  # never reloaded
    assert requests == [], f"the page polled: {requests}"  # the changes came over the stream
    assert "2 succeeded" in page.inner_text(row(handle))
    # A deleted job leaves the table as it goes.
    daemon.txctl("delete", done, check=True)
    page.wait_for_selector(row(done), state="detached")
    assert page.inner_text("#count") == "2 of 2 jobs"


def test_the_log_view_shows_lines_as_the_job_prints_them(
    daemon: Any, dash: Dashboard, page: Any, tmp_path: Path
) -> None:
    with Gates(tmp_path) as gates:
        first, second = gates.new("first"), gates.new("second")
        script = (
            f"echo boot-${{replica_id}}; "
            f"{first.wait}; echo middle-${{replica_id}}; {second.wait}; echo last-${{replica_id}}"
        )
        handle = run(daemon, script, "--num_replicas", "2")
        loaded(page, dash)
        page.click(f"{row(handle)} td.handle a")
        page.wait_for_selector("#replicas tbody tr >> nth=1")
        assert page.locator("#replicas tbody tr").all_inner_texts()[1].split("\t")[:2] == [
            "sh",
            "1",
        ]
        # All replicas: each line prefixed with its replica.
        log_has(page, "sh#0| boot-0")
        log_has(page, "sh#1| boot-1")
        assert "middle" not in page.inner_text("#log")
        first.open()
        first.open()
        log_has(page, "sh#0| middle-0")
        log_has(page, "sh#1| middle-1")
        assert "last" not in page.inner_text("#log")
        shot(page, "dashboard-logs.png")
        # Pick one replica: only its lines, from the start, then what it prints next.
        page.select_option("#log-replica", "sh/1")
        log_has(page, "middle-1")
        assert page.inner_text("#log") == "boot-1\nmiddle-1\n"
        second.open()
        second.open()
        log_has(page, "last-1")
        page.wait_for_selector("#job-state.s-SUCCEEDED")
        page.wait_for_function(
            "document.getElementById('log-status').textContent.includes('ended')"
        )
    assert page.inner_text("#log") == "boot-1\nmiddle-1\nlast-1\n"
    # The job page also shows the app as submitted and its native request.
    page.click("text=The app as submitted")
    assert '"entrypoint": "sh"' in page.inner_text("#job-app")
    page.click("text=Native request")
    assert handle.rsplit("/", 1)[1] in page.inner_text("#job-native")
    assert page.evaluate("window.__sameDocument") is True


def test_a_thousand_jobs_render_as_a_window_that_follows_the_scroll(
    unstarted_daemon: Any, page: Any, tmp_path: Path
) -> None:
    handles = fill_store(unstarted_daemon.state_dir, 1000)
    daemon = unstarted_daemon.start()
    dash = Dashboard.of(daemon)
    try:
        loaded(page, dash)
        assert page.inner_text("#count") == "1000 of 1000 jobs"
        # Newest first; only the rows near the viewport are in the page.
        first = page.locator("#rows tr[data-handle]").first.get_attribute("data-handle")
        assert first == handles[-1]
        assert 10 < page.locator("#rows tr[data-handle]").count() < 200
        assert page.locator(row(handles[0])).count() == 0
        # Scrolled to the end, the oldest job is there; the page is as tall as 1000 rows.
        page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
        page.wait_for_selector(row(handles[0]))
        assert page.locator(row(handles[-1])).count() == 0
        assert page.locator(row(handles[0])).is_visible()
        # A job changing out of view is there, changed, when scrolled back to.
        with Gates(tmp_path) as gates:
            gate = gates.new("go")
            handle = run(daemon, gate.wait)
            page.wait_for_function(
                "document.getElementById('count').textContent === '1001 of 1001 jobs'"
            )
            assert page.locator(row(handle)).count() == 0
            gate.open()
            page.evaluate("window.scrollTo(0, 0)")
            page.wait_for_selector(f'{row(handle)}[data-state="SUCCEEDED"]')
        page.fill("#f-text", handles[500].rsplit("/", 1)[1])
        assert [
            r.get_attribute("data-handle") for r in page.locator("#rows tr[data-handle]").all()
        ] == [handles[500]]
    finally:
        dash.close()


def test_the_table_goes_on_across_a_daemon_restart(daemon: Any, dash: Dashboard, page: Any) -> None:
    before = run(daemon, "echo before")
    loaded(page, dash)
    page.wait_for_selector(f'{row(before)}[data-state="SUCCEEDED"]')
    daemon.stop()
    daemon.restart()
    # The dashboard's events stream resumes from its cursor (txd.client's resume): a job run
    # after the restart appears on the same page, which was never reloaded.
    after = run(daemon, "echo after")
    page.wait_for_selector(f'{row(after)}[data-state="SUCCEEDED"]', timeout=60_000)
    assert page.inner_text("#count") == "2 of 2 jobs"
    assert page.evaluate("window.__sameDocument") is True
    dash.wait_stderr("reconnect|resum")
