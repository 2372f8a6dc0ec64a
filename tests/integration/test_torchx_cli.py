"""TorchX's CLI spellings that txctl takes, for a user coming from `torchx`: `log` for `logs`,
`HANDLE/ROLE/0,2`, `status --roles`, `builtins --print`, `configure`. Through a real daemon and
the real txctl."""

from __future__ import annotations

import configparser
import json
import re
from pathlib import Path
from typing import Any

from txd.v1 import AppDef, AppState, Role
from txd_testing import first_line, sh_app


def two_roles() -> AppDef:
    return AppDef(
        name="two",
        roles=[
            Role(name="a", entrypoint="sh", args=["-c", "echo from-a"]),
            Role(name="b", entrypoint="sh", args=["-c", "echo from-b; exit 3"], num_replicas=2),
        ],
    )


async def test_status_roles_shows_only_those_roles(client: Any, txctl: Any) -> None:
    handle = await client.run(two_roles(), "local_cwd")
    assert (await client.wait(handle)).state == AppState.FAILED
    everything = txctl("status", handle, check=0).stdout
    assert "    a/0: SUCCEEDED exit=0" in everything and "    b/1: FAILED exit=3" in everything
    only_b = txctl("status", handle, "--roles", "b", check=0).stdout
    replicas = [line.strip() for line in only_b.splitlines() if line.startswith("    ")]
    assert replicas == ["b/0: FAILED exit=3 on localhost", "b/1: FAILED exit=3 on localhost"]
    assert only_b.splitlines()[:2] == everything.splitlines()[:2]  # the rest is the job's
    body = json.loads(txctl("status", "--json", handle, "--roles", "a", check=0).stdout)
    assert [r["role"] for r in body["roles"]] == ["a"]
    assert len(json.loads(txctl("status", "--json", handle, "--roles", "b,a").stdout)["roles"]) == 2
    proc = txctl("status", handle, "--roles", "a,c", check=2)
    assert proc.stderr == f"txctl: error: {handle} has no role 'c' (its roles: a, b)\n"
    assert proc.stdout == ""


async def test_log_takes_several_replicas(client: Any, txctl: Any) -> None:
    app = sh_app("echo line-$WHO", name="three", role="r", replicas=3, env={"WHO": "${replica_id}"})
    handle = await client.run(app, "local_cwd")
    await client.wait(handle)
    out = txctl("log", f"{handle}/r/2,0", check=0).stdout
    assert sorted(out.splitlines()) == ["r/0 line-0", "r/2 line-2"]
    assert txctl("log", f"{handle}/r/1", check=0).stdout == "line-1\n"  # one: raw bytes
    proc = txctl("log", f"{handle}/r/0,x", check=2)
    assert "bad replica '0,x'" in proc.stderr
    assert "is listed twice" in txctl("log", f"{handle}/r/1,1", check=2).stderr


def test_log_is_logs(txctl: Any) -> None:
    handle = first_line(txctl("run", "--wait", "utils.echo", "--msg", "said-once", check=0).stdout)
    assert txctl("log", handle, check=0).stdout == "said-once\n"
    assert txctl("log", f"{handle}/echo/0", check=0).stdout == "said-once\n"


def test_builtins_print_shows_a_builtin_s_source(txctl: Any) -> None:
    out = txctl("builtins", "--print", "utils.echo", check=0).stdout
    first, *_ = out.splitlines()
    assert first.startswith(("import ", "from "))  # its module's imports first, as TorchX's
    assert "\ndef echo(" in out and 'entrypoint="echo"' in out
    assert "\ndef touch(" not in out  # that function only
    body = json.loads(txctl("builtins", "--print", "utils.echo", "--json", check=0).stdout)
    assert body == {"name": "utils.echo", "source": out.rstrip("\n")}
    proc = txctl("builtins", "--print", "utils.ech", check=2)
    assert proc.stderr.startswith(
        "txctl: error: unknown builtin 'utils.ech'; did you mean utils.echo?"
    )
    assert proc.stdout == ""


# -- configure -------------------------------------------------------------------------------------

SCHEDULERS = (
    "local_cwd", "local_docker", "slurm", "lsf", "kubernetes", "kubernetes_mcad", "aws_batch",
    "aws_sagemaker",
)  # fmt: skip
FILLED = {"queue": "q", "role": "arn:aws:iam::123456789012:role/x"}  # as a user fills them in


