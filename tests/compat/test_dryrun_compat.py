"""TorchX 0.7's own dry run against txd's, field by field, for every scheduler both have and
every app of tests/compat/compat_apps.py: each difference must be a row of the table in
docs/torchx-compat.md, and each row must still be a difference (tests/compat/regen.py
rewrites the table)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import compat_apps
import compat_run
import compat_table
import pytest


@pytest.mark.parametrize("scheduler", list(compat_apps.SCHEDULERS))
def test_dry_run_differences_are_the_tables(scheduler: str, dryruns: Any) -> None:
    found = [d for d in dryruns.diffs if d.scheduler == scheduler]
    rows = [r for r in compat_table.read_rows()
            if r.diff.scheduler == scheduler and not r.diff.app.startswith("(")]  # fmt: skip
    unreadable = [d for d in found if "unreadable" in d.torchx + d.txd]
    assert not unreadable, f"compat_normalise.py cannot read these requests: {unreadable}"
    mismatch = compat_table.match(found, rows, dryruns.compared)
    notes = "\n".join(n for n in dryruns.notes if f" {scheduler} " in f" {n}")
    assert not mismatch, mismatch.message(scheduler) + "\nRefusals:\n" + notes


def test_builtin_appdefs_are_the_tables(torchx_python: Path, compat_workdir: Path) -> None:
    """Each builtin of the grid as TorchX 0.7 and txd resolve it (gap 4: the same AppDef for
    the same arguments), field by field: the table's `(appdef)` rows."""
    found, resolved = compat_run.appdef_differences(torchx_python, compat_workdir)
    rows = [r for r in compat_table.read_rows() if r.diff.scheduler == compat_run.APPDEF]
    mismatch = compat_table.match(found, rows, {compat_run.APPDEF: resolved})
    assert not mismatch, mismatch.message("builtins")


def test_both_sides_dry_run_several_apps(dryruns: Any) -> None:
    """The comparison is worth something only where both sides built a request: a scheduler
    with fewer than 3 apps dry run on both sides means the suite itself broke (the refusals
    are in the table as `(request)` rows, and printed here)."""
    for scheduler, apps in dryruns.compared.items():
        assert len(apps) >= 3, (scheduler, apps, "\n".join(dryruns.notes))


def test_the_table_tells_differences_apart() -> None:
    """The table's own machinery: a new difference, a vanished one, and a `*` row that no
    longer holds for every app are each reported, with how to update the table."""
    d = compat_table.Diff
    rows = [
        compat_table.Row(d("slurm", "echo", "a", '"1"', '"2"'), "txd is right"),
        compat_table.Row(d("slurm", "*", "b", "1", "(absent)"), "gap 7, being fixed"),
    ]
    found = [d("slurm", "echo", "b", "1", "(absent)"), d("slurm", "echo", "c", "x", "y")]
    m = compat_table.match(found, rows, {"slurm": ["echo", "sh"]})
    assert [x.field for x in m.new] == ["c"]
    assert [r.diff.field for r in m.stale] == ["a", "b"]  # `b` misses app sh
    assert "tests/compat/regen.py" in m.message("slurm")
    # regen: a `*` row for what every app shows, the old reason kept, a hint where values moved
    old = [compat_table.Row(d("slurm", "echo", "a", '"0"', '"2"'), "txd is right")]
    new = compat_table.regenerate(
        [*found, d("slurm", "sh", "b", "1", "(absent)"), d("slurm", "echo", "a", '"1"', '"2"')],
        [*rows[1:], *old],
        {"slurm": ["echo", "sh"]},
    )
    by_field = {r.diff.field: r for r in new}
    assert by_field["b"].diff.app == "*" and by_field["b"].reason == "gap 7, being fixed"
    assert by_field["a"].reason.startswith(compat_table.TODO)
    assert "txd is right" in by_field["a"].reason
    assert by_field["c"].reason == compat_table.TODO
    rows_text = compat_table.render(rows)
    assert compat_table.parse_rows(f"{compat_table.START}\n{rows_text}\n{compat_table.END}") == rows
