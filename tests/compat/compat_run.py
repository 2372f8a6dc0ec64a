"""Running both sides: TorchX's dry runs in its own venv (one process per scheduler, all started
at once), txd's through a real daemon (one client, every case), and the differences between
them as compat_table.Diff rows. Offline: no cluster, no AWS, nothing contacted."""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import re
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import compat_apps
import compat_normalise
from compat_table import Diff, compare, show

REPO = Path(__file__).resolve().parents[2]
SIDE = Path(__file__).resolve().parent / "torchx_side.py"
DRIVER_TIMEOUT = 300.0


def compat_daemon(root: Path) -> Any:
    """A txd daemon (not started) with a HOME of its own and no KUBECONFIG or AWS_* variables:
    no user's cluster or account reaches its dry runs."""
    from txd_testing import Daemon

    (root / "home").mkdir(exist_ok=True)
    d = Daemon(root, env={"HOME": str(root / "home")})
    d.env = {k: v for k, v in d.env.items() if not k.startswith(("AWS_", "KUBE"))}
    return d


# The user both sides run as (tags, runopts defaults): masked, so the table holds on any host.
USER = getpass.getuser()


def torchx_venv() -> Path:
    return Path(os.environ.get("TXD_TORCHX_VENV") or REPO / ".torchx-venv")


def torchx_python() -> Path | None:
    """The python of TorchX 0.7's own venv (scripts/torchx-venv makes it), if it is there."""
    python = torchx_venv() / "bin" / "python"
    return python if python.exists() else None


def venv_problem() -> str:
    """Why TorchX's venv cannot be used ('' if it can): missing, or made with other pins than
    scripts/torchx-venv's (whose versions the table holds)."""
    if torchx_python() is None:
        return f"no TorchX 0.7 venv at {torchx_venv()}: run scripts/torchx-venv (scripts/test does)"
    script = (REPO / "scripts" / "torchx-venv").read_text()
    m = re.search(r"^pins=\((.*)\)$", script, re.MULTILINE)
    want = [p.strip('"') for p in m.group(1).split()] if m else []
    stamp = torchx_venv() / ".txd-pins"
    have = stamp.read_text().split() if stamp.exists() else []
    if have != want:
        return f"{torchx_venv()} has other pins than scripts/torchx-venv's: run scripts/torchx-venv"
    return ""


def driver_env(workdir: Path) -> dict[str, str]:
    """TorchX's environment: what it needs to dry run offline, and no more. Its slurm dry run
    asks `sinfo` for the partition's memory: a stub `sinfo` that fails, as off-cluster, makes
    it use memory requests (its own default). Its kubernetes dry runs need no kubeconfig; a
    HOME of its own keeps a user's ~/.kube, ~/.aws and .torchxconfig out."""
    stub = workdir / "stub-bin"
    stub.mkdir(exist_ok=True)
    sinfo = stub / "sinfo"
    sinfo.write_text("#!/bin/sh\necho 'sinfo: no cluster here (compat suite stub)' >&2\nexit 1\n")
    sinfo.chmod(0o755)
    home = workdir / "home"
    home.mkdir(exist_ok=True)
    tmp = workdir / "tmp"  # TorchX's local scheduler makes a temp dir per process: keep it here
    tmp.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "KUBE", "TORCHX"))}
    env.update(
        PATH=f"{stub}:{env.get('PATH', '/usr/bin:/bin')}",
        HOME=str(home),
        TMPDIR=str(tmp),
        SAGEMAKER_SUPPRESS_V2_WARNING="1",
        AWS_DEFAULT_REGION="us-east-1",
    )
    return env


def start_torchx(
    python: Path, mode: str, doc: dict[str, Any], workdir: Path
) -> subprocess.Popen[str]:
    """TorchX's side on `doc` (given as a file: nothing to write while it runs)."""
    fd, name = tempfile.mkstemp(prefix=f"{mode}-", suffix=".json", dir=workdir)
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f)
    with open(name) as stdin:
        return subprocess.Popen(
            [str(python), str(SIDE), mode],
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=workdir,
            env=driver_env(workdir),
        )


