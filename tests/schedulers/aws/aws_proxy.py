"""A tiny HTTP proxy on 127.0.0.1 between txd and moto, for what moto cannot show (importable as
`aws_proxy`).

It forwards every request to moto and counts them by operation (Batch's REST path, e.g.
`describejobs`; the X-Amz-Target of JSON services, e.g. `Logs_20140328.GetLogEvents`), and can:

- `throttle(op, n)`: answer the next n requests of `op` with HTTP 429 and Batch's
  TooManyRequestsException body, as AWS does when a caller passes its rate limit (the AWS Batch
  API reference, "Common Errors": TooManyRequestsException, HTTP 429, restJson1 `__type`);
- `running_streams = True`: give a RUNNING job in describe_jobs answers the
  `container.logStreamName` real Batch shows while a job runs (moto sets it only after the
  container has exited), named as moto names the stream it writes at the end
  (`<job definition name>/default/<job id>`);
- `describes`: the job ids each describe_jobs asked for, in order (`arrived` notified);
- `down()` / `up()`: refuse connections (the port is closed), then listen again.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

from aiohttp import ClientSession, web

_HOP = {"host", "content-length", "transfer-encoding", "connection", "content-encoding"}


class AwsProxy:
    def __init__(self, target: str) -> None:
        self.target = target
        self.calls: Counter[str] = Counter()
        self.throttled: Counter[str] = Counter()
        self._throttle: Counter[str] = Counter()
        self._fail: Counter[str] = Counter()
        self.running_streams = False
        self.is_down = False
        # The job ids of every describe_jobs request, in arrival order; `arrived` is notified
        # after each.
        self.describes: list[list[str]] = []
        self.arrived = asyncio.Condition()
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._session: ClientSession | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def throttle(self, op: str, n: int) -> None:
        self._throttle[op] += n

    def fail(self, op: str, n: int) -> None:
        """Answer the next n requests of `op` with HTTP 500 (AWS's InternalServerError)."""
        self._fail[op] += n

    async def start(self) -> AwsProxy:
        self._session = ClientSession(auto_decompress=False)
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await self.up()
        return self

    async def up(self) -> None:
        assert self._runner is not None
        self.is_down = False
        self._site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await self._site.start()
        if not self.port:
            server = self._site._server
            assert server is not None
            self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def down(self) -> None:
        """Refuses new connections, and drops each request on a connection already open."""
        self.is_down = True
        if self._site is not None:
            await self._site.stop()
            self._site = None

    async def close(self) -> None:
        if self._site is not None:
            await self._site.stop()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    @staticmethod
    def operation(request: web.Request) -> str:
        target = request.headers.get("X-Amz-Target", "")
        return target or request.path.rstrip("/").rsplit("/", 1)[-1]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if self.is_down:
            assert request.transport is not None
            request.transport.abort()  # the client sees its connection reset
            return web.Response(status=503)
        op = self.operation(request)
        self.calls[op] += 1
        if self._throttle[op] > 0:
            self._throttle[op] -= 1
            self.throttled[op] += 1
            body = {"__type": "TooManyRequestsException", "message": "Too Many Requests."}
            return web.json_response(
                body, status=429, headers={"x-amzn-ErrorType": "TooManyRequestsException"}
            )
        if self._fail[op] > 0:
            self._fail[op] -= 1
            body = {"__type": "ServerException", "message": "Internal Server Error"}
            return web.json_response(
                body, status=500, headers={"x-amzn-ErrorType": "ServerException"}
            )
        assert self._session is not None
        data = await request.read()
        if op == "describejobs":
            self.describes.append(list(json.loads(data or b"{}").get("jobs") or []))
            async with self.arrived:
                self.arrived.notify_all()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        async with self._session.request(
            request.method, self.target + request.path_qs, data=data, headers=headers
        ) as resp:
            body_bytes = await resp.read()
            if op == "describejobs" and self.running_streams and resp.status == 200:
                body_bytes = _with_running_streams(body_bytes)
            out = {k: v for k, v in resp.headers.items() if k.lower() not in _HOP}
            return web.Response(status=resp.status, body=body_bytes, headers=out)


def _with_running_streams(body: bytes) -> bytes:
    answer: dict[str, Any] = json.loads(body)
    for job in answer.get("jobs") or []:
        container = job.get("container")
        running = job.get("status") == "RUNNING" and container is not None
        if running and not container.get("logStreamName"):
            jobdef = str(job.get("jobDefinition", "")).rsplit("/", 1)[-1].split(":")[0]
            container["logStreamName"] = f"{jobdef}/default/{job['jobId']}"
    return json.dumps(answer).encode()
