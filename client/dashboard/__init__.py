"""`txctl dashboard`: a web page served by txctl itself, a thin client of the daemon's API.

It needs the optional extra `txd[dashboard]` (aiohttp); txctl's other commands never import
this package. `serve` is the command; `_guard` checks every request's token, Host and (for a
change) Origin; `_feed` holds every job's row from one Events subscription; `_server` is the
HTTP app (the page, its JSON and Server-Sent Events API).
"""

from __future__ import annotations

EXTRA = "txd[dashboard]"


def missing_extra() -> str | None:
    """Why the dashboard cannot run here, naming what to install; None when it can."""
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        return (
            f"txctl dashboard needs aiohttp, which is not installed: "
            f"pip install '{EXTRA}' (into the environment txctl runs from)"
        )
    return None
