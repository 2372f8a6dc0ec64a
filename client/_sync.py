"""Client: the AsyncClient's methods, blocking, for scripts and notebooks without a loop.

Each method is made from AsyncClient's (`_blocking`, `_iterating`): the signatures are written
once, there. mypy sees the same parameters (a ParamSpec carries them) with the result unwrapped,
and help() and inspect.signature() show them with AsyncClient's docstrings.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar

from txd.client._async import DEFAULT_TIMEOUT, AsyncClient
from txd.client._resume import ResumePolicy

T = TypeVar("T")
P = ParamSpec("P")
F = TypeVar("F", bound=Callable[..., Any])


def _blocking(
    method: Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[Client, P], T]:
    """AsyncClient's `method`, run to its end on the Client's loop."""

    @functools.wraps(method)
    def call(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._run(method(self._async, *args, **kwargs))

    return _as_clients(call)


def _iterating(
    method: Callable[Concatenate[AsyncClient, P], AsyncIterator[T]],
) -> Callable[Concatenate[Client, P], Iterator[T]]:
    """AsyncClient's async iterator `method`, as a plain iterator (each item fetched on the
    Client's loop; the stream closed when the iterator is, or runs out)."""

    @functools.wraps(method)
    def call(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
        return self._iterate(method(self._async, *args, **kwargs))

    sig = inspect.signature(method)
    returns = str(sig.return_annotation).replace("AsyncIterator[", "Iterator[", 1)
    call.__signature__ = sig.replace(return_annotation=returns)  # type: ignore[attr-defined]
    call.__annotations__ = {**call.__annotations__, "return": returns}
    return _as_clients(call)


def _as_clients(call: F) -> F:
    call.__qualname__ = f"Client.{call.__name__}"
    call.__module__ = __name__
    return call


class Client:
    """Blocking twin of AsyncClient (same methods and arguments; see there), run on a private
    event loop. logs(), list_iter() and watch() return plain iterators. Not for use inside a
    running event loop: use AsyncClient there."""

    def __init__(
        self,
        socket: str | Path | None = None,
        *,
        host: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        token: str | None = None,
        ca: str | Path | None = None,
        client_cert: tuple[str | Path, str | Path] | None = None,
        reconnect: ResumePolicy | float | None = None,
        autostart: bool = False,
    ) -> None:
        self._async = AsyncClient(
            socket,
            host=host,
            timeout=timeout,
            token=token,
            ca=ca,
            client_cert=client_cert,
            reconnect=reconnect,
            autostart=autostart,
        )
        self._runner = asyncio.Runner()

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

    # -- jobs (AsyncClient's, blocking) ----------------------------------------------------

    connect = _blocking(AsyncClient.connect)
    run = _blocking(AsyncClient.run)
    dryrun = _blocking(AsyncClient.dryrun)
    status = _blocking(AsyncClient.status)
    wait = _blocking(AsyncClient.wait)
    watch = _iterating(AsyncClient.watch)
    events = _iterating(AsyncClient.events)
    describe = _blocking(AsyncClient.describe)
    list = _blocking(AsyncClient.list)
    list_iter = _iterating(AsyncClient.list_iter)
    list_page = _blocking(AsyncClient.list_page)
    cancel = _blocking(AsyncClient.cancel)
    delete = _blocking(AsyncClient.delete)
    prune = _blocking(AsyncClient.prune)
    logs = _iterating(AsyncClient.logs)

    # -- schedulers ------------------------------------------------------------------------

    schedulers = _blocking(AsyncClient.schedulers)
    runopts = _blocking(AsyncClient.runopts)

    # -- the daemon ------------------------------------------------------------------------

    where = _blocking(AsyncClient.where)
    metrics = _blocking(AsyncClient.metrics)
    probe = _blocking(AsyncClient.probe)
