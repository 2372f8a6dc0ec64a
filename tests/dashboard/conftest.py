"""The dashboard tier's fixtures: a daemon of the test's own, its `txctl dashboard`, and a real
headless Chromium (Debian's) driven by Playwright.

- `browser` (session): the Chromium; skipped when it or Playwright is missing, unless
  TXD_DASHBOARD_REQUIRED=1 (scripts/test sets it, having installed both): then it fails.
- `dash`: a Dashboard (dashboard_testing) of the test's own daemon (`dash_daemon`).
- `page`: a fresh browser context's page; a script error on it fails the test.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from dashboard_testing import REQUIRED_VAR, Dashboard, browser_missing, chromium


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    if why := browser_missing():
        if os.environ.get(REQUIRED_VAR) == "1":
            pytest.fail(why)
        pytest.skip(why)
    with chromium() as b:
        yield b


@pytest.fixture
def dash(daemon: Any) -> Iterator[Dashboard]:
    d = Dashboard.of(daemon)
    try:
        yield d
    finally:
        d.close()
    assert not [line for line in d.err if "Traceback" in line or "internal error" in line], d.err
    assert d.proc.returncode == 0, d.err  # SIGTERM stops it cleanly


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    errors: list[str] = []
    p = context.new_page()
    p.on("pageerror", lambda e: errors.append(str(e)))
    p.set_default_timeout(20_000)
    try:
        yield p
    finally:
        context.close()
    assert not errors, f"script errors on the page: {errors}"
