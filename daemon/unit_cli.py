"""`txd unit install|show|uninstall`: txd as a systemd user service.

The unit runs this very txd (this interpreter, `-m txd.daemon`, as txctl's autostart does) on
the socket and state dir txctl would use, as `Type=notify` (txd says READY=1 once it serves:
txd.daemon.sdnotify). `KillMode=mixed`: `systemctl stop` sends SIGTERM to txd alone, whose own
shutdown ends its local jobs and records them; what is left gets SIGKILL after TimeoutStopSec,
which is longer than that shutdown can take. Started by the user manager, the daemon lives in
the manager's scope, not in the SSH session's, so logging out does not end it (with lingering,
not even the last logout).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from txd import defaults, userunit
from txd.daemon.atomicfile import write_atomic
from txd.install import version

# txd's shutdown: submissions in flight, then local jobs, then calls in flight, each given
# --grace seconds; systemd waits this much more before its SIGKILL.
STOP_MARGIN = 30


class UnitError(Exception):
    """What stops the command, said for people."""


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--socket",
        help=f"the socket the unit's txd serves (env {defaults.SOCKET_ENV}; default "
        f"{defaults.socket_path()})",
    )
    common.add_argument(
        "--state-dir",
        help=f"the unit's txd's state dir (env {defaults.STATE_DIR_ENV}; default "
        f"{defaults.state_dir()})",
    )
    common.add_argument(
        "--grace",
        type=float,
        default=5.0,
        help="txd --grace: seconds given to replicas and calls at shutdown (default %(default)s)",
    )
    p = argparse.ArgumentParser(
        prog="txd unit",
        description=f"txd as a systemd user service, {userunit.NAME} in {userunit.unit_path()}",
    )
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    install = sub.add_parser(
        "install",
        parents=[common],
        help="write the unit and say how to enable it",
        description="Writes the user unit and prints the commands that enable it. Refuses when "
        "no systemd user manager runs for you (saying why), or when a different unit is "
        "there already: --force writes it anyway.",
    )
    install.add_argument(
        "--force", action="store_true", help="write even without a user manager; replace"
    )
    sub.add_parser("show", parents=[common], help="print the unit install would write")
    sub.add_parser("uninstall", help="remove the unit (once systemd no longer runs or enables it)")
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.action == "uninstall":
            return _uninstall()
        text = render(
            defaults.socket_path(args.socket), defaults.state_dir(args.state_dir), args.grace
        )
        if args.action == "show":
            sys.stdout.write(text)
            return 0
        return _install(text, args.force)
    except UnitError as e:
        print(f"txd unit: error: {e}", file=sys.stderr)
        return 1


def render(socket_path: Path, state_dir: Path, grace: float) -> str:
    """The unit's text."""
    if not grace >= 0:
        raise UnitError(f"--grace {grace}: expected seconds, 0 or more")
    command = [
        os.path.abspath(sys.executable),  # not resolved: a venv's python is a symlink
        "-m",
        "txd.daemon",
        "--socket",
        str(socket_path.absolute()),
        "--state-dir",
        str(state_dir.absolute()),
        "--grace",
        f"{grace:g}",
    ]
    stop = int(3 * grace) + STOP_MARGIN
    path = os.environ.get("PATH", os.defpath)
    return f"""\
{userunit.MARK} (txd {version()}); `txd unit show` prints it.
[Unit]
Description=txd, the TorchX job launcher daemon
# A txd that keeps failing stops being restarted: 5 starts in 2 minutes at most.
StartLimitIntervalSec=120
StartLimitBurst=5

[Service]
# READY=1 once the socket serves: `systemctl --user start txd` returns then.
Type=notify
NotifyAccess=main
ExecStart={" ".join(_quote(word, exec_line=True) for word in command)}
# The user manager's environment is not your shell's: the PATH txd finds sbatch, docker and
# the like on, as it was when the unit was written. More in ~/.config/txd/environment.
Environment={_quote("PATH=" + path)}
EnvironmentFile=-%E/txd/environment
# SIGTERM to txd only: its shutdown ends its local jobs and records them. SIGKILL to what is
# left after TimeoutStopSec, longer than that shutdown can take (3 x --grace).
KillMode=mixed
TimeoutStopSec={stop}
Restart=on-failure
RestartSec=2
# Exit code 2: bad settings or a socket txd will not take over; a restart changes nothing.
RestartPreventExitStatus=2

[Install]
WantedBy=default.target
"""


