"""lsf's checks before queueing (hpc.lsf_precheck; issue 18, item 13): the queue through
`bqueues` in recorded LSF output (no LSF runs here), the jobdir probe in a real shell on real
directories, and how a dry run and a refused Run report them."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lsf_fakes import FakeHost
from txd.schedulers.api import SubmitContext
from txd.schedulers.errors import InvalidArgument
from txd.schedulers.hpc.hosts import LocalHost
from txd.schedulers.hpc.lsf import LsfScheduler
from txd.schedulers.hpc.lsf_precheck import jobdir_argv, jobdir_check
from txd.schedulers.hpc.lsf_script import BHOSTS
from txd.schedulers.options import to_cfg_value
from txd.v1 import AppDef, Resource, Role

CTX = SubmitContext(cwd="/home/alice", env={})


def app(gpu: int = 0) -> AppDef:
    role = Role(name="trainer", image="img:1", entrypoint="run", resource=Resource(gpu=gpu))
    return AppDef(name="a", roles=[role])


def cfg(**opts: Any) -> dict[str, Any]:
    return {k: to_cfg_value(v) for k, v in opts.items()}


@pytest.mark.parametrize(
    ("queue", "outcome"),
    [
        ("nosuch", "FAIL  cfg.lsf_queue: LSF has no queue nosuch: nosuch: No such queue"),
        ("retired", "FAIL  cfg.lsf_queue: queue retired is Closed:Active: LSF takes no job"),
        ("night", "ok    cfg.lsf_queue: queue night is Open:Inact: its jobs wait until it is"),
        ("gpu", "ok    cfg.lsf_queue: queue gpu is Open:Active"),
    ],
)
async def test_dryrun_shows_the_checks(
    sched: LsfScheduler, local: FakeHost, queue: str, outcome: str
) -> None:
    info = await sched.submit_dryrun(app(), cfg(lsf_queue=queue, jobdir="/shared/j"), CTX)
    text = info.text
    assert text.startswith(info.request.script)
    assert f"# precheck on {local.label} (-c precheck=False turns it off):\n" in text
    assert f"\n#   {outcome}" in text, text
    assert "\n#   ok    cfg.jobdir: /shared/j is writable\n" in text
    assert "\n#   ok    app.roles[0].resource: rank 0 would run on cpu-node-01" in text
    assert "\n#   skip  role trainer: entrypoint: runs inside image img:1 on the execution" in text
    assert local.argvs("bqueues") == [("bqueues", "-w", queue)]
    assert local.argvs("bhosts") == [BHOSTS]
    assert local.argvs("/bin/bash") == []  # nothing submitted


async def test_a_dryrun_works_where_no_lsf_answers(sched: LsfScheduler, local: FakeHost) -> None:
    local.down = True
    info = await sched.submit_dryrun(app(), cfg(lsf_queue="gpu"), CTX)
    assert f"#   skip  precheck: not run: cannot reach {local.label}: " in info.text


@pytest.mark.parametrize(
    ("opts", "field", "says"),
    [
        ({"lsf_queue": "nosuch"}, "cfg.lsf_queue", "LSF has no queue nosuch"),
        ({"lsf_queue": "retired"}, "cfg.lsf_queue", "queue retired is Closed:Active"),
    ],
)
async def test_a_failed_check_refuses_the_run_before_any_bsub(
    sched: LsfScheduler, local: FakeHost, opts: dict[str, str], field: str, says: str
) -> None:
    info = await sched.submit_dryrun(app(), cfg(**opts), CTX)
    with pytest.raises(InvalidArgument) as e:
        await sched.schedule(info)
    assert e.value.field == field and says in e.value.reason, e.value
    assert "nothing was queued" in e.value.reason
    assert local.argvs("/bin/bash") == []


async def test_precheck_false_asks_nothing_more(sched: LsfScheduler, local: FakeHost) -> None:
    info = await sched.submit_dryrun(app(), cfg(lsf_queue="nosuch", precheck=False), CTX)
    await sched.schedule(info)
    assert local.argvs("bqueues") == [] and local.argvs("sh") == []
    assert len(local.argvs("/bin/bash")) == 1  # bsub decides, as before


@pytest.fixture
def immutable(tmp_path: Path) -> Iterator[Path]:
    """A directory not even root can create a file in."""
    path = tmp_path / "immutable"
    path.mkdir()
    subprocess.run(["chattr", "+i", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


async def test_the_jobdir_probe_in_a_real_shell(tmp_path: Path, immutable: Path) -> None:
    host = LocalHost()

    async def probe(path: Path, create: bool) -> tuple[str, str]:
        check = jobdir_check(await host.run(jobdir_argv(str(path), create)))
        return check.outcome, check.detail

    assert await probe(tmp_path, False) == ("ok", f"{tmp_path} is writable")
    new = tmp_path / "a" / "b"
    assert await probe(new, False) == (
        "ok",
        f"{new} does not exist yet; {tmp_path}, where it would be created, is writable",
    )
    assert not new.exists()  # a dry run creates nothing
    assert await probe(new, True) == ("ok", f"{new} created, writable")
    assert new.is_dir() and list(new.iterdir()) == []  # the probe's file is gone
    (tmp_path / "file").write_text("x")
    assert await probe(tmp_path / "file", False) == (
        "FAIL",
        f"{tmp_path}/file exists and is not a directory",
    )
    outcome, detail = await probe(immutable, False)
    assert outcome == "FAIL" and detail.startswith(f"cannot create a file in {immutable}: ")
    outcome, detail = await probe(immutable / "sub", True)
    assert outcome == "FAIL" and detail.startswith(f"cannot create {immutable}/sub: ")