def _written(value: str, opt: dict[str, Any]) -> Any:
    """An option's value as the file states it, in runopts --json's terms (None: unset)."""
    if value == "None":
        return None
    kind = opt["type"]
    if kind == "BOOL":
        return {"true": True, "false": False}[value]
    if kind == "INT":
        return int(value)
    if kind == "LIST":
        return [x for x in value.split(";") if x]
    if kind == "DICT":
        return dict(x.split(":", 1) for x in value.split(";") if x)
    return value


def _default(opt: dict[str, Any]) -> Any:
    default = opt.get("default")
    if not default:
        return None
    (kind, value), *_ = default.items()
    if kind in ("list", "dict"):
        return value.get("items", [] if kind == "list" else {})
    return int(value) if kind == "int" else value


def test_configure_writes_the_required_options_and_never_over_a_file(
    txctl: Any, workdir: Path
) -> None:
    written = workdir / ".txdconfig"
    printed = txctl("configure", "--print", check=0).stdout
    assert not written.exists()
    assert txctl("configure", check=0).stdout == f"wrote {written}\n"
    assert written.read_text() == printed
    ini = configparser.ConfigParser(interpolation=None)
    ini.read_string(printed)
    assert set(ini.sections()) == set(SCHEDULERS)
    runopts = json.loads(txctl("runopts", "--json", check=0).stdout)
    for scheduler in SCHEDULERS:  # exactly the required options, as torchx configure
        required = {o["name"]: o for o in runopts[scheduler] if o["required"]}
        assert set(ini[scheduler]) == set(required)
        for name in required:
            assert ini[scheduler][name].startswith("#FIXME:(str) "), (scheduler, name)
    # A placeholder left in is refused, naming where it is.
    proc = txctl("run", "-s", "aws_batch", "--dryrun", "utils.echo", check=2)
    assert proc.stderr.startswith(f"txctl: error: {written}:")
    assert "[aws_batch] queue = #FIXME" in proc.stderr
    assert proc.stderr.endswith(": fill in the option's value\n")
    # Never written over: it may hold the user's values.
    written.write_text("[local_cwd]\nprepend_cwd = true\n")
    proc = txctl("configure", "--all", check=2)
    assert f"{written} exists and is left as it is" in proc.stderr
    assert written.read_text() == "[local_cwd]\nprepend_cwd = true\n"


# What a scheduler's dry run needs beyond the file: an option the file leaves unset, and for
# slurm and lsf no checks against a cluster (whether this machine has one differs by tier).
DRYRUN = {
    "aws_sagemaker": ["-c", "instance_type=ml.m5.xlarge", "utils.python", "--script", "t.py"],
    "slurm": ["-c", "precheck=false", "utils.echo"],
    "lsf": ["-c", "precheck=false", "utils.echo"],
}


def test_configure_all_writes_every_option_at_its_default(txctl: Any, workdir: Path) -> None:
    (workdir / "t.py").write_text("print(1)\n")  # aws_sagemaker's framework mode runs a script
    txctl("configure", "--all", check=0)
    text = (workdir / ".txdconfig").read_text()
    for key, value in FILLED.items():
        text = re.sub(rf"^{key} = #FIXME.*$", f"{key} = {value}", text, flags=re.M)
    (workdir / ".txdconfig").write_text(text)
    ini = configparser.ConfigParser(interpolation=None)
    ini.read_string(text)
    runopts = json.loads(txctl("runopts", "--json", check=0).stdout)
    for scheduler in SCHEDULERS:
        opts = {o["name"]: o for o in runopts[scheduler]}
        assert list(ini[scheduler]) == list(opts)
        for name, opt in opts.items():
            if not opt["required"]:
                assert _written(ini[scheduler][name], opt) == _default(opt), (scheduler, name)
        # The daemon takes every value written: the dry run succeeds.
        txctl("run", "-s", scheduler, "--dryrun", *DRYRUN.get(scheduler, ["utils.echo"]), check=0)
    proc = txctl("configure", "--print", "-s", "nosuch", check=2)
    assert "unknown scheduler 'nosuch'" in proc.stderr
