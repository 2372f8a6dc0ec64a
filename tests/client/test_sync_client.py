"""txd.client.Client is made from AsyncClient's methods: the same names and parameters, every
RPC method present, the async iterators as plain ones, the docstrings kept for help()."""

from __future__ import annotations

import inspect

from txd.client import AsyncClient, Client

# AsyncClient's own plumbing, not RPC methods; Client has its own close().
_NOT_FORWARDED = {"close", "stub"}


def _rpc_methods() -> list[str]:
    return sorted(
        name
        for name, member in vars(AsyncClient).items()
        if not name.startswith("_") and name not in _NOT_FORWARDED and callable(member)
    )


def test_every_async_method_has_a_blocking_twin_with_its_parameters() -> None:
    names = _rpc_methods()
    assert {"run", "wait", "watch", "logs", "list_iter", "runopts"} <= set(names)
    for name in names:
        blocking, awaited = getattr(Client, name), getattr(AsyncClient, name)
        got, want = inspect.signature(blocking), inspect.signature(awaited)
        assert got.parameters == want.parameters, name
        assert blocking.__doc__ == awaited.__doc__, name
        assert blocking.__qualname__ == f"Client.{name}"
        if inspect.isasyncgenfunction(awaited):
            assert got.return_annotation == want.return_annotation.replace("Async", "", 1)
        else:
            assert inspect.iscoroutinefunction(awaited), name
            assert got.return_annotation == want.return_annotation, name
            assert not inspect.iscoroutinefunction(blocking), name


def test_help_shows_the_signature_and_the_docstring() -> None:
    text = inspect.getdoc(Client.run)
    assert text is not None and text.startswith("Submits app")
    assert "request_id: 'str' = ''" in str(inspect.signature(Client.run))
