"""Every task txd starts has an owner: a raw `create_task`/`ensure_future` on the loop (a task
nobody awaits or cancels) is allowed only in the helpers that own tasks for the rest, the
daemon's task group (daemon/tasks.py), the kernel's async-iterator helpers
(schedulers/aiters.py) and the contract suite's stand-in for the daemon's group. A task group's
own `tg.create_task` is scoped, so it is fine anywhere."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TREES = ("daemon", "schedulers", "client", "proto/txd")
# The contract suite's Tasks stands in for the daemon's task group, so it owns tasks too. The
# ssh tunnel is a process of its own that ends by os._exit once everything it started is killed
# (never through asyncio.run's cancel-and-await, which can hang: CPython 125502): its one task,
# the master's watch, lives as long as the process.
OWNERS = {
    Path("daemon/tasks.py"),
    Path("schedulers/aiters.py"),
    Path("schedulers/testing/helpers.py"),
    Path("client/_tunnel.py"),
}
RAW = {"create_task", "ensure_future"}


def _raw_spawns(tree: ast.AST) -> list[int]:
    """Lines that start a task on the loop or through asyncio, not through a task group."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in RAW:  # `from asyncio import ensure_future`
            lines.append(node.lineno)
        elif isinstance(func, ast.Attribute) and func.attr in RAW:
            target = ast.unparse(func.value)
            if target == "asyncio" or "loop" in target.lower():
                lines.append(node.lineno)
    return lines


def _sources() -> list[Path]:
    files = [p for t in TREES for p in sorted((REPO / t).rglob("*.py"))]
    return [p for p in files if "_pb2" not in p.name]


def test_the_scan_finds_raw_tasks() -> None:
    """The check itself: each way of starting a raw task is caught, a task group's is not."""
    code = (
        "import asyncio\nfrom asyncio import ensure_future\n"
        "asyncio.create_task(f())\nasyncio.ensure_future(f())\n"
        "asyncio.get_running_loop().create_task(f())\nself._loop.create_task(f())\n"
        "ensure_future(f())\ntg.create_task(f())\nself.tasks.create_task(f())\n"
    )
    assert _raw_spawns(ast.parse(code)) == [3, 4, 5, 6, 7]


def test_no_raw_tasks_outside_the_owners() -> None:
    found = {}
    for path in _sources():
        rel = path.relative_to(REPO)
        if rel not in OWNERS and (lines := _raw_spawns(ast.parse(path.read_text(), str(rel)))):
            found[str(rel)] = lines
    assert not found, f"raw tasks (start them through a task group or aiters): {found}"
