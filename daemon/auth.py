"""The TCP listener's door: every call, whatever its kind or service (Runner, health,
reflection, or a method that does not exist), carries `authorization: Bearer <token>` of a live
token, or ends UNAUTHENTICATED before any handler runs.

A token of scope `read` reaches only the methods in READ (observing jobs and the daemon); any
other ends PERMISSION_DENIED naming the token's scope.

Nothing about the peer counts: not its address (loopback included), not `x-forwarded-for` or
any other header. The refusal names what is wrong, never the token it was given; the log gets
the peer and the reason, at most one line per LOG_EVERY seconds (a scanner must not fill it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from txd.daemon.tokens import TokenStore

log = logging.getLogger(__name__)

LOG_EVERY = 10.0
# What a `read` token may call: an allow-list, so a method added later is refused until listed.
_READ_RUNNER = "Status Wait Watch Describe List Logs Events Schedulers RunOpts Where Metrics"
READ = frozenset(
    [f"/txd.v1.Runner/{m}" for m in _READ_RUNNER.split()]
    + [
        "/grpc.health.v1.Health/Check",
        "/grpc.health.v1.Health/Watch",
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    ]
)
_HINT = "txctl and txd.client send the one in TXD_TOKEN or TXD_TOKEN_FILE"


def bearer(metadata: Any) -> tuple[str | None, str]:
    """(the token, "") from a call's metadata, or (None, why there is none usable)."""
    values = [v for k, v in metadata or () if k == "authorization"]
    if not values:
        return None, f"no token: send the header `authorization: Bearer <token>` ({_HINT})"
    if len(values) > 1:
        return None, "more than one authorization header"
    value = values[0] if isinstance(values[0], str) else ""
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None, "the authorization header is not `Bearer <token>`"
    return token.strip(), ""


class BearerAuth(grpc.aio.ServerInterceptor):
    def __init__(self, store: TokenStore) -> None:
        self.store = store
        self._logged = 0.0
        self._quiet = 0  # refusals not logged since the last line

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        token, why = bearer(details.invocation_metadata)
        if token is not None:
            verdict = self.store.check(token)
            if verdict.name is not None:
                if verdict.scope == "all" or details.method in READ:
                    return await continuation(details)
                return self._refusal(
                    details.method,
                    f"token {verdict.name!r} has scope {verdict.scope!r}: it may observe jobs "
                    f"and the daemon, not call {details.method.rpartition('/')[2]}",
                    grpc.StatusCode.PERMISSION_DENIED,
                )
            why = f"the token is not valid: {verdict.reason}"
        return self._refusal(details.method, why)

    def _refusal(
        self, method: str, why: str, code: grpc.StatusCode = grpc.StatusCode.UNAUTHENTICATED
    ) -> grpc.RpcMethodHandler:
        """A handler that ends the call at once. A stream-stream handler fits every kind of
        call: on the wire they differ only in how many messages each side sends."""

        async def refuse(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> None:
            self._log(method, context.peer(), why)
            await context.abort(code, why)

        return grpc.stream_stream_rpc_method_handler(refuse)

    def _log(self, method: str, peer: str, why: str) -> None:
        now = time.monotonic()
        if now - self._logged < LOG_EVERY:
            self._quiet += 1
            return
        more = f" (and {self._quiet} more refused since the last such line)" if self._quiet else ""
        log.warning("refused %s from %s: %s%s", method, peer, why, more)
        self._logged, self._quiet = now, 0
