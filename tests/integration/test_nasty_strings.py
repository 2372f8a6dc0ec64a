"""Untrusted strings through a real daemon (tests/nasty.py's table): the name rule refuses what
it does not allow, NUL is refused at the edge wherever a string may go, and on local_cwd a
job's argv, environment and working directory arrive exactly as given."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from nasty import NAME_OK, NASTY, NASTY_DIR, NASTY_DIR_NEWLINE, PWNED, nasty_args, nasty_env
from txd.client import InvalidArgumentError
from txd.v1 import AppDef, AppState, BindMount, Mount, Role
from txd_testing import read_logs

# Prints what the process was given, as ASCII JSON (so the bytes of the log cannot mislead).
REPORT = (
    "import json, os, sys\n"
    "print(json.dumps({'argv': sys.argv[1:], 'cwd': os.getcwd(),"
    " 'env': {k: v for k, v in os.environ.items() if k.startswith('NASTY_')}}))\n"
)


def _app(name: str = "nasty", role: str = "r", **role_kw: Any) -> AppDef:
    kw: dict[str, Any] = {"entrypoint": sys.executable, "args": ["-c", "pass"], **role_kw}
    return AppDef(name=name, roles=[Role(name=role, **kw)])


@pytest.mark.parametrize("label", sorted(NASTY))
async def test_names_outside_the_rule_are_refused(client: Any, label: str) -> None:
    value = NASTY[label]
    for app, field in (
        (_app(name=value), "app.name"),
        (_app(role=value), "app.roles[0].name"),
    ):
        with pytest.raises(InvalidArgumentError) as err:
            await client.dryrun(app)
        assert err.value.field == field
        assert str(err.value).count("\n") == 0
        if value:
            assert repr(value) in str(err.value)
            assert "letters, digits, '_', '.' or '-'" in str(err.value)
        else:
            assert "must not be empty" in str(err.value)


async def test_names_inside_the_rule_are_taken(client: Any) -> None:
    for name in NAME_OK:
        resp = await client.dryrun(_app(name=name, role=name))
        assert resp.app.name == name and resp.app.roles[0].name == name


NUL = "a\0b"


@pytest.mark.parametrize(
    ("app", "field"),
    [
        (_app(args=["ok", NUL]), "app.roles[0].args[1]"),
        (_app(env={"K": NUL}), "app.roles[0].env[K]"),
        (_app(env={NUL: "v"}), "app.roles[0].env"),
        (_app(entrypoint=NUL), "app.roles[0].entrypoint"),
        (_app(image=NUL), "app.roles[0].image"),
        (_app(name=NUL), "app.name"),
        (_app(role=NUL), "app.roles[0].name"),
        (
            _app(mounts=[Mount(bind=BindMount(src_path="/tmp", dst_path=f"/x{NUL}"))]),
            "app.roles[0].mounts[0].bind.dst_path",
        ),
        (
            _app(mounts=[Mount(bind=BindMount(src_path=f"/t{NUL}", dst_path="/x"))]),
            "app.roles[0].mounts[0].bind.src_path",
        ),
    ],
)
async def test_nul_is_refused_at_the_edge(client: Any, app: AppDef, field: str) -> None:
    """On slurm, which checks none of these itself (local_cwd would refuse an entrypoint it
    cannot find): the edge must."""
    with pytest.raises(InvalidArgumentError) as err:
        await client.dryrun(app, "slurm")
    assert err.value.field == field
    assert str(err.value).count("\n") == 0
    if field.endswith(("entrypoint", "image", "]", "path")):
        assert "contains a NUL character" in str(err.value)


async def test_nul_in_the_working_directory_is_refused(client: Any) -> None:
    with pytest.raises(InvalidArgumentError) as err:
        await client.dryrun(_app(), cwd=f"/tmp/{NUL}")
    assert err.value.field == "cwd"


@pytest.mark.parametrize("dirname", [NASTY_DIR, NASTY_DIR_NEWLINE])
async def test_local_cwd_job_gets_every_value_exactly(
    client: Any, workdir: Path, dirname: str
) -> None:
    cwd = workdir / dirname
    cwd.mkdir()
    app = _app(args=["-c", REPORT, *nasty_args()], env=nasty_env())
    handle = await client.run(app, "local_cwd", cwd=str(cwd))
    status = await client.wait(handle, timeout=60)
    assert status.state == AppState.SUCCEEDED, status
    got = json.loads(await read_logs(client, handle, streams="stdout"))
    assert got["argv"] == nasty_args()
    assert got["env"] == nasty_env()
    assert got["cwd"] == str(cwd)
    assert not os.path.exists(PWNED)
