"""Values the daemon and its clients share: where the daemon listens and keeps its state.

Both `txd` and `txctl` accept `--socket PATH` and `--state-dir DIR`, and read TXD_SOCKET and
TXD_STATE_DIR when they are not given (txctl passes the state dir to a daemon it starts).
"""

from __future__ import annotations

import os
from pathlib import Path

SOCKET_ENV = "TXD_SOCKET"
STATE_DIR_ENV = "TXD_STATE_DIR"
SESSION = "txd"


def runtime_dir() -> Path:
    """$XDG_RUNTIME_DIR/txd, or a per-user folder under the system temp dir."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base:
        return Path(base) / "txd"
    # TMPDIR as tempfile.gettempdir() would read it, without importing tempfile (2 ms of CLI start).
    return Path(os.environ.get("TMPDIR") or "/tmp") / f"txd-{os.getuid()}"


def socket_path(explicit: str | None = None) -> Path:
    """--socket, else $TXD_SOCKET, else <runtime_dir>/txd.sock."""
    chosen = explicit or os.environ.get(SOCKET_ENV)
    return Path(chosen) if chosen else runtime_dir() / "txd.sock"


def read_door(socket: str | Path) -> str:
    """The read door's socket beside the daemon's `socket`: Status served by a process of its
    own (txd.daemon.readdoor), on the wire of txd.readwire."""
    return f"{socket}.read"


def watch_door(socket: str | Path) -> str:
    """The watch door's socket beside the daemon's `socket`: Watch streams served by a small
    HTTP/2 server of the daemon's (txd.daemon.watchdoor)."""
    return f"{socket}.watch"


def state_dir(explicit: str | None = None) -> Path:
    """--state-dir, else $TXD_STATE_DIR, else $XDG_STATE_HOME/txd, else ~/.local/state/txd."""
    chosen = explicit or os.environ.get(STATE_DIR_ENV)
    if chosen:
        return Path(chosen)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "txd"


class StateDirError(Exception):
    """The state dir is another user's, or cannot be used: said for people."""


def own_state_dir(state_dir: Path) -> None:
    """Creates the state dir 0700 (the job store and logs in it are the user's alone), or
    checks that an existing one is the user's; raises StateDirError otherwise. A looser one of
    the user's is tightened by the daemon at start (txd.daemon.statedir)."""
    try:
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        owner = state_dir.stat().st_uid
    except OSError as e:
        raise StateDirError(f"cannot use the state dir {state_dir}: {e.strerror}") from None
    if owner != os.geteuid():
        raise StateDirError(
            f"the state dir {state_dir} belongs to uid {owner}, not to you (uid "
            f"{os.geteuid()}): use one of your own with --state-dir or TXD_STATE_DIR"
        )


# gRPC message limits, the same on both ends (runner.proto states them). A request (an AppDef
# with its options) is at most 4 MiB, gRPC's usual limit: the per-field limits in app.proto
# keep a real one far below it. A response may be larger, since it may echo the app and expand
# it per replica (DryRun's native request for a 10,000-replica job, a Describe).
MAX_REQUEST_BYTES = 4 << 20
MAX_RESPONSE_BYTES = 64 << 20
