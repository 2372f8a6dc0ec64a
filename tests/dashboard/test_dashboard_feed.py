"""The dashboard's shared feed (client/dashboard/_feed.py) with its tabs, in process: a tab that
falls behind is dropped (its stream ends, its backlog freed) while the others go on, and a tab
that connects again starts from every row whole."""

from __future__ import annotations

import json

import pytest
from txd.client.dashboard import _feed
from txd.v1 import AppState
from txd.v1.app_pb2 import AppStatus

SMALL_QUEUE = 50


def _changed(feed: _feed.Feed, i: int) -> None:
    """What the feed does with a CHANGED event of job i."""
    r = _feed.row(AppStatus(app_handle=f"local_cwd://txd/job-{i}", state=AppState.RUNNING))
    feed.rows[r["handle"]] = r
    feed._broadcast(_feed.sse("changed", r))


def _drain(tab: _feed.Tab) -> list[bytes | None]:
    out = []
    while not tab.queue.empty():
        out.append(tab.queue.get_nowait())
    return out


def _snapshot_rows(message: bytes | None) -> list[str]:
    assert message is not None and message.startswith(b"event: snapshot\n"), message
    data = json.loads(message.split(b"data: ", 1)[1])
    return [r["handle"] for r in data["rows"]]


async def test_a_lagging_tab_is_dropped_and_the_others_go_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_feed, "QUEUE", SMALL_QUEUE)
    feed = _feed.Feed(log=lambda line: None)
    lagging, reading = feed.subscribe(), feed.subscribe()
    got: list[bytes | None] = _drain(reading)  # the snapshot
    for i in range(3 * SMALL_QUEUE):
        _changed(feed, i)
        got += _drain(reading)  # this tab keeps up
    # The lagging tab filled its queue, then was dropped: its backlog is gone and its stream
    # ends (None), so the browser's EventSource connects again.
    assert lagging.dropped and _drain(lagging) == [None]
    _changed(feed, 10_000)
    assert lagging.queue.empty()  # nothing more is queued for a dropped tab
    assert not reading.dropped
    changes = [m for m in got[1:] if m is not None]
    assert len(changes) == 3 * SMALL_QUEUE and None not in got
    # Connecting again: every row whole, the change after the drop included.
    feed.unsubscribe(lagging)
    again = feed.subscribe()
    rows = _snapshot_rows(_drain(again)[0])
    assert len(rows) == 3 * SMALL_QUEUE + 1 and "local_cwd://txd/job-10000" in rows
    assert feed.tabs == {reading, again}
