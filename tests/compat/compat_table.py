"""The one table of remaining differences in docs/torchx-compat.md: read, matched against what
the suite found, and written back (tests/compat/regen.py) with the reasons kept.

A row is `| scheduler | app | field | TorchX | txd | reason |`; the values are JSON in code
spans, `(absent)` where a side has no such field. App `*` stands for every app of that
scheduler showing that difference (field and both values equal)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "torchx-compat.md"
START = "<!-- compat-table:start (tests/compat/regen.py rewrites the rows) -->"
END = "<!-- compat-table:end -->"
HEADER = (
    "| scheduler | app | field | TorchX | txd | reason |\n| --- | --- | --- | --- | --- | --- |"
)
ABSENT = "(absent)"
TODO = "TODO: say why"
REGEN = ".venv/bin/python tests/compat/regen.py"


class _Absent:
    def __repr__(self) -> str:
        return ABSENT


MISSING = _Absent()


def show(value: object) -> str:
    """A value as its table cell text (before escaping)."""
    if value is MISSING:
        return ABSENT
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


@dataclass(frozen=True)
class Diff:
    scheduler: str
    app: str
    field: str
    torchx: str  # show()n
    txd: str

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        return (self.scheduler, self.app, self.field, self.torchx, self.txd)


@dataclass(frozen=True)
class Row:
    diff: Diff
    reason: str

    def covers(self, d: Diff) -> bool:
        r = self.diff
        return (r.scheduler, r.field, r.torchx, r.txd) == (
            d.scheduler,
            d.field,
            d.torchx,
            d.txd,
        ) and r.app in ("*", d.app)


def compare(fields_a: dict[str, object], fields_b: dict[str, object]) -> list[tuple[str, str, str]]:
    """(field, TorchX's value, txd's) for each field whose values differ."""
    out = []
    for f in sorted(set(fields_a) | set(fields_b)):
        a, b = fields_a.get(f, MISSING), fields_b.get(f, MISSING)
        if show(a) != show(b):
            out.append((f, show(a), show(b)))
    return out


# -- the markdown ------------------------------------------------------------------------------


def _cell(text: str) -> str:
    text = text.replace("|", "\\|")
    if text == ABSENT:
        return ABSENT
    tick = "``" if "`" in text else "`"
    pad = " " if tick == "``" else ""
    return f"{tick}{pad}{text}{pad}{tick}"


def _uncell(cell: str) -> str:
    cell = cell.strip()
    for tick in ("``", "`"):
        if cell.startswith(tick) and cell.endswith(tick) and len(cell) >= 2 * len(tick):
            cell = cell[len(tick) : -len(tick)]
            if tick == "``":
                cell = cell[1:-1]
            break
    return cell.replace("\\|", "|")


def format_row(row: Row) -> str:
    d = row.diff
    cells = [d.scheduler, d.app, _cell(d.field), _cell(d.torchx), _cell(d.txd), row.reason]
    return "| " + " | ".join(cells) + " |"


def parse_rows(text: str) -> list[Row]:
    body = text.split(START, 1)[1].split(END, 1)[0]
    rows = []
    for line in body.splitlines():
        if not line.startswith("|") or line.startswith(("| scheduler |", "| ---")):
            continue
        cells = [c for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if len(cells) != 6:
            raise ValueError(f"{DOC}: a table row needs 6 cells: {line}")
        sched, app, field, tx, txd, reason = (c.strip() for c in cells)
        rows.append(Row(Diff(sched, app, _uncell(field), _uncell(tx), _uncell(txd)), reason))
    return rows


def read_rows(doc: Path = DOC) -> list[Row]:
    return parse_rows(doc.read_text())


def render(rows: Sequence[Row]) -> str:
    return "\n".join([HEADER, *(format_row(r) for r in rows)])


SUMMARY_START = "<!-- compat-summary:start (tests/compat/regen.py writes it) -->"
SUMMARY_END = "<!-- compat-summary:end -->"


def summary(rows: Sequence[Row]) -> str:
    """Rows per scheduler and per gap named in their reason (`-`: a difference no gap covers:
    txd's choice, or the same request written otherwise)."""
    counts: dict[str, dict[str, int]] = {}
    for r in rows:
        m = re.search(r"\bgap (\d+)", r.reason)
        gap = f"gap {m.group(1)}" if m else "-"
        per = counts.setdefault(r.diff.scheduler, {})
        per[gap] = per.get(gap, 0) + 1
    gaps = sorted({g for per in counts.values() for g in per}, key=lambda g: (g == "-", len(g), g))
    lines = [
        "| scheduler | rows | " + " | ".join(gaps) + " |",
        "| --- | --- | " + " | ".join("---" for _ in gaps) + " |",
    ]
    for sched, per in counts.items():
        cells = [str(per.get(g, "")) for g in gaps]
        lines.append(f"| {sched} | {sum(per.values())} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_rows(rows: Sequence[Row], doc: Path = DOC) -> None:
    text = doc.read_text()
    head, rest = text.split(START, 1)
    tail = rest.split(END, 1)[1]
    text = f"{head}{START}\n{render(rows)}\n{END}{tail}"
    if SUMMARY_START in text:
        head, rest = text.split(SUMMARY_START, 1)
        tail = rest.split(SUMMARY_END, 1)[1]
        text = f"{head}{SUMMARY_START}\n{summary(rows)}\n{SUMMARY_END}{tail}"
    doc.write_text(text)


def _hint(d: Diff, old: Sequence[Row]) -> str:
    """TODO, with the reason an old row of the same scheduler and field gave (its values have
    changed: a fix landed, or moved the difference), for whoever writes the new reason."""
    was = next(
        (r.reason for r in old if (r.diff.scheduler, r.diff.field) == (d.scheduler, d.field)),
        "",
    )
    return (
        f"{TODO} (before, with other values: {was})" if was and not was.startswith(TODO) else TODO
    )


# -- matching ---------------------------------------------------------------------------------


@dataclass
class Mismatch:
    new: list[Diff]  # found, in no row
    stale: list[Row]  # a row that matches nothing found
    unexplained: list[Row]  # a row with no reason yet

    def __bool__(self) -> bool:
        return bool(self.new or self.stale or self.unexplained)

    def message(self, what: str) -> str:
        parts = [f"{what}: the differences from TorchX 0.7 no longer match {DOC.name}'s table."]
        if self.new:
            parts.append("New differences (in no row):")
            parts += [format_row(Row(d, TODO)) for d in self.new]
        if self.stale:
            parts.append("Rows whose difference is gone (remove them):")
            parts += [format_row(r) for r in self.stale]
        if self.unexplained:
            parts.append("Rows without a reason:")
            parts += [format_row(r) for r in self.unexplained]
        parts.append(
            f"To update the table: `{REGEN}` rewrites its rows from what the suite finds, keeping "
            f"each reason whose row still matches; then write a reason in place of every "
            f"`{TODO}` (is txd right? a known gap: say which)."
        )
        return "\n".join(parts)


def match(found: Iterable[Diff], rows: Sequence[Row], compared: dict[str, list[str]]) -> Mismatch:
    """`compared`: each scheduler's apps that both sides dry ran (a `*` row must show in each
    of them, else it is stale: narrow it)."""
    found = list(found)
    new = [d for d in found if not any(r.covers(d) for r in rows)]

    def holds(r: Row) -> bool:
        hits = {d.app for d in found if r.covers(d)}
        if r.diff.app == "*":
            return bool(hits) and hits >= set(compared.get(r.diff.scheduler, []))
        return bool(hits)

    stale = [r for r in rows if not holds(r)]
    unexplained = [r for r in rows if not r.reason or r.reason.startswith("TODO")]
    return Mismatch(new, stale, unexplained)


def regenerate(
    found: Sequence[Diff], old: Sequence[Row], apps_by_scheduler: dict[str, list[str]]
) -> list[Row]:
    """The rows for `found`: a difference shown by every app its scheduler dry ran on both
    sides (`apps_by_scheduler`, at least two) becomes one `*` row; each row keeps the reason
    of the old row that covered it (else TODO)."""
    groups: dict[tuple[str, str, str, str], list[Diff]] = {}
    for d in found:
        groups.setdefault((d.scheduler, d.field, d.torchx, d.txd), []).append(d)
    out: list[Row] = []
    for (sched, field, tx, txd), diffs in groups.items():
        apps = {d.app for d in diffs}
        every = apps_by_scheduler.get(sched, [])
        if len(every) > 1 and apps >= set(every):
            merged = [Diff(sched, "*", field, tx, txd)]
        else:
            merged = sorted(diffs, key=lambda d: d.app)
        for d in merged:
            probes = diffs if d.app == "*" else [d]
            reason = next((r.reason for r in old for p in probes if r.covers(p) and r.reason), "")
            out.append(Row(d, reason or _hint(d, old)))
    order = {s: i for i, s in enumerate(apps_by_scheduler)}
    out.sort(key=lambda r: (order.get(r.diff.scheduler, 99), r.diff.scheduler, r.diff.app,
                            r.diff.field))  # fmt: skip
    return out