def finish_torchx(proc: subprocess.Popen[str]) -> Any:
    try:
        out, err = proc.communicate(timeout=DRIVER_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError(f"TorchX's side did not finish in {DRIVER_TIMEOUT} s") from None
    assert proc.returncode == 0, f"TorchX's side failed ({proc.returncode}):\n{err}"
    return json.loads(out)


def torchx_dryruns_started(python: Path, workdir: Path) -> dict[str, subprocess.Popen[str]]:
    """TorchX's dry runs of every scheduler's cases, one process per scheduler, started at once
    (finish_torchx collects each: results in the order of the cases)."""
    return {
        s: start_torchx(
            python,
            "dryrun",
            {"scheduler": s, "cases": [a.torchx_case(cfg) for a in compat_apps.apps_for(s)]},
            workdir,
        )
        for s, cfg in compat_apps.SCHEDULERS.items()
    }


async def _txd_dryruns(socket: Path, workdir: Path) -> dict[str, dict[str, Any]]:
    from txd.client import AsyncClient, components

    out: dict[str, dict[str, Any]] = {}
    async with AsyncClient(socket) as client:
        for s, cfg in compat_apps.SCHEDULERS.items():
            results = out.setdefault(s, {})
            full = {**cfg, **compat_apps.TXD_ONLY_CFG.get(s, {})}
            for a in compat_apps.apps_for(s):
                try:
                    if a.spec:
                        app = compat_apps.txd_appdef(a.spec)
                    else:
                        app = components.resolve(a.component, list(a.args))
                    resp = await client.dryrun(app, s, full, cwd=str(workdir), workspace="")
                    roles = [r.name for r in app.roles]
                    results[a.id] = {"id": a.id, "roles": roles, "request": resp.request}
                except Exception as e:  # a refusal is a result to compare
                    results[a.id] = {"id": a.id, "error": f"{type(e).__name__}: {e}"}
    return out


def txd_dryruns(socket: Path, workdir: Path) -> dict[str, dict[str, Any]]:
    return asyncio.run(_txd_dryruns(socket, workdir))


def fields_of(
    scheduler: str, side: int, result: dict[str, Any] | None, cwd: Path | None = None
) -> dict[str, Any]:
    """A side's result as field -> value: its request's fields, or the one field `(request)`
    when it refused (a refusal is one row, not one per field the other side has)."""
    if result is None:
        return {"(request)": "(not run)"}
    if "error" in result:
        return {"(request)": "refused"}
    names = {f"={r}": f"<role{i}>" for i, r in enumerate(result.get("roles", []))}
    names.setdefault(f"={USER}", "<user>")
    if cwd is not None:
        names[str(cwd)] = "<cwd>"
    try:
        return compat_normalise.fields(scheduler, side, result["request"], names)
    except Exception as e:  # a request the normaliser cannot read is a finding
        return {"(request)": f"unreadable: {type(e).__name__}: {e}"}


def paired_fields(
    scheduler: str, torchx: dict[str, Any] | None, txd: dict[str, Any] | None, cwd: Path
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both sides' fields; both refusing is agreement (nothing to compare), one refusing is the
    one field `(request)` (not one row per field the other side has)."""
    left = fields_of(scheduler, 0, torchx, cwd)
    right = fields_of(scheduler, 1, txd, cwd)
    if left == right == {"(request)": "refused"}:
        return {}, {}
    if "(request)" in left or "(request)" in right:
        return (
            {"(request)": left.get("(request)", "a request")},
            {"(request)": right.get("(request)", "a request")},
        )
    return left, right


def differences(
    torchx: dict[str, dict[str, Any]], txd: dict[str, dict[str, Any]], cwd: Path
) -> list[Diff]:
    """Field by field, every case of every scheduler. Both sides refusing is agreement; one
    refusing shows as the field `(request)`."""
    out = []
    for s in compat_apps.SCHEDULERS:
        for a in compat_apps.apps_for(s):
            left, right = paired_fields(
                s, torchx.get(s, {}).get(a.id), txd.get(s, {}).get(a.id), cwd
            )
            out += [Diff(s, a.id, f, x, y) for f, x, y in compare(left, right)]
    return out


def errors(results: dict[str, dict[str, Any]]) -> Iterable[str]:
    """Each refusal, one line: shown when a test fails, to tell a gap from a bug."""
    for s, by_app in results.items():
        for a, r in by_app.items():
            if "error" in r:
                yield f"{s} {a}: {r['error'].splitlines()[0][:300]}"


@dataclass
class DryRuns:
    diffs: list[Diff]
    # Each scheduler's apps that both sides dry ran (what a `*` row stands for).
    compared: dict[str, list[str]]
    # Each refusal, one line per side and case (printed when a test fails).
    notes: list[str]


APPDEF = "(appdef)"


def txd_app_dict(app: Any) -> dict[str, Any]:
    """txd's AppDef in the shape of TorchX's (torchx_side._app_dict): memMB, mounts by kind."""
    from google.protobuf.json_format import MessageToDict

    d = MessageToDict(
        app, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    for r in d["roles"]:
        res = r.get("resource")  # None for a role without one (metrics.tensorboard)
        if res is not None:
            res["memMB"] = int(res.pop("mem_mb"))
            if not res.get("named"):
                res.pop("named", None)
        r["mounts"] = [
            {"kind": kind, **fields} for m in r.get("mounts", []) for kind, fields in m.items()
        ]
    return d


def appdef_differences(python: Path, workdir: Path) -> tuple[list[Diff], list[str]]:
    """Each builtin of the grid, resolved by TorchX 0.7 and by txd (client side, as txctl
    does), compared as AppDefs field by field (scheduler `(appdef)`); and the apps both
    resolved."""
    from txd.client import components

    apps = [a for a in compat_apps.APPS if a.component]
    proc = start_torchx(python, "appdef", {"cases": [a.torchx_case({}) for a in apps]}, workdir)
    ours: dict[str, dict[str, Any]] = {}
    for a in apps:
        try:
            ours[a.id] = txd_app_dict(components.resolve(a.component, list(a.args)))
        except Exception as e:  # a refusal is a result to compare
            ours[a.id] = {"error": f"{type(e).__name__}: {e}"}
    theirs = {r["id"]: r.get("app", {"error": r.get("error")}) for r in finish_torchx(proc)}
    out: list[Diff] = []
    both = []
    for a in apps:
        left, right = theirs[a.id], ours[a.id]
        if "error" in left or "error" in right:
            if not ("error" in left and "error" in right):
                x = "refused" if "error" in left else "an AppDef"
                y = "refused" if "error" in right else "an AppDef"
                out.append(Diff(APPDEF, a.id, "(app)", show(x), show(y)))
            continue
        both.append(a.id)
        lf = compat_normalise.flatten(compat_normalise.keyed(left))
        rf = compat_normalise.flatten(compat_normalise.keyed(right))
        out += [Diff(APPDEF, a.id, f, x, y) for f, x, y in compare(lf, rf)]
    return out, both


def dryrun_differences(python: Path, socket: Path, workdir: Path) -> DryRuns:
    """Both sides' dry runs of every case, and their differences."""
    started = torchx_dryruns_started(python, workdir)
    ours = txd_dryruns(socket, workdir)
    theirs = {s: {r["id"]: r for r in finish_torchx(p)} for s, p in started.items()}
    notes = [f"TorchX: {e}" for e in errors(theirs)] + [f"txd: {e}" for e in errors(ours)]
    compared = {
        s: [a.id for a in compat_apps.apps_for(s)
            if "request" in theirs[s].get(a.id, {}) and "request" in ours[s].get(a.id, {})]
        for s in compat_apps.SCHEDULERS
    }  # fmt: skip
    return DryRuns(differences(theirs, ours, workdir), compared, notes)
