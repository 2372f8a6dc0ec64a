"""Builtins through the CLI: `txctl run --dryrun -s local_cwd <builtin> ARGS` against a real
daemon gives the app, and the local_cwd request, that TorchX 0.7's own parser and component
give for the same ARGS sent through the same daemon (issue 20, gap 4)."""

from __future__ import annotations

import ast
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from txd.client._format import to_dict
from txd.client.torchx_compat import from_torchx
from txd_testing import first_line

pytest.importorskip("torchx.components")
from torchx.specs.builders import materialize_appdef
from torchx.specs.finder import ModuleComponentsFinder, get_component

CASES: list[tuple[str, list[str]]] = [
    (
        "dist.ddp",
        [
            "-j",
            "2x2",
            "--script",
            "main.py",
            "--env",
            "A=x,y;B=$HOME",
            "--",
            "--lr",
            "0.1 x",
            "it's",
            "$$",
            "${app_id}",
        ],
    ),
    ("dist.spmd", ["-j", "2", "-h", "gpu.medium", "-m", "pkg.train", "--name", "exp/r1"]),
    ("utils.sh", ["--num_replicas", "2", "--env", "E=''", "echo", "a b", "$HOME", '"q"']),
    ("utils.python", ["--c", "import sys; print(sys.argv)", "--", "x y"]),
    (
        "serve.torchserve",
        ["--model_path", "m.mar", "--management_api", "http://h:8081", "--dryrun", "True"],
    ),
    ("metrics.tensorboard", ["--logdir", "/logs", "--timeout", "5"]),
    ("utils.booth", ["--x1", "1", "--x2", "2.5"]),
]
# The app id local_cwd draws at random for each dry run (`<name>-<12 characters>`).
_APP_ID = re.compile(r"\b([a-z0-9_-]+)-[b-z0-9]{12}\b")


def _no_app_id(text: str) -> str:
    return _APP_ID.sub(r"\1-APPID", text)


@pytest.fixture(autouse=True)
def _no_loglevel(monkeypatch: pytest.MonkeyPatch) -> None:
    # ddp and sh copy the caller's LOGLEVEL: none here, none in txctl's environment.
    monkeypatch.delenv("LOGLEVEL", raising=False)


def test_txctl_builtins_lists_torchx_builtins(txctl: Any) -> None:
    listed = json.loads(txctl("builtins", "--json", check=0).stdout)["builtins"]
    found = ModuleComponentsFinder("torchx.components", "").find()
    assert listed == sorted(c.name for c in found if not c.validation_errors)


@pytest.mark.parametrize(("name", "argv"), CASES, ids=[c[0] for c in CASES])
async def test_txctl_dryrun_of_a_builtin_is_torchx_app(
    txctl: Any, client: Any, workdir: Path, name: str, argv: list[str]
) -> None:
    proc = txctl("run", "--dryrun", "--json", "-s", "local_cwd", name, *argv, check=0)
    ours = json.loads(proc.stdout)

    torchx_app = materialize_appdef(get_component(name).fn, list(argv))
    resp = await client.dryrun(from_torchx(torchx_app), "local_cwd", cwd=str(workdir))
    theirs = to_dict(resp)

    for role in ours["app"]["roles"]:  # txd's app remembers the name of a named resource
        if role.get("resource", {}).get("named"):
            assert "-h" in argv
            role["resource"]["named"] = ""
    assert ours["app"] == theirs["app"]
    assert ours["scheduler"] == theirs["scheduler"] == "local_cwd"
    # local_cwd's request is a printed dict, its env in the app's map order (which protobuf
    # does not keep): compared as the dicts they print.
    request = ast.literal_eval(_no_app_id(ours["request"]))
    assert request == ast.literal_eval(_no_app_id(theirs["request"]))
    assert len(request["replicas"]) == sum(r["num_replicas"] for r in ours["app"]["roles"])


def test_ddp_line_after_macro_substitution_is_what_bash_needs(txctl: Any) -> None:
    """The macros are substituted before bash reads the line: the quoted rendezvous id is the
    app id, and `$${${rank0_env}:=localhost}` is one bash expansion of TorchX's rank 0 variable."""
    proc = txctl("run", "--dryrun", "--json", "-s", "local_cwd", "dist.ddp", "-j", "2x1",
                 "--script", "t.py", check=0)  # fmt: skip
    body = json.loads(proc.stdout)
    request = ast.literal_eval(body["request"])
    app_id = request["app_id"]
    lines = [r["args"] for r in request["replicas"]]
    assert [line[:2] for line in lines] == [["bash", "-c"]] * 2
    for line in lines:
        assert (
            f"--rdzv_endpoint ${{TORCHX_RANK0_HOST:=localhost}}:29500 --rdzv_id '{app_id}' "
            in line[2]
        ), line
        assert "--node_rank" not in line[2]


def test_ddp_runs_on_two_local_nodes_with_the_expanded_line(
    shared_daemon: Any, workdir: Path, tmp_path: Path
) -> None:
    """A real local_cwd run of `dist.ddp -j 2x1`, a stand-in torchrun on PATH printing what
    bash gave it: each node gets the rank 0 host, the app id and the script's odd arguments
    exactly."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "torchrun"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do printf "[%s]" "$a"; done; echo\n')
    fake.chmod(0o755)
    env = shared_daemon.txctl_env(PATH=f"{bindir}:{os.environ['PATH']}")
    proc = shared_daemon.txctl("run", "--wait", "dist.ddp", "-j", "2x1", "--script", "t.py",
                               "--", "a b", "$HOME", "it's",
                               cwd=workdir, env=env, check=0)  # fmt: skip
    handle = first_line(proc.stdout)
    app_id = handle.rpartition("/")[2]
    logs = shared_daemon.txctl("logs", handle, cwd=workdir, env=env, check=0).stdout
    want = (
        f"[--rdzv_backend][c10d][--rdzv_endpoint][localhost:29500][--rdzv_id][{app_id}]"
        "[--nnodes][2][--nproc_per_node][1][--tee][3][--role][][t.py][a b][$HOME][it's]"
    )
    assert logs.count(want) == 2, logs
