"""Run with a request id: a retried or duplicated Run never submits a second job."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from txd.client import AlreadyExistsError, InvalidArgumentError
from txd.v1 import AppDef, AppState, Role
from txd_testing import first_line, sh_app, unique


async def _count(client: Any, name: str) -> int:
    return sum(1 for a in await client.list() if a.name == name)


async def test_same_request_id_sequentially(client: Any) -> None:
    name, rid = unique("idem"), uuid.uuid4().hex
    first = await client.run(sh_app("echo once", name=name), request_id=rid)
    second = await client.run(sh_app("echo once", name=name), request_id=rid)
    assert first == second
    assert await _count(client, name) == 1
    assert (await client.wait(first, timeout=30)).state == AppState.SUCCEEDED
    # Still the same handle once the job is over, and the job ran once.
    assert await client.run(sh_app("echo once", name=name), request_id=rid) == first
    assert await _count(client, name) == 1
    assert b"".join([c.data async for c in client.logs(first)]) == b"once\n"


async def test_same_request_id_concurrently(client: Any) -> None:
    name, rid = unique("idemc"), uuid.uuid4().hex
    handles = await asyncio.gather(
        *(client.run(sh_app("echo once", name=name), request_id=rid) for _ in range(8))
    )
    assert len(set(handles)) == 1
    assert await _count(client, name) == 1
    assert (await client.wait(handles[0], timeout=30)).state == AppState.SUCCEEDED


async def test_different_request_ids_make_different_jobs(client: Any) -> None:
    name = unique("idemd")
    handles = await asyncio.gather(
        *(client.run(sh_app("true", name=name), request_id=uuid.uuid4().hex) for _ in range(3))
    )
    assert len(set(handles)) == 3
    assert await _count(client, name) == 3
    without_id = [await client.run(sh_app("true", name=name)) for _ in range(2)]
    assert len(set(without_id)) == 2
    assert await _count(client, name) == 5
    for h in [*handles, *without_id]:
        await client.wait(h, timeout=30)


async def test_same_request_id_other_app_is_already_exists(client: Any) -> None:
    rid = uuid.uuid4().hex
    name_a, name_b = unique("ida"), unique("idb")
    first = await client.run(sh_app("true", name=name_a), request_id=rid)
    with pytest.raises(AlreadyExistsError) as err:
        await client.run(
            AppDef(name=name_b, roles=[Role(name="x", entrypoint="true")]), request_id=rid
        )
    assert err.value.message == (
        f"request id {rid!r} belongs to job {first}, submitted with another app; "
        "use a new request id for a new job"
    )
    assert await _count(client, name_b) == 0
    await client.wait(first, timeout=30)


async def test_same_request_id_other_scheduler_is_already_exists(plugin_daemon: Any) -> None:
    rid = uuid.uuid4().hex
    async with plugin_daemon.client() as c:
        first = await c.run(sh_app("true", name="ids"), request_id=rid, cwd="/")
        with pytest.raises(AlreadyExistsError, match="submitted with another scheduler"):
            await c.run(sh_app("true", name="ids"), "fakepoll", request_id=rid, cwd="/")
        assert [a.app_handle for a in await c.list()] == [first]
        await c.wait(first, timeout=30)


async def test_same_request_id_while_first_is_submitting_checks_the_app(client: Any) -> None:
    rid = uuid.uuid4().hex
    name = unique("idw")
    same, other = sh_app("true", name=name), sh_app("false", name=name)
    results = await asyncio.gather(
        client.run(same, request_id=rid),
        client.run(other, request_id=rid),
        return_exceptions=True,
    )
    # Which of the two reaches the daemon first is up to the network: exactly one is
    # submitted, and the other is refused naming it.
    handles = [r for r in results if isinstance(r, str)]
    refused = [r for r in results if isinstance(r, AlreadyExistsError)]
    assert len(handles) == 1 and len(refused) == 1, results
    assert f"belongs to job {handles[0]}," in refused[0].message
    assert await _count(client, name) == 1
    await client.wait(handles[0], timeout=30)


async def test_rejected_run_does_not_burn_the_request_id(client: Any) -> None:
    name, rid = unique("idr"), uuid.uuid4().hex
    with pytest.raises(InvalidArgumentError):
        await client.run(AppDef(name=name, roles=[Role(name="x", entrypoint="")]), request_id=rid)
    assert await _count(client, name) == 0
    handle = await client.run(sh_app("true", name=name), request_id=rid)
    assert await _count(client, name) == 1
    assert (await client.wait(handle, timeout=30)).state == AppState.SUCCEEDED


async def test_concurrent_rejected_runs_with_one_id(client: Any) -> None:
    rid = uuid.uuid4().hex
    results = await asyncio.gather(
        *(client.run(AppDef(name="bad", roles=[]), request_id=rid) for _ in range(4)),
        return_exceptions=True,
    )
    assert all(isinstance(r, InvalidArgumentError) for r in results), results


def test_cli_request_id(txctl: Any, workdir: Path) -> None:
    rid = uuid.uuid4().hex
    a = first_line(txctl("run", "--request-id", rid, "utils.echo", "--msg", "x", check=0).stdout)
    b = first_line(txctl("run", "--request-id", rid, "utils.echo", "--msg", "x", check=0).stdout)
    assert a == b
    handles = [ln.split()[0] for ln in txctl("list", check=0).stdout.splitlines()[1:]]
    assert handles.count(a) == 1
    txctl("wait", a, check=0)


# Everything that defines the submission must match, not only the app: a request id reused
# with other scheduler options, working directory, environment or workspace is refused naming
# the field (issue 18, item 10), and the digests it is checked against outlive a restart.

_FIELD_CASES = {
    "cfg": ({"cfg": {"prepend_cwd": False}}, {"cfg": {"prepend_cwd": True}}),
    "cwd": ({"cwd": "/"}, {"cwd": "/tmp"}),
    "env": ({"env": {"A": "1", "PATH": os.defpath}}, {"env": {"A": "2", "PATH": os.defpath}}),
    # local_cwd ignores workspaces, but a retry must still be the same submission.
    "workspace": ({"workspace": "/"}, {"workspace": "/tmp"}),
}
_FIELD_NAMES = {
    "cfg": "scheduler options (cfg)",
    "cwd": "working directory (cwd)",
    "env": "environment (env)",
    "workspace": "workspace",
}


@pytest.mark.parametrize("field", sorted(_FIELD_CASES))
async def test_same_request_id_other_field_is_already_exists(client: Any, field: str) -> None:
    rid, name = uuid.uuid4().hex, unique(f"idf{field}")
    first_kw, other_kw = _FIELD_CASES[field]
    base = {"cwd": "/", "env": {"A": "1", "PATH": os.defpath}}
    first = await client.run(sh_app("true", name=name), request_id=rid, **{**base, **first_kw})
    with pytest.raises(AlreadyExistsError) as err:
        await client.run(sh_app("true", name=name), request_id=rid, **{**base, **other_kw})
    assert err.value.message == (
        f"request id {rid!r} belongs to job {first}, submitted with another "
        f"{_FIELD_NAMES[field]}; use a new request id for a new job"
    )
    # The same everything still answers with the first job, and nothing else was submitted.
    again = await client.run(sh_app("true", name=name), request_id=rid, **{**base, **first_kw})
    assert again == first
    assert await _count(client, name) == 1
    await client.wait(first, timeout=30)


async def test_same_request_id_names_every_field_that_differs(client: Any) -> None:
    rid, name = uuid.uuid4().hex, unique("idall")
    first = await client.run(
        sh_app("true", name=name), request_id=rid, cwd="/", env={"A": "1", "PATH": os.defpath}
    )
    with pytest.raises(AlreadyExistsError) as err:
        await client.run(
            sh_app("false", name=name),
            request_id=rid,
            cwd="/tmp",
            env={"A": "2", "PATH": os.defpath},
        )
    assert "submitted with another app, working directory (cwd) and environment (env);" in (
        err.value.message
    )
    await client.wait(first, timeout=30)


async def test_the_submission_is_matched_after_a_restart(daemon: Any) -> None:
    rid = uuid.uuid4().hex
    async with daemon.client() as c:
        first = await c.run(
            sh_app("true", name="idr"), request_id=rid, cwd="/", env={"A": "1", "PATH": os.defpath}
        )
        await c.wait(first, timeout=30)
    daemon.stop()
    daemon.restart()
    async with daemon.client() as c:
        assert await c.run(
            sh_app("true", name="idr"), request_id=rid, cwd="/", env={"A": "1", "PATH": os.defpath}
        ) == (first)
        with pytest.raises(AlreadyExistsError, match=r"another environment \(env\);"):
            await c.run(
                sh_app("true", name="idr"),
                request_id=rid,
                cwd="/",
                env={"A": "2", "PATH": os.defpath},
            )


def test_cli_request_id_with_other_options_is_refused(txctl: Any, workdir: Path) -> None:
    rid = uuid.uuid4().hex
    a = first_line(txctl("run", "--request-id", rid, "utils.echo", "--msg", "x", check=0).stdout)
    refused = txctl(
        "run", "--request-id", rid, "-c", "prepend_cwd=true", "utils.echo", "--msg", "x"
    )
    assert refused.returncode != 0
    assert f"belongs to job {a}, submitted with another scheduler options (cfg)" in (refused.stderr)
    other_dir = workdir / "elsewhere"
    other_dir.mkdir()
    refused = txctl("run", "--request-id", rid, "utils.echo", "--msg", "x", cwd=other_dir)
    assert "another working directory (cwd)" in refused.stderr, refused.stderr
    txctl("wait", a, check=0)
