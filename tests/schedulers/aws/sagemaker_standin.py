"""A stand-in for what moto's SageMaker lacks (importable as `sagemaker_standin`): an HTTP proxy
on 127.0.0.1 in front of moto that txd is pointed at as its SageMaker endpoint.

moto 5.2.5 creates, describes, lists and searches training jobs, but a job is Completed the
moment it is created, and StopTrainingJob is an HTTP 500 (not implemented). The proxy passes
every request to moto and changes only these, as AWS documents them (API Reference:
DescribeTrainingJob, StopTrainingJob, Search; the error shape of the JSON protocol):

- **a life**: a job created through it is InProgress (SecondaryStatus Training) until the test
  ends it: `finish(name, exit_code)` makes it Completed, or Failed with the FailureReason
  SageMaker gives an algorithm that exited non-zero. A job created with the environment
  variable STANDIN_EXIT=<code> (and no STANDIN_BLOCK=1) ends so by itself at its second
  describe, so a job runs for at least one poll, as on AWS.
- **StopTrainingJob**: an InProgress job becomes Stopping (for one describe), then Stopped
  (HTTP 200, empty JSON body, as AWS answers); a job that has ended gets AWS's 400
  ValidationException, an unknown one too.
- DescribeTrainingJob and Search answers carry the job's life (status, secondary status,
  transitions, failure reason) over moto's.

A test can play what a job does while it trains: `on_create`, when set, is awaited (on the
proxy's own event loop) with the job's name and its CreateTrainingJob request once moto made
the job, before the answer goes back (tests/schedulers/aws/test_aws_sagemaker_contract.py
writes the job's log events there).

It counts requests by operation (`calls`) and the most DescribeTrainingJob requests in flight
at once (`max_in_flight`); `describe_delay` holds each describe that long, so that concurrent
describes overlap and the concurrency limit is what bounds them.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

TARGET_PREFIX = "SageMaker."


@dataclass
class Life:
    status: str = "InProgress"
    secondary: str = "Training"
    failure: str = ""
    auto_exit: int | None = None  # ends by itself after its first describe
    describes: int = 0
    transitions: list[tuple[str, str]] = field(
        default_factory=lambda: [
            ("Starting", "Preparing the instances for training"),
            ("Training", "Training image download completed. Training in progress."),
        ]
    )

    def move(self, status: str, secondary: str, said: str, failure: str = "") -> None:
        self.status, self.secondary, self.failure = status, secondary, failure
        self.transitions.append((secondary, said))


class StandIn:
    def __init__(self, moto_url: str) -> None:
        self.moto_url = moto_url
        self.calls: Counter[str] = Counter()
        self.described: list[str] = []  # job names, in the order their describes arrived
        self.described_at: list[float] = []  # and when (time.monotonic())
        self.in_flight = 0
        self.max_in_flight = 0
        self.describe_delay = 0.0
        self.jobs: dict[str, Life] = {}
        self.on_create: Callable[[str, dict[str, Any]], Awaitable[None]] | None = None
        self._lock = threading.Condition()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- lifecycle (from the test's thread) ---------------------------------------------------

    def start(self) -> StandIn:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _start(self) -> None:
        self._session = aiohttp.ClientSession()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    # -- what the test does -------------------------------------------------------------------

    def finish(self, name: str, exit_code: int = 0) -> None:
        """Ends a held job as its program exiting with `exit_code` would."""
        with self._lock:
            _end(self.jobs[name], exit_code)

    def wait_described(self, count: int, timeout: float) -> None:
        """Blocks until `count` describes have arrived since reset_counts (a thread's call)."""
        with self._lock:
            if not self._lock.wait_for(lambda: len(self.described) >= count, timeout):
                raise TimeoutError(f"{len(self.described)} describes in {timeout} s, not {count}")

    def reset_counts(self) -> None:
        with self._lock:
            self.calls.clear()
            self.described.clear()
            self.described_at.clear()
            self.max_in_flight = 0

    # -- the proxy ----------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        target = request.headers.get("X-Amz-Target", "")
        op = target.removeprefix(TARGET_PREFIX) if target.startswith(TARGET_PREFIX) else ""
        with self._lock:
            self.calls[op or request.path] += 1
        params = json.loads(body or b"{}") if op else {}
        if op == "StopTrainingJob":
            return self._stop_job(str(params.get("TrainingJobName", "")))
        if op == "DescribeTrainingJob":
            with self._lock:
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
                self.described.append(str(params.get("TrainingJobName", "")))
                self.described_at.append(time.monotonic())
                self._lock.notify_all()
            try:
                if self.describe_delay:
                    await asyncio.sleep(self.describe_delay)
                return await self._forward(request, body, op)
            finally:
                with self._lock:
                    self.in_flight -= 1
        if op == "CreateTrainingJob":
            response = await self._forward(request, body, op)
            if response.status == 200:
                env = params.get("Environment") or {}
                life = Life()
                if "STANDIN_EXIT" in env and env.get("STANDIN_BLOCK") != "1":
                    life.auto_exit = int(env["STANDIN_EXIT"])
                with self._lock:
                    self.jobs[str(params["TrainingJobName"])] = life
                if self.on_create is not None:
                    await self.on_create(str(params["TrainingJobName"]), params)
            return response
        return await self._forward(request, body, op)

    async def _forward(self, request: web.Request, body: bytes, op: str) -> web.Response:
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() != "host"}
        async with self._session.request(
            request.method, self.moto_url + request.path_qs, data=body, headers=headers
        ) as upstream:
            data = await upstream.read()
            status = upstream.status
            content_type = upstream.headers.get("Content-Type", "application/x-amz-json-1.1")
        if status == 200 and op in ("DescribeTrainingJob", "Search"):
            data = json.dumps(self._overlay(op, json.loads(data))).encode()
        return web.Response(body=data, status=status, headers={"Content-Type": content_type})

    def _overlay(self, op: str, answer: dict[str, Any]) -> dict[str, Any]:
        jobs = [answer] if op == "DescribeTrainingJob" else [
            r["TrainingJob"] for r in answer.get("Results") or [] if "TrainingJob" in r
        ]  # fmt: skip
        with self._lock:
            for job in jobs:
                life = self.jobs.get(str(job.get("TrainingJobName")))
                if life is None:
                    continue
                if op == "DescribeTrainingJob":
                    life.describes += 1
                    if life.status == "Stopping" and life.describes > 1:
                        life.move("Stopped", "Stopped", "Training job stopped")
                    elif life.auto_exit is not None and life.describes > 1:
                        _end(life, life.auto_exit)
                        life.auto_exit = None
                _show(job, life)
        return answer

    def _stop_job(self, name: str) -> web.Response:
        with self._lock:
            life = self.jobs.get(name)
            if life is None:
                return _error(400, "ValidationException", "Requested resource not found.")
            if life.status != "InProgress":
                return _error(
                    400,
                    "ValidationException",
                    "The request was rejected because the training job is in status "
                    f"{life.status}.",
                )
            life.move("Stopping", "Stopping", "Stopping the training job")
            life.describes = 0
        return web.Response(body=b"{}", content_type="application/x-amz-json-1.1")


def _end(life: Life, exit_code: int) -> None:
    if exit_code == 0:
        life.move("Completed", "Completed", "Training job completed")
    else:
        life.move(
            "Failed",
            "Failed",
            "Training job failed",
            failure=f"AlgorithmError: , exit code: {exit_code}",
        )


def _show(job: dict[str, Any], life: Life) -> None:
    now = time.time()
    job["TrainingJobStatus"] = life.status
    job["SecondaryStatus"] = life.secondary
    job["SecondaryStatusTransitions"] = [
        {"Status": status, "StartTime": now, "StatusMessage": said}
        for status, said in life.transitions
    ]
    if life.failure:
        job["FailureReason"] = life.failure
    else:
        job.pop("FailureReason", None)


def _error(status: int, code: str, message: str) -> web.Response:
    body = json.dumps({"__type": code, "message": message}).encode()
    return web.Response(
        body=body,
        status=status,
        headers={"Content-Type": "application/x-amz-json-1.1", "x-amzn-ErrorType": code},
    )
