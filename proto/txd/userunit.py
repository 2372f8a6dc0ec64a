"""The systemd user unit, as both ends see it: where `txd unit install` writes it, whether the
user's systemd manager answers, and which socket and state dir the unit serves (txctl's
autostart starts the daemon through the unit only when they are the ones it wants).

Light on purpose (txctl imports it when no daemon answers): no subprocess, no shlex unless a
unit file is there to read.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

NAME = "txd.service"
# The first line of every unit txd writes: `txd unit uninstall` removes only a file that has it.
MARK = "# Written by `txd unit install`"


def unit_path() -> Path:
    """$XDG_CONFIG_HOME/systemd/user/txd.service (default ~/.config/...): the folder of the
    user's own units that systemd's user manager reads."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "systemd" / "user" / NAME


def systemctl() -> str | None:
    """The absolute path of systemctl on PATH, or None."""
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        candidate = os.path.join(folder or ".", "systemctl")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return os.path.abspath(candidate)
    return None


def manager_problem() -> str:
    """ "" when the user's systemd manager answers; else why it does not, for people. It
    answers when systemctl is installed, $XDG_RUNTIME_DIR is set (pam_systemd sets it at
    login) and the manager's own socket there, $XDG_RUNTIME_DIR/systemd/private (the one
    `systemctl --user` talks to), accepts a connection."""
    if systemctl() is None:
        return "systemctl is not installed (no systemd here)"
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if not runtime:
        return (
            "XDG_RUNTIME_DIR is not set, so this session has no systemd user manager "
            "(pam_systemd sets it at login)"
        )
    private = Path(runtime) / "systemd" / "private"
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.connect(str(private))
        except OSError as e:
            why = "it does not exist" if isinstance(e, FileNotFoundError) else e.strerror
            return f"no systemd user manager answers on {private} ({why})"
    return ""


def served_paths(text: str) -> tuple[str, str] | None:
    """(--socket, --state-dir) of the unit's ExecStart=, or None when it names no both."""
    import itertools
    import shlex

    command = ""
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key.strip() == "ExecStart":
            command = value.strip()
    if not command:
        return None
    # The unit's escapes ("%%", "$$") undone; its quoting is the shell's for these paths.
    try:
        words = shlex.split(command.replace("%%", "%").replace("$$", "$"))
    except ValueError:
        return None
    found: dict[str, str] = {}
    for flag, value in itertools.pairwise(words):
        if flag in ("--socket", "--state-dir"):
            found[flag] = value
    if len(found) != 2:
        return None
    return found["--socket"], found["--state-dir"]
