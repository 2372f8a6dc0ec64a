"""`torchx runopts` against `txctl runopts` (names, types, defaults, required), and the
`.torchxconfig` that `torchx configure --all` writes read by both: each scheduler's dry run of
utils.echo from that file alone (its FIXME placeholders filled as a user would). Differences
are compat_table rows with app `(runopts)` or `(torchxconfig)`."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import compat_apps
import compat_run
from compat_table import Diff, compare

RUNOPTS = "(runopts)"
CONFIG = "(torchxconfig)"
_TXD_TYPES = {
    "STR": "str",
    "INT": "int",
    "FLOAT": "float",
    "BOOL": "bool",
    "LIST": "List[str]",
    "DICT": "Dict[str, str]",
}


def _canonical(name: str) -> str:
    return name.replace("-", "_")  # txd takes TorchX's dashed names as underscored


def _torchx_opts(opts: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for o in opts:
        key = _canonical(o["name"])
        out[f"{key}.name"] = o["name"]
        out[f"{key}.type"] = o["type"]
        out[f"{key}.default"] = _user(o["default"])
        out[f"{key}.required"] = o["required"]
    return out


def _user(value: Any) -> Any:
    return "<user>" if value == compat_run.USER else value


def _txd_default(raw: Any) -> Any:
    """txd's CfgValue JSON ({"str": ""}, {"list": {"items": [...]}}) as a plain value; TorchX
    writes an unset default as None, txd omits it."""
    if not isinstance(raw, dict) or not raw:
        return None
    (kind, value), *_ = raw.items()
    if kind == "list":
        return list(value.get("items", []))
    if kind == "dict":
        return dict(value.get("items", {}))
    if kind == "int":
        return int(value)  # proto3 JSON writes int64 as a string
    return value


def _txd_opts(opts: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for o in opts:
        key = _canonical(o["name"])
        out[f"{key}.name"] = o["name"]
        out[f"{key}.type"] = _TXD_TYPES.get(o["type"], o["type"])
        out[f"{key}.default"] = _user(_txd_default(o.get("default")))
        out[f"{key}.required"] = bool(o.get("required", False))
    return out


def runopts_differences(python: Path, daemon: Any, workdir: Path) -> list[Diff]:
    scheds = list(compat_apps.SCHEDULERS)
    proc = compat_run.start_torchx(python, "runopts", {"schedulers": scheds}, workdir)
    res = daemon.txctl("runopts", "--json", check=True)
    theirs = compat_run.finish_torchx(proc)
    ours = json.loads(res.stdout)
    out = []
    for s in scheds:
        left, right = _torchx_opts(theirs[s]), _txd_opts(ours.get(s, []))
        # An option one side lacks shows once (its name), not once per attribute.
        only = {f.rsplit(".", 1)[0] for f in set(left) ^ set(right)}
        left = {
            f: v for f, v in left.items() if f.rsplit(".", 1)[0] not in only or f.endswith(".name")
        }
        right = {
            f: v for f, v in right.items() if f.rsplit(".", 1)[0] not in only or f.endswith(".name")
        }
        out += [Diff(s, RUNOPTS, f, x, y) for f, x, y in compare(left, right)]
    return out


# -- .torchxconfig ----------------------------------------------------------------------------

_FIXME = re.compile(r"^(\w[\w-]*) = #FIXME.*$", re.MULTILINE)


def configure_all(python: Path, workdir: Path) -> str:
    """`torchx configure --all` for every scheduler of the suite, its placeholders filled with
    the suite's values for the required options."""
    torchx = python.parent / "torchx"
    scheds = ",".join(compat_apps.SCHEDULERS)
    proc = subprocess.run(
        [str(torchx), "configure", "--all", "-s", scheds, "--print"],
        capture_output=True,
        text=True,
        cwd=workdir,
        env=compat_run.driver_env(workdir),
        timeout=compat_run.DRIVER_TIMEOUT,
    )
    assert proc.returncode == 0, f"torchx configure failed:\n{proc.stderr}"
    text = "\n".join(ln for ln in proc.stdout.splitlines() if not ln.startswith("sagemaker."))
    section = ""
    lines = []
    for line in text.splitlines():
        if m := re.match(r"^\[(\w+)\]$", line):
            section = m.group(1)
        if m := _FIXME.match(line):
            value = compat_apps.SCHEDULERS[section].get(m.group(1))
            assert value is not None, f"no value for required [{section}] {m.group(1)}"
            line = f"{m.group(1)} = {value}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def torchxconfig_differences(
    python: Path, daemon: Any, workdir: Path, plain: list[Diff]
) -> list[Diff]:
    """The differences of utils.echo's dry run from the configured file, less those its dry
    run without the file (`plain`: the dry-run grid's) shows already."""
    conf_dir = workdir / "configured"
    conf_dir.mkdir(exist_ok=True)
    (conf_dir / ".torchxconfig").write_text(configure_all(python, workdir))
    echo = compat_apps.App("echo", "utils.echo", ("--msg", "hello world"))
    cases = {
        s: {**echo.torchx_case({}), "config_dir": str(conf_dir)} for s in compat_apps.SCHEDULERS
    }
    jobs = [{"scheduler": s, "cases": [c]} for s, c in cases.items()]
    proc = compat_run.start_torchx(python, "dryrun", {"jobs": jobs}, conf_dir)
    ours: dict[str, dict[str, Any]] = {}
    for s in compat_apps.SCHEDULERS:
        extra = [f"{k}={v}" for k, v in compat_apps.TXD_ONLY_CFG.get(s, {}).items()]
        args = ["-c", ",".join(extra)] if extra else []
        res = daemon.txctl(
            "run", "--dryrun", "--json", "--workspace", "", "-s", s, *args,
            "utils.echo", "--msg", "hello world",
            cwd=conf_dir,
        )  # fmt: skip
        if res.returncode == 0:
            done = json.loads(res.stdout)
            roles = [r["name"] for r in done["app"]["roles"]]
            ours[s] = {"echo": {"id": "echo", "roles": roles, "request": done["request"]}}
        else:
            ours[s] = {"echo": {"id": "echo", "error": res.stderr.strip() or res.stdout}}
    done = compat_run.finish_torchx(proc)
    theirs = {s: {r["id"]: r for r in results} for s, results in done.items()}
    out = []
    for s in compat_apps.SCHEDULERS:
        left, right = compat_run.paired_fields(
            s, theirs[s].get("echo"), ours[s].get("echo"), conf_dir
        )
        out += [Diff(s, CONFIG, f, x, y) for f, x, y in compare(left, right)]
    known = {(d.scheduler, d.field, d.torchx, d.txd) for d in plain if d.app == "echo"}
    return [d for d in out if (d.scheduler, d.field, d.torchx, d.txd) not in known]
