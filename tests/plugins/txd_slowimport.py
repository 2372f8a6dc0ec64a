"""A plugin scheduler whose module takes as long to import as the test wants: importing it
waits (at most 60 s) for the file named by $TXD_SLOWIMPORT_GATE, as a backend's heavy client
library takes its time. Otherwise it is fakepoll."""

import os
import time

_deadline = time.monotonic() + 60
while not os.path.exists(os.environ["TXD_SLOWIMPORT_GATE"]) and time.monotonic() < _deadline:
    time.sleep(0.01)

from txd_fakepoll import create_scheduler  # noqa: E402

__all__ = ["create_scheduler"]
