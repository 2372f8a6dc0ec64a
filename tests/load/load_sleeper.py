"""A process that only sleeps, for `scripts/bench --only load`:

    python load_sleeper.py NICE PERIOD MAX_SECONDS

At the scheduling priority NICE (below 0 needs root) it sleeps PERIOD seconds at a time and
notes how late each wake-up was, until stdin closes (or MAX_SECONDS pass). Prints "ready" once
running and at the end one JSON line: the lateness of every wake-up in seconds. Nothing it does
waits on txd: its lateness is what the machine alone adds to any process woken under the storm
(a Status answer wakes at least the door's process and the caller's).
"""

from __future__ import annotations

import json
import os
import selectors
import sys
import time


def main(argv: list[str]) -> None:
    nice, period, max_seconds = int(argv[0]), float(argv[1]), float(argv[2])
    os.setpriority(os.PRIO_PROCESS, 0, nice)
    lateness: list[float] = []
    sel = selectors.DefaultSelector()
    sel.register(sys.stdin, selectors.EVENT_READ)  # readable: closed, the run is over
    print("ready", flush=True)
    end = time.monotonic() + max_seconds
    while time.monotonic() < end:
        asleep = time.monotonic()
        if sel.select(period):
            break
        lateness.append(time.monotonic() - asleep - period)
    print(json.dumps({"lateness": lateness}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
