"""`txctl dashboard`: a web page served by txctl itself, a thin client of the daemon's API.

It needs txd's optional extra `dashboard` (aiohttp); txctl's other commands never import
this package. `serve` is the command; `_guard` checks every request's Host, and the token
(for a change, the Origin too) of every request for data or a change; `_feed` holds every
job's row from one Events subscription; `_server` is the HTTP app (the page, its JSON and
Server-Sent Events API).
"""

from __future__ import annotations


def missing_extra() -> str | None:
    """Why the dashboard cannot run here, naming what to install; None when it can."""
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        from txd.install import command

        return f"txctl dashboard needs aiohttp, which is not installed: {command('dashboard')}"
    return None
