"""Client: the AsyncClient's methods, blocking, for scripts and notebooks without a loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from txd.client._async import DEFAULT_TIMEOUT, AsyncClient

T = TypeVar("T")


class Client:
    """Blocking twin of AsyncClient; runs it on a private event loop.

    Same methods and arguments; logs() and watch() return plain iterators. Not for use inside
    a running event loop (use AsyncClient there).
    """

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
        self._runner.run(self._async.close())
        self._runner.close()

    def _iterate(self, agen: AsyncIterator[T]) -> Iterator[T]:
        try:
            while True:
                try:
                    yield self._runner.run(agen.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            self._runner.run(agen.aclose())  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._async, name)
        if name in ("logs", "watch"):
            return lambda *a, **kw: self._iterate(method(*a, **kw))
        return lambda *a, **kw: self._runner.run(method(*a, **kw))
