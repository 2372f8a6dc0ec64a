"""TorchX's CLI spellings that txctl takes, for a user coming from `torchx`: `log` for `logs`,
`status --roles`, `builtins --print`. Through a real daemon and the real txctl."""

from __future__ import annotations

import json
from typing import Any

from txd.v1 import AppDef, AppState, Role
from txd_testing import first_line


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
