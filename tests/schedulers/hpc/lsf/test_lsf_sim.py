"""The LSF simulator of the contract harness (lsf_sim.py) against the recorded formats: a double
that drifted from them would let the contract suite pass for the wrong reasons."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import cast

import pytest
from lsf_fakes import FakeHost, recorded
from lsf_sim import ENTRYPOINT, LsfSim, script_args
from txd.schedulers.errors import BackendUnavailable
from txd.schedulers.hpc.logs import FOLLOW
from txd.schedulers.hpc.lsf_script import LsfOpts, build_request
from txd.schedulers.hpc.lsf_status import BJOBS
from txd.schedulers.testing import Output, Script
from txd.v1 import AppDef, Role


async def submit(
    host: FakeHost, script: Script, jobdir: str | None = None, queue: str | None = None
) -> list[str]:
    """Runs the submit script of a 2-replica app on the simulator; returns what bsub said."""
    role = Role(name="w", image="i", entrypoint=ENTRYPOINT, args=script_args(script))
    role.num_replicas = 2
    req = build_request(
        "app-x1",
        AppDef(name="app", roles=[role]),
        LsfOpts(jobdir=jobdir, lsf_queue=queue),
        "cpu-node-01",
    )
    said = await host.run(["/bin/bash", "-s"], input=req.script.encode())
    return said.text.splitlines()


async def bjobs(host: FakeHost) -> list[str]:
    return (await host.run(BJOBS)).text.splitlines()


@pytest.fixture
def host() -> FakeHost:
    return FakeHost()


@pytest.fixture
def sim(host: FakeHost) -> LsfSim:
    return LsfSim(host)


async def test_bsub_answers_as_recorded(sim: LsfSim, host: FakeHost) -> None:
    assert await submit(host, Script()) == [
        "Job <4101> is submitted to default queue <normal>.",  # bsub_default_queue.stdout
        "Job <4102> is submitted to default queue <normal>.",
    ]
    said = await submit(host, Script(), queue="gpu")  # jobs 4103 and 4104
    assert said[0].encode() + b"\n" == recorded("bsub_three.stdout").splitlines(True)[2]


async def test_jobs_wait_for_their_head_then_end_as_scripted(sim: LsfSim, host: FakeHost) -> None:
    script = Script(first=Output(b"1"), then=Output(b"2", b"e"), exit_code=3)
    await submit(host, script, jobdir="/j")
    assert await bjobs(host) == [
        "4101|app-x1|RUN|-|cpu-node-01|app-x1-w-0",
        "4102|app-x1|PEND|-|-|app-x1-w-1",  # started("app-x1-w-0") holds from the next cycle
    ]
    assert (host.files["/j/app-x1-w-0.out"], host.files["/j/app-x1-w-0.err"]) == (b"1", b"")
    assert "/j/app-x1-w-1.out" not in host.files
    assert await bjobs(host) == [
        "4101|app-x1|EXIT|3|cpu-node-01|app-x1-w-0",
        "4102|app-x1|RUN|-|cpu-node-02|app-x1-w-1",  # not on the head's host (-R select)
    ]
    assert (host.files["/j/app-x1-w-0.out"], host.files["/j/app-x1-w-0.err"]) == (b"12", b"e")


async def test_bkill_answers_as_recorded(sim: LsfSim, host: FakeHost) -> None:
    await submit(host, Script(block=True))
    await bjobs(host)
    killed = await host.run(["bkill", "4101", "4102"])
    assert (killed.stdout, killed.returncode) == (recorded("bkill_terminated.stdout"), 0)
    assert [row.split("|")[2] for row in await bjobs(host)] == ["RUN", "PEND"]  # signalled
    assert (await host.run(["bkill", "4101"])).stdout == b"Job <4101> is being terminated\n"
    assert await bjobs(host) == [
        "4101|app-x1|EXIT|130|cpu-node-01|app-x1-w-0",
        "4102|app-x1|EXIT|130|-|app-x1-w-1",
    ]
    again = await host.run(["bkill", "4101", "4999"])
    assert again.returncode == 255 and again.stdout == b""
    assert again.stderr.splitlines(True) == [
        recorded("bkill_finished.stderr"),
        b"Job <4999>: No matching job found\n",
    ]


async def test_bjobs_without_jobs_and_without_a_backend(sim: LsfSim, host: FakeHost) -> None:
    empty = await host.run(BJOBS)
    assert (empty.stdout, empty.stderr, empty.returncode) == (
        b"",
        recorded("bjobs_no_job.stderr"),
        0,
    )
    host.down = True
    with pytest.raises(BackendUnavailable, match="cannot reach"):
        await bjobs(host)


async def test_a_follow_gets_each_write_until_the_reader_stops(host: FakeHost) -> None:
    argv = ["sh", "-c", FOLLOW, "txd-follow", "1", "/j/x.out"]  # as hpc.logs follows
    follow = cast(AsyncGenerator[bytes, None], host.stream(argv))
    host.write("/j/x.out", b"one\n")
    assert await anext(follow) == b"one\n"
    later = asyncio.ensure_future(anext(follow))
    await asyncio.sleep(0)  # one turn of the loop: the follow is waiting now
    assert not later.done()  # nothing new: it waits for a write
    host.write("/j/x.out", b"two\n")
    assert await later == b"two\n"
    await follow.aclose()
