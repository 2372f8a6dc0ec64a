#!/usr/bin/env python3
"""Rewrites the rows of docs/torchx-compat.md's table from what the compatibility suite finds
now, keeping the reason of every row that still matches (new rows get `TODO: say why`):

    .venv/bin/python tests/compat/regen.py      (after scripts/torchx-venv)

Starts one txd daemon of its own (stopped at the end), runs TorchX's side in its venv, prints
the rows added and removed. The suite (tests/compat) fails until every TODO has a reason.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import compat_config  # noqa: E402
import compat_run  # noqa: E402
import compat_table  # noqa: E402
import txd_testing  # noqa: E402


def main() -> int:
    why = compat_run.venv_problem()
    python = compat_run.torchx_python()
    if why or python is None:
        print(why, file=sys.stderr)
        return 2
    root = txd_testing.short_tmpdir("txdt-compat-")
    daemon = compat_run.compat_daemon(root).start()
    try:
        work = root / "work"
        work.mkdir()
        runs = compat_run.dryrun_differences(python, daemon.socket, work)
        found = runs.diffs
        found += compat_config.runopts_differences(python, daemon, work)
        found += compat_config.torchxconfig_differences(python, daemon, work, runs.diffs)
        appdefs, resolved = compat_run.appdef_differences(python, work)
        found += appdefs
    finally:
        daemon.close()
        txd_testing.remove_tree(root)
    old = compat_table.read_rows()
    rows = compat_table.regenerate(found, old, {**runs.compared, compat_run.APPDEF: resolved})
    compat_table.write_rows(rows)
    before = {r.diff.key for r in old}
    after = {r.diff.key for r in rows}
    for r in rows:
        if r.diff.key not in before:
            print("+ " + compat_table.format_row(r))
    for r in old:
        if r.diff.key not in after:
            print("- " + compat_table.format_row(r))
    todo = sum(1 for r in rows if r.reason == compat_table.TODO)
    print(f"{len(rows)} rows in {compat_table.DOC}; {todo} need a reason", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
