"""client._resume.Resumer's decisions, over a client whose reconnect the test holds: a call
whose channel another call's reconnect closed (CANCELLED, "Locally cancelled by
application!") goes on once that reconnect is done, while an answer stands."""

from __future__ import annotations

import asyncio

import pytest
from txd.client import NotFoundError, UnavailableError
from txd.client._errors import TxdError
from txd.client._resume import ResumePolicy, Resumer


class HeldClient:
    """Counts the channels closed; its probe answers once the test opens `answer`."""

    def __init__(self) -> None:
        self.closed = 0
        self.closed_one = asyncio.Event()
        self.answer = asyncio.Event()

    async def close(self) -> None:
        self.closed += 1
        self.closed_one.set()

    def _use_own_connection(self) -> None:
        pass

    async def probe(self, timeout: float) -> None:
        await self.answer.wait()


def cancelled_locally() -> TxdError:
    error = TxdError("Locally cancelled by application!")
    error.code = "CANCELLED"
    return error


async def test_a_call_cut_by_another_calls_reconnect_goes_on_after_it() -> None:
    client = HeldClient()
    resumer = Resumer(client, ResumePolicy(total=30), say=lambda _: None)
    lost = asyncio.create_task(resumer.recover(UnavailableError("gone"), "logs", 0))
    await asyncio.wait_for(client.closed_one.wait(), 10)  # the old channel is closed
    cut = asyncio.create_task(resumer.recover(cancelled_locally(), "watch", 0))
    await asyncio.sleep(0)
    assert not cut.done()  # it waits for the reconnect, not raising CANCELLED
    client.answer.set()
    await asyncio.wait_for(asyncio.gather(lost, cut), 10)
    assert resumer.generation == 1 and client.closed == 1  # one reconnect for both
    # Begun before that reconnect, cut after it: goes on at once, no second reconnect.
    await asyncio.wait_for(resumer.recover(cancelled_locally(), "wait", 0), 10)
    assert resumer.generation == 1 and client.closed == 1


async def test_an_answer_or_a_cancel_with_no_reconnect_stands() -> None:
    resumer = Resumer(HeldClient(), ResumePolicy(total=30), say=lambda _: None)
    with pytest.raises(NotFoundError):
        await resumer.recover(NotFoundError("no such job"), "wait", 0)
    with pytest.raises(TxdError, match="Locally cancelled"):
        await resumer.recover(cancelled_locally(), "wait", 0)
