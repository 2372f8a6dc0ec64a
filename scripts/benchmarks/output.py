"""The results as a text table (stdout) and as markdown between the markers of --out's file."""

from __future__ import annotations

from pathlib import Path

from benchmarks.common import HEADER, Results, log

BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def md_table(header: list[str], rows: list[list[str]]) -> str:
    def esc(s: str) -> str:
        return s.replace("|", "\\|")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def text_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    widths[-1] = 0  # notes: no padding

    def fmt(r: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()

    return "\n".join(
        [fmt(header), fmt(["-" * w for w in widths[:-1]] + ["-----"]), *(fmt(r) for r in rows)]
    )


def write_out(path: Path, machine: list[tuple[str, str]], res: Results, argv: list[str]) -> None:
    block = "\n".join(
        [
            BEGIN,
            f"Measured by `{' '.join(['scripts/bench', *argv])}` on {machine[0][1]}.",
            "",
            md_table(["machine", ""], [[k, v] for k, v in machine[1:]]),
            "",
            md_table(HEADER, res.table()),
            END,
        ]
    )
    if path.exists():
        text = path.read_text()
        if BEGIN in text and END in text:
            head, _, rest = text.partition(BEGIN)
            _, _, tail = rest.partition(END)
            text = head + block + tail
        else:
            text = text.rstrip("\n") + "\n\n" + block + "\n"
    else:
        text = "# Performance\n\n" + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    log(f"wrote {path}")
