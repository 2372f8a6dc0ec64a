"""Client: the AsyncClient's methods, blocking, for scripts and notebooks without a loop."""

from __future__ import annotations

import asyncio
import builtins
import datetime as dt
from collections.abc import AsyncIterator, Coroutine, Iterable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from txd.cfgvalue import CfgVal
from txd.client._async import DEFAULT_TIMEOUT, AsyncClient
from txd.v1 import AppState
from txd.v1 import runner_pb2 as pb
from txd.v1.app_pb2 import AppDef, AppStatus
from txd.v1.scheduler_pb2 import RunOpt

T = TypeVar("T")


class Client:
    """Blocking twin of AsyncClient (same methods and arguments; see there), run on a private
    event loop. logs() and watch() return plain iterators. Not for use inside a running event
    loop: use AsyncClient there."""

    def __init__(
        self, socket: str | Path | None = None, *, timeout: float | None = DEFAULT_TIMEOUT
    ) -> None:
        self._runner = asyncio.Runner()
        self._async = AsyncClient(socket, timeout=timeout)

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._run(self._async.close())
        self._runner.close()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._runner.run(coro)

    def _iterate(self, agen: AsyncIterator[T]) -> Iterator[T]:
        try:
            while True:
                try:
                    yield self._run(agen.__anext__())  # type: ignore[arg-type]
                except StopAsyncIteration:
                    return
        finally:
            self._run(agen.aclose())  # type: ignore[attr-defined]

    def run(
        self,
        app: AppDef,
        scheduler: str = "",
        cfg: Mapping[str, CfgVal] | None = None,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        request_id: str = "",
        workspace: str | None = None,
    ) -> str:
        return self._run(
            self._async.run(
                app, scheduler, cfg, cwd=cwd, env=env, request_id=request_id, workspace=workspace
            )
        )

    def dryrun(
        self,
        app: AppDef,
        scheduler: str = "",
        cfg: Mapping[str, CfgVal] | None = None,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        workspace: str | None = None,
    ) -> pb.DryRunResponse:
        return self._run(
            self._async.dryrun(app, scheduler, cfg, cwd=cwd, env=env, workspace=workspace)
        )

    def status(self, handle: str) -> AppStatus:
        return self._run(self._async.status(handle))

    def wait(self, handle: str, timeout: float | None = None) -> AppStatus:
        return self._run(self._async.wait(handle, timeout))

    def watch(self, handle: str) -> Iterator[AppStatus]:
        return self._iterate(self._async.watch(handle))

    def describe(self, handle: str) -> pb.DescribeResponse:
        return self._run(self._async.describe(handle))

    def list(
        self,
        scheduler: str = "",
        backend: bool = False,
        *,
        states: Iterable[AppState] = (),
        created_since: dt.datetime | None = None,
        limit: int | None = None,
        page_size: int = 0,
    ) -> builtins.list[AppStatus]:
        return self._run(
            self._async.list(
                scheduler,
                backend,
                states=states,
                created_since=created_since,
                limit=limit,
                page_size=page_size,
            )
        )

    def list_iter(
        self,
        scheduler: str = "",
        backend: bool = False,
        *,
        states: Iterable[AppState] = (),
        created_since: dt.datetime | None = None,
        limit: int | None = None,
        page_size: int = 0,
    ) -> Iterator[AppStatus]:
        return self._iterate(
            self._async.list_iter(
                scheduler,
                backend,
                states=states,
                created_since=created_since,
                limit=limit,
                page_size=page_size,
            )
        )

    def list_page(
        self,
        scheduler: str = "",
        backend: bool = False,
        *,
        states: Iterable[AppState] = (),
        created_since: dt.datetime | None = None,
        page_size: int = 0,
        page_token: str = "",
    ) -> pb.ListResponse:
        return self._run(
            self._async.list_page(
                scheduler,
                backend,
                states=states,
                created_since=created_since,
                page_size=page_size,
                page_token=page_token,
            )
        )

    def cancel(self, handle: str) -> AppStatus:
        return self._run(self._async.cancel(handle))

    def delete(self, handle: str) -> None:
        self._run(self._async.delete(handle))

    def prune(
        self, created_before: dt.datetime, scheduler: str = "", *, dry_run: bool = False
    ) -> pb.PruneResponse:
        return self._run(self._async.prune(created_before, scheduler, dry_run=dry_run))

    def logs(
        self,
        handle: str,
        role: str = "",
        replica: int | None = None,
        *,
        regex: str = "",
        since: dt.datetime | None = None,
        until: dt.datetime | None = None,
        follow: bool = False,
        streams: str = "combined",
        tail: int | None = None,
    ) -> Iterator[pb.LogsResponse]:
        return self._iterate(
            self._async.logs(
                handle,
                role,
                replica,
                regex=regex,
                since=since,
                until=until,
                follow=follow,
                streams=streams,
                tail=tail,
            )
        )

    def schedulers(self) -> pb.SchedulersResponse:
        return self._run(self._async.schedulers())

    def runopts(self, scheduler: str = "") -> builtins.list[RunOpt]:
        return self._run(self._async.runopts(scheduler))
