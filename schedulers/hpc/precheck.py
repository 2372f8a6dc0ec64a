"""Checks at submit of what would fail a batch job at once, made where the batch system's
commands run (this host or the login node) before anything is queued: TorchX users wait hours
in a queue only for a job to die on a wrong path or partition (pytorch/torchx#405).

The slurm and lsf schedulers say what to check; this module has the parts they share: a check's
result, the probe of the log directory and of an entrypoint (shell functions of one probe
script run by one command), and how the results read in a dry run and in a refusal.
"""

from __future__ import annotations

import secrets
import shlex
from dataclasses import dataclass

from txd.schedulers.errors import InvalidArgument

OK, FAIL, SKIP = "ok", "FAIL", "skip"


@dataclass(frozen=True)
class Check:
    """One check's result. `field` names what is wrong in a refusal (`cfg.partition`,
    `role trainer: entrypoint`); `outcome` is OK, FAIL or SKIP (could not be checked)."""

    field: str
    outcome: str
    detail: str


def render(checks: list[Check], where: str, option: str = "precheck") -> str:
    """The checks as comment lines, for a dry run's text."""
    if not checks:
        return f"# precheck: off ({option}=False)"
    lines = [f"# precheck on {where} (-c {option}=False turns it off):"]
    lines += [f"#   {c.outcome:<4}  {c.field}: {c.detail}" for c in checks]
    return "\n".join(lines)


def refuse_failed(checks: list[Check], where: str) -> None:
    """Raises InvalidArgument naming the first failed check's field, with every failure's
    reason; returns when none failed."""
    failed = [c for c in checks if c.outcome == FAIL]
    if not failed:
        return
    first, rest = failed[0], failed[1:]
    also = "".join(f"; also {c.field}: {c.detail}" for c in rest)
    raise InvalidArgument(
        first.field,
        f"{first.detail}{also} (checked on {where} before submitting; nothing was queued)",
    )


# Shell functions of the probe script. Each prints one line: "ok <detail>" or "fail <detail>".
#   logdir DIR CREATE: DIR is (or, CREATE=1, is made) a directory a file can be created in; in
#     a dry run (CREATE=0) a missing DIR counts when its nearest existing parent is writable.
#   entry EP DIR PATHVAR CWDLAST: EP resolves as the job's launcher resolves it: with a slash,
#     relative to DIR; without, on PATHVAR, then (CWDLAST=1: srun's own search) in DIR.
PROBE_FUNCTIONS = r"""
probe_dir() {
  t=$(mktemp -p "$1" .txd-precheck.XXXXXX 2>&1) || { printf '%s' "$t" | tail -n 1; return 1; }
  rm -f -- "$t"
}
logdir() {
  if [ -d "$1" ]; then
    if err=$(probe_dir "$1"); then echo "ok $1 is writable"
    else echo "fail cannot create a file in $1: $err"; fi
  elif [ -e "$1" ]; then
    echo "fail $1 exists and is not a directory"
  elif [ "$2" = 1 ]; then
    if err=$(mkdir -p -- "$1" 2>&1) && err=$(probe_dir "$1"); then echo "ok $1 created, writable"
    else echo "fail cannot create $1: $(printf '%s' "$err" | tail -n 1)"; fi
  else
    p=$1
    # Up one level at a time, without dirname(1): with no coreutils on the PATH its
    # "command not found" left p as it was, and the loop never ended.
    while [ ! -d "$p" ]; do
      case $p in */*) p=${p%/*}; p=${p:-/} ;; *) p=. ;; esac
    done
    if err=$(probe_dir "$p"); then
      echo "ok $1 does not exist yet; $p, where it would be created, is writable"
    else echo "fail $1 does not exist and cannot be created in $p: $err"; fi
  fi
}
is_exe() { [ -f "$1" ] && [ -x "$1" ]; }
entry() {
  case "$1" in
  /*) p=$1 ;;
  */*) p=$2/$1 ;;
  *)
    old_ifs=$IFS; IFS=:
    for d in $3; do
      [ -n "$d" ] || d=.
      if is_exe "$d/$1"; then IFS=$old_ifs; echo "ok $1 is $d/$1 (on the job's PATH)"; return; fi
    done
    IFS=$old_ifs
    if [ "$4" = 1 ] && is_exe "$2/$1"; then
      echo "ok $1 is $2/$1 (in the job's directory)"; return
    fi
    if [ "$4" = 1 ]; then echo "fail $1 is neither on the job's PATH ($3) nor in $2"
    else echo "fail $1 is not on the job's PATH ($3)"; fi
    return ;;
  esac
  if is_exe "$p"; then echo "ok $p is an executable file"
  elif [ -d "$p" ]; then echo "fail $p is a directory"
  elif [ -e "$p" ]; then echo "fail $p is not executable"
  else echo "fail $p does not exist"; fi
}
"""


class ProbeScript:
    """One bash script (run as `bash -s`, the script on stdin) whose steps' outputs come back
    in sections marked by a random token no command's output can forge."""

    def __init__(self) -> None:
        self.mark = f"@txd-precheck-{secrets.token_hex(8)}"
        self.lines = ["set +e", PROBE_FUNCTIONS]

    def step(self, name: str, command: str) -> None:
        """Runs `command` (shell text), its stdout and stderr captured as section `name`."""
        # The braces close on a line of their own: `command` may end with a here-document.
        self.lines.append(
            f"out=$({{ {command}\n}} 2>&1); rc=$?; printf '%s %s %s\\n%s\\n' "
            f'{self.mark} {shlex.quote(name)} "$rc" "$out"'
        )

    def heredoc(self, text: str) -> str:
        """Shell text feeding `text` to a command's stdin, verbatim."""
        while True:
            end = f"TXD_EOF_{secrets.token_hex(8)}"
            if end not in text:
                break
        body = text if text.endswith("\n") else text + "\n"
        return f"<<'{end}'\n{body}{end}\n"

    @property
    def text(self) -> str:
        return "\n".join(self.lines) + "\n"

    def sections(self, output: str) -> dict[str, tuple[int, str]]:
        """(exit status, output) of each step, by name."""
        out: dict[str, tuple[int, str]] = {}
        name, rc = "", 0
        body: list[str] = []
        for line in output.split("\n"):
            if line.startswith(self.mark + " "):
                if name:
                    out[name] = (rc, "\n".join(body).strip("\n"))
                _, name, code = line.split(" ", 2)
                rc, body = int(code) if code.lstrip("-").isdigit() else -1, []
            elif name:
                body.append(line)
        if name:
            out[name] = (rc, "\n".join(body).strip("\n"))
        return out


def probe_result(field: str, section: tuple[int, str] | None) -> Check:
    """A Check from a logdir or entry step's section."""
    if section is None:
        return Check(field, SKIP, "the probe printed nothing for it")
    said = section[1].strip().splitlines()
    line = said[-1] if said else ""
    word, _, detail = line.partition(" ")
    if word == "ok":
        return Check(field, OK, detail)
    if word == "fail":
        return Check(field, FAIL, detail)
    return Check(field, SKIP, f"the probe said {line!r:.200}")
