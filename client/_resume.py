"""Riding out a lost connection to the daemon: one reconnect policy for every resumable call.

A daemon restart (kill -9 and start), a dropped ssh tunnel or a takeover by another login node
ends a Watch, a Wait or a log follow with UNAVAILABLE. The calls that can carry on (the
client's watch, wait and logs) hand that error to Resumer.recover, which says once on stderr
that the connection was lost, then reconnects with backoff (doubling from `first` up to `cap`
seconds between tries) until the daemon answers again, and says so; after `total` seconds it
gives up with an error naming what was lost and why the last try failed. The caller then asks
again from where it was (a watch gets the current status first; a log follow its offsets).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from txd.client._errors import BackendUnavailableError, TxdError, UnavailableError

RECONNECT_ENV = "TXD_RECONNECT_TIMEOUT"
DEFAULT_TOTAL = 60.0
FIRST_DELAY = 0.05
MAX_DELAY = 1.0
PROBE_TIMEOUT = 5.0  # the Where call that tells the daemon answers again


@dataclass(frozen=True)
class ResumePolicy:
    """`total`: seconds to keep trying after the connection is lost (0: never reconnect);
    `first` and `cap`: the first and the longest pause between tries."""

    total: float = DEFAULT_TOTAL
    first: float = FIRST_DELAY
    cap: float = MAX_DELAY

    def __post_init__(self) -> None:
        for name in ("total", "first", "cap"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"reconnect {name} must be a number of seconds >= 0, not {value}")

    @classmethod
    def from_env(cls, total: float | None = None) -> ResumePolicy:
        """`total` when given, else $TXD_RECONNECT_TIMEOUT, else DEFAULT_TOTAL."""
        if total is None:
            text = os.environ.get(RECONNECT_ENV, "").strip()
            try:
                total = float(text) if text else DEFAULT_TOTAL
            except ValueError:
                raise ValueError(
                    f"{RECONNECT_ENV}={text!r} is not a number of seconds (0: never reconnect)"
                ) from None
        return cls(total=total)


def is_lost(error: BaseException) -> bool:
    """Whether `error` says the connection to the daemon was lost (or the daemon is going
    away), as opposed to an answer: a backend the daemon could not reach is an answer."""
    return isinstance(error, UnavailableError) and not isinstance(error, BackendUnavailableError)


def say_on_stderr(prefix: str) -> Callable[[str], None]:
    def say(text: str) -> None:
        with contextlib.suppress(OSError, ValueError):  # a closed stderr must not end the call
            print(f"{prefix}: {text}", file=sys.stderr, flush=True)

    return say


class Resumer:
    """Reconnects `client` (an AsyncClient) after a lost connection, as `policy` allows.

    `rejoin`, when set, finds the daemon again before each try (txctl's: the local daemon,
    started when autostart allows, the ssh tunnel, or the host that took over the state dir);
    it raises TxdError (or OSError) when it cannot yet. `say` gets the lines for the user."""

    def __init__(
        self,
        client: Any,
        policy: ResumePolicy,
        say: Callable[[str], None],
        rejoin: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.client = client
        self.policy = policy
        self.say = say
        self.rejoin = rejoin
        # Bumped at each reconnect: calls started before it lost their connection with the
        # old channel, and just ask again. The lock keeps two calls (a watch and a log follow
        # of one client) from reconnecting at once, closing each other's new channel.
        self.generation = 0
        self._lock = asyncio.Lock()

    async def recover(self, error: TxdError, what: str, generation: int) -> None:
        """Returns once the daemon answers again; re-raises `error` when it is no lost
        connection or reconnecting is off; raises UnavailableError after `policy.total`
        seconds of failed tries. `what`: the call that was interrupted, for the messages;
        `generation`: self.generation when that call began."""
        if self.policy.total <= 0:
            raise error
        # Another call's reconnect closes the channel under this one, which then ends
        # CANCELLED ("Locally cancelled by application!"), not UNAVAILABLE: a call begun
        # before a reconnect, or failing while one runs, waits for it and goes on.
        cut = generation != self.generation or self._lock.locked()
        if not (is_lost(error) or cut):
            raise error
        async with self._lock:
            if generation != self.generation:  # another call reconnected meanwhile
                return
            if not is_lost(error):  # that reconnect failed: this call's error stands
                raise error
            await self._reconnect(error, what)

    async def _reconnect(self, error: TxdError, what: str) -> None:
        self.say(f"connection to the daemon lost ({error.message}) during {what}; reconnecting")
        deadline = time.monotonic() + self.policy.total
        delay = self.policy.first
        last = error.message
        while True:  # bounded: by the deadline
            await self.client.close()  # a fresh channel: gRPC's own backoff would wait longer
            self.client._use_own_connection()
            try:
                if self.rejoin is not None:
                    await self.rejoin()
                left = max(deadline - time.monotonic(), 0.1)
                await self.client.probe(min(PROBE_TIMEOUT, left))
            except (TxdError, OSError) as e:
                last = getattr(e, "message", None) or str(e)
            else:
                self.generation += 1
                self.say(f"reconnected; {what} goes on")
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise UnavailableError(
                    f"the connection to the daemon was lost during {what} ({error.message}) "
                    f"and no reconnect succeeded within {self.policy.total:g} s "
                    f"(--reconnect-timeout, {RECONNECT_ENV}); last try: {last}"
                )
            await asyncio.sleep(min(delay, left))
            delay = min(delay * 2, self.policy.cap)
