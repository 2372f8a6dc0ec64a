"""AppState: a job's state as a named enum (the numbers of txd.v1.AppState, which are TorchX's).

The client returns txd.v1 messages, whose `state` is a plain int (protobuf enums are ints);
`AppState(status.state)` names it: `print(AppState(status.state))` prints `SUCCEEDED`.
"""

from __future__ import annotations

import enum


class AppState(enum.IntEnum):
    """TorchX's AppState names and numbers. Equal to the ints in txd.v1 messages and to
    torchx.specs.AppState members; str(), format() and print() show the name."""

    UNSUBMITTED = 0
    SUBMITTED = 1
    PENDING = 2
    RUNNING = 3
    SUCCEEDED = 4
    FAILED = 5
    CANCELLED = 6
    UNKNOWN = 7

    def __str__(self) -> str:
        return self.name

    def __format__(self, spec: str) -> str:
        return format(self.name, spec)

    def is_terminal(self) -> bool:
        return self in (AppState.SUCCEEDED, AppState.FAILED, AppState.CANCELLED)
