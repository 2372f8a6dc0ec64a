"""One table of values a shell, a script or a command line would mangle if any layer quoted
them wrongly, shared by every scheduler's "arrives exactly as given" test (importable as
`nasty`: tests/ is on pytest's `pythonpath`).

Not in the table: `$$` and `${app_id}`-style names, which are TorchX's macros (`$$` is the
escape for a literal `$`, replaced on purpose before any scheduler sees the value); NUL, which
the daemon refuses at its edge (tests/integration/test_nasty_strings.py).
"""

from __future__ import annotations

from collections.abc import Mapping

NASTY: Mapping[str, str] = {
    "space": "two  words ",
    "single_quote": "it's",
    "double_quote": 'say "hi"',
    "unbalanced": "'\"",
    "subst": "$(touch /tmp/txd-nasty-pwned)",
    "backticks": "`touch /tmp/txd-nasty-pwned`",
    "var": "$HOME ${USER} $1 $@ $* $? $! $- $#",
    "dollar_end": "end$",
    "k8s_ref": "$(HOME) $(NASTY_space)",  # Kubernetes expands $(VAR) in command and env
    "semicolon": "a; touch /tmp/txd-nasty-pwned",
    "pipe": "a | cat",
    "and": "true && touch /tmp/txd-nasty-pwned || false",
    "glob": "* ? [a-z]",
    "brace": "{a,b} ~ ~root",
    "redirect": "> out < in 2>&1",
    "hash": "# not a comment",
    "newline": "line one\nEOF\n#SBATCH --x\n# BSUB -x\nlast\n",
    "crlf": "a\r\nb",
    "tab": "a\tb",
    "backslash": "C:\\dir\\n \\\\ end\\",
    "non_ascii": "é 日本 🎉",
    "leading_dash": "-rf",
    "double_dash": "--",
    "ctrl": "\x01 \x7f \x1b[31m",
    "placeholder": "\x01txd-job-id\x01",  # control-byte placeholders (slurm's was) are forgeable
    "percent": "%j %u %%",  # Slurm's and LSF's file name patterns
    "colon": "a : b",  # srun's heterogeneous-job separator
    "equals": "=a=b=",
    "empty": "",
}

# Where the file-system rules allow it, a directory name with most of the table in it.
NASTY_DIR = "dir 'q' \"d\" $(x) `y` $Z; a|b & c * é 日本 🎉 -x \\ \t tab"
# ... and one with a newline, which some batch systems cannot take in a directory.
NASTY_DIR_NEWLINE = "dir\nnext line"

# A pwned file the table's commands would create if a shell ever ran them.
PWNED = "/tmp/txd-nasty-pwned"


def nasty_env() -> dict[str, str]:
    """The table as environment variables NASTY_<label>."""
    return {f"NASTY_{label}": value for label, value in NASTY.items()}


def nasty_args() -> list[str]:
    return list(NASTY.values())


# Names (apps, roles) follow a rule (daemon/validate.py): every table value but these breaks it.
NAME_OK = ("a", "a_b.c-1", "_x", "Z9")