def _quote(word: str, exec_line: bool = False) -> str:
    """One word of a unit setting: '%' is a specifier and, on an Exec line, '$' a variable,
    so both are doubled; a word with a space, a quote or a backslash goes in double quotes."""
    if "\n" in word or "\r" in word:
        raise UnitError(f"{word!r}: a path for a unit file has no line break")
    word = word.replace("%", "%%")
    if exec_line:
        word = word.replace("$", "$$")
    if any(c in word for c in " \t\"'\\;"):
        word = '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return word


def _install(text: str, force: bool) -> int:
    path = userunit.unit_path()
    problem = userunit.manager_problem()
    if problem and not force:
        raise UnitError(
            f"cannot install {userunit.NAME}: {problem}. Without a user manager the unit is "
            "never started, and txctl starts txd itself as before. --force writes it anyway "
            "(for a machine where systemd runs; `txd unit show` prints it)"
        )
    try:
        old = path.read_text()
    except FileNotFoundError:
        old = None
    except OSError as e:
        raise UnitError(f"cannot read {path}: {e.strerror}") from None
    if old == text:
        print(f"txd unit: {path} is already this unit", file=sys.stderr)
    else:
        if old is not None and not force:
            raise UnitError(
                f"{path} exists and differs from the unit txd would write (`txd unit show`): "
                "--force replaces it"
            )
        _write(path, text)
        print(f"txd unit: wrote {path}", file=sys.stderr)
    if problem:
        print(
            f"txd unit: it cannot be used here: {problem}. On a machine whose systemd runs a "
            "manager for you, enable it as below.",
            file=sys.stderr,
        )
    user = os.environ.get("USER") or os.environ.get("LOGNAME") or "$USER"
    print(
        "next:\n"
        "  systemctl --user daemon-reload && systemctl --user enable --now txd\n"
        f"  loginctl enable-linger {user}\n"
        "Lingering keeps your user manager, and so txd and its jobs, running after your last "
        "session logs out (where logind ends a user's processes at logout, or removes "
        "$XDG_RUNTIME_DIR, txd would go with it); some sites let only an admin enable it.\n"
        "txctl then starts txd through the unit when none answers.",
        file=sys.stderr,
    )
    return 0


def _write(path: Path, text: str) -> None:
    """Whole or not at all: systemd never reads half a unit."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text.encode(), mode=0o644)
    except OSError as e:
        raise UnitError(f"cannot write {path}: {e.strerror}") from None


def _uninstall() -> int:
    path = userunit.unit_path()
    try:
        text = path.read_text()
    except FileNotFoundError:
        print(f"txd unit: no unit at {path}", file=sys.stderr)
        return 0
    except OSError as e:
        raise UnitError(f"cannot read {path}: {e.strerror}") from None
    if not text.startswith(userunit.MARK):
        raise UnitError(f"{path} was not written by `txd unit install`: txd leaves it alone")
    if not userunit.manager_problem():
        busy = [verb[3:] for verb in ("is-active", "is-enabled") if _systemctl_says(verb)]
        if busy:
            raise UnitError(
                f"{userunit.NAME} is still {' and '.join(busy)}: run `systemctl --user "
                "disable --now txd` first (stopping txd ends its local jobs, as SIGTERM does), "
                "then this again"
            )
    path.unlink()
    print(f"txd unit: removed {path}; run `systemctl --user daemon-reload`", file=sys.stderr)
    return 0


def _systemctl_says(verb: str) -> bool:
    """`systemctl --user is-active|is-enabled txd.service` succeeds."""
    command = userunit.systemctl()
    assert command is not None  # manager_problem() found it
    done = subprocess.run(
        [command, "--user", verb, "--quiet", userunit.NAME],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
    )
    return done.returncode == 0
