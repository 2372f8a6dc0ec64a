"""The events stream: every job's status changes, in commit order, each with a durable cursor.

The job store writes an event in the same transaction as every status and deletion
(daemon.jobstore) and hands the committed ones here (`EventHub.committed`), where they go in
one shared buffer of the latest `buffer` events and one Pulse wakes every subscriber: a commit
costs the same however many subscribers there are, each of which reads the buffer at its own
position, on its own time.

A stream from a cursor subscribes first, then replays what the store holds after the cursor,
then reads the buffer skipping what the replay gave (by number): no gap, no duplicate. Where
a replay meets events a Delete or Prune removed (their jobs' rows kept without a status), it
sends one GAP per run of them saying how many, so its reader is told what it lost. A
subscriber whose position fell out of the buffer while it replayed or read catches up from the
store. One that stops reading (its write to the client does not finish) while the buffer
wraps past it is ended with RESOURCE_EXHAUSTED naming its last delivered cursor: it resumes
from the store, and holds nothing of the daemon's meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from txd.daemon.jobstore import DELETED_EVENT, REMOVED_EVENT, JobStore, StoredEvent
from txd.schedulers.errors import InvalidArgument, OutOfRange, ResourceExhausted, ShuttingDown
from txd.schedulers.pulse import Pulse
from txd.v1 import runner_pb2 as pb
from txd.v1.app_pb2 import AppStatus

log = logging.getLogger(__name__)

Kind = pb.EventsResponse.Kind
REPLAY_PAGE = 1000  # events read from the store per query while replaying
MAX_HANDLES = 1000
MAX_BATCH = 256  # events per response at most, whatever the client asks
# EventsResponse.more's tag: a batch is its first event's bytes and then, per further event,
# this tag, a length and the event's bytes (each serialized once for every subscriber).
_MORE_TAG = bytes([pb.EventsResponse.MORE_FIELD_NUMBER << 3 | 2])
# A store upgraded from before deletions kept their events' places: see jobstore._to_v6.
_UPGRADE = ", or than a deletion made before txd counted what deletions remove"
MIN_BOOKMARK = 0.1
SWEEP_PERIOD = 1.0  # seconds between looks for stuck subscribers and retention


CLOSE_WAIT = 10.0  # seconds a finished stream waits for the client to half-close


async def _closed(acks: Acks, limit: float) -> None:
    """Returns once the client half-closed, or after `limit` seconds."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(limit):
            while not acks.closed:
                await acks.pulse.wait_past(acks.pulse.gen)


class EventSettingsError(ValueError):
    """The daemon's [events] section is wrong; the message names the key."""


@dataclass(frozen=True)
class EventSettings:
    """The daemon's `[events]` settings (config file, or `--set events.KEY=VALUE`)."""

    retention: float = 7 * 86400.0  # seconds an event is kept (a job's events go with it)
    buffer: int = 10_000  # live events held in memory for subscribers
    bookmark: float = 5.0  # default seconds between bookmarks
    window: int = 1000  # responses sent beyond the client's last acknowledgement

    @classmethod
    def parse(cls, section: Mapping[str, Any]) -> EventSettings:
        kinds: dict[str, Callable[[Any], Any]] = {
            "retention": float,
            "buffer": int,
            "bookmark": float,
            "window": int,
        }
        values: dict[str, Any] = {}
        for key, raw in section.items():
            if key not in kinds:
                raise EventSettingsError(
                    f"settings [events]: unknown key {key!r} (known: {', '.join(kinds)})"
                )
            try:
                value = kinds[key](raw)
            except (TypeError, ValueError):
                raise EventSettingsError(
                    f"settings [events] {key}: expected a number, got {raw!r}"
                ) from None
            if not value > 0:
                raise EventSettingsError(f"settings [events] {key}: must be > 0, got {raw!r}")
            values[key] = value
        return cls(**values)


def make_cursor(store_id: str, seq: int) -> str:
    return f"v1.{store_id}.{seq}"


def parse_cursor(store_id: str, text: str) -> int:
    """The event number of a cursor of this store; InvalidArgument for another store's."""
    parts = text.split(".")
    if len(parts) != 3 or parts[0] != "v1" or not parts[2].isdigit() or not parts[1]:
        raise InvalidArgument("since_cursor", f"not an events cursor: {text[:100]!r}")
    if parts[1] != store_id:
        raise InvalidArgument(
            "since_cursor",
            f"the cursor is of another job store (state dir), {parts[1]!r}, not this "
            f"daemon's {store_id!r}: start again with a snapshot or a time",
        )
    return int(parts[2])


class _Entry:
    """A committed event as every subscriber is sent it: serialized once, on first use."""

    __slots__ = ("_wire", "event")

    def __init__(self, event: StoredEvent) -> None:
        self.event = event
        self._wire: bytes | None = None

    def wire(self, store_id: str) -> bytes:
        if self._wire is None:
            self._wire = response(store_id, self.event).SerializeToString()
        return self._wire


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def packed(wires: list[bytes]) -> bytes:
    """One response carrying these serialized events: the first, the rest in its `more`."""
    parts = [wires[0]]
    for w in wires[1:]:
        parts += (_MORE_TAG, _varint(len(w)), w)
    return b"".join(parts)


def response(
    store_id: str, e: StoredEvent, kind: Any = None, cursor: int = -1
) -> pb.EventsResponse:
    resp = pb.EventsResponse(
        kind=kind or (Kind.DELETED if e.kind == DELETED_EVENT else Kind.CHANGED),
        cursor=make_cursor(store_id, e.seq if cursor < 0 else cursor),
        status=AppStatus.FromString(e.status),
    )
    if e.at:
        resp.time.FromNanoseconds(int(e.at * 1e9))
    return resp


@dataclass(frozen=True)
class Filter:
    scheduler: str = ""
    states: frozenset[int] = frozenset()
    handles: frozenset[str] = frozenset()

    @property
    def narrows(self) -> bool:
        return bool(self.scheduler or self.states or self.handles)

    def match(self, e: StoredEvent) -> bool:
        return (
            (not self.scheduler or e.scheduler == self.scheduler)
            and (not self.states or e.state in self.states)
            and (not self.handles or e.handle in self.handles)
        )


class Acks:
    """What a client acknowledged on its stream (a count of responses taken), read by a task
    of its own: a wait for the next count is then cut short without cutting a gRPC read."""

    def __init__(self) -> None:
        self.count = 0
        self.closed = False  # the client sends no more
        self.pulse = Pulse()

    def take(self, count: int) -> None:
        self.count = max(self.count, count)
        self.pulse.fire()

    def close(self) -> None:
        self.closed = True
        self.pulse.fire()


@dataclass(eq=False)
class _Subscriber:
    pos: int  # the next buffer position it reads
    delivered: int  # the number of the last event the client acknowledged
    acks: Acks = field(default_factory=lambda: Acks())
    waiting: bool = False  # for the client's acknowledgement
    write_mark: int = 0  # the buffer's end when that wait began
    sent: int = 0  # events written (a batched response: each of its events)
    acked: int = 0  # events the client said it took
    # (sent after it, the number of its last event) of each response written since
    unacked: deque[tuple[int, int]] = field(default_factory=deque)
    cut_off: bool = field(default=False)
    # A subscriber whose filter narrows is woken by a commit only if an event matches it
    # (`pending` says one did since it last looked), else by its bookmark's time.
    flt: Filter = field(default_factory=Filter)
    wake: Pulse = field(default_factory=Pulse)
    pending: bool = False

    def cut(self) -> None:
        self.cut_off = True
        self.acks.pulse.fire()


class EventHub:
    def __init__(self, store: JobStore, settings: EventSettings) -> None:
        self.store = store
        self.settings = settings
        self.store_id = store.store_id
        self._ring: deque[_Entry] = deque()
        self._base = 0  # the buffer position of _ring[0]
        self.pulse = Pulse()
        self._subs: set[_Subscriber] = set()
        self.committed_count = 0  # since the daemon started (txd_events_committed_total)
        self._narrow: set[_Subscriber] = set()  # those of _subs whose filter narrows
        self._closing = ""
        self._last_prune = 0.0
        store.on_events = self.committed
        # EventsResponse.window, appended to every response (protobuf merges the fields).
        self._window_field = pb.EventsResponse(window=settings.window).SerializeToString()

    @property
    def _end(self) -> int:
        return self._base + len(self._ring)

    def cursor(self, seq: int) -> str:
        return make_cursor(self.store_id, seq)

    def committed(self, events: list[StoredEvent]) -> None:
        """The job store committed these events (in this order)."""
        self.committed_count += len(events)
        self._ring.extend(_Entry(e) for e in events)
        over = len(self._ring) - self.settings.buffer
        for _ in range(max(over, 0)):
            self._ring.popleft()
        self._base += max(over, 0)
        self.pulse.fire()
        # Matching here costs far less than waking each subscriber's task to match.
        for sub in self._narrow:
            if not sub.pending and any(sub.flt.match(e) for e in events):
                sub.pending = True
                sub.wake.fire()

    def close(self, reason: str) -> None:
        """The daemon stops: live streams end with ShuttingDown(reason)."""
        self._closing = reason
        self.pulse.fire()
        for sub in self._narrow:
            sub.wake.fire()

    @property
    def subscribers(self) -> int:
        return len(self._subs)

    async def upkeep(self) -> None:
        """Forever: ends subscribers stuck writing while the buffer wrapped past them, and
        drops events older than the retention."""
        while True:
            await asyncio.sleep(SWEEP_PERIOD)
            self.sweep()

    def sweep(self) -> None:
        for sub in list(self._subs):
            # A wait for the client (its acknowledgement, or a write) that did not end while
            # a whole buffer of events committed: the client stopped reading.
            if sub.waiting and self._end - sub.write_mark >= self.settings.buffer:
                log.info("ending an events stream that stopped reading")
                sub.cut()
        now = time.time()
        every = min(60.0, max(self.settings.retention / 10, SWEEP_PERIOD))
        if now - self._last_prune >= every:
            self._last_prune = now
            try:
                dropped = self.store.drop_events_before(now - self.settings.retention)
            except Exception as e:  # a full disk, a fenced store: next time
                log.warning("cannot drop old events: %s", e)
                return
            if dropped:
                log.info("dropped %d events older than the retention", dropped)

    def _start(self, req: pb.EventsRequest) -> int | None:
        """The number after which the stream replays (None: live or snapshot only)."""
        given = [bool(req.since_cursor), req.HasField("since_time"), req.snapshot]
        if sum(given) > 1:
            raise InvalidArgument(
                "since_cursor", "give at most one of since_cursor, since_time and snapshot"
            )
        floor, floor_at = self.store.events_floor()
        if req.since_cursor:
            seq = parse_cursor(self.store_id, req.since_cursor)
            if seq > self.store.last_seq():
                raise InvalidArgument(
                    "since_cursor",
                    "the cursor is ahead of this job store's events (was the file replaced "
                    "by an older copy?): start again with a snapshot",
                )
            if seq < floor:
                raise OutOfRange(
                    f"since_cursor: the events after this cursor are no longer held (older "
                    f"than the retention{_UPGRADE}); start again from a snapshot or list; "
                    f"oldest cursor held: {self.cursor(floor)}"
                )
            return seq
        if req.HasField("since_time"):
            at = req.since_time.ToNanoseconds() / 1e9
            if floor and at <= floor_at:
                raise OutOfRange(
                    f"since_time: events from then are no longer held (older than the "
                    f"retention{_UPGRADE}); oldest cursor held: {self.cursor(floor)}"
                )
            return self.store.first_seq_at(at)
        return None

    @staticmethod
    def _filter(req: pb.EventsRequest, handles: Collection[str]) -> Filter:
        if len(req.app_handles) > MAX_HANDLES:
            raise InvalidArgument("app_handles", f"at most {MAX_HANDLES} handles")
        known = AppStatus.State.values()
        for i, state in enumerate(req.states):
            if state not in known:
                raise InvalidArgument(f"states[{i}]", f"{state} is not an AppStatus state")
        return Filter(req.scheduler, frozenset(req.states), frozenset(handles))

    async def serve(
        self,
        req: pb.EventsRequest,
        handles: Collection[str],
        write: Callable[[bytes], Awaitable[None]],
        acks: Acks,
    ) -> None:
        """Streams what `req` asks for through `write` (which takes a serialized response),
        at most a window of responses beyond what the client acknowledged (`acks`)."""
        flt = self._filter(req, handles)
        interval = self.settings.bookmark
        if req.HasField("bookmark_interval"):
            asked = req.bookmark_interval.ToNanoseconds() / 1e9
            interval = max(asked, MIN_BOOKMARK) if asked > 0 else interval
        start = self._start(req)
        sub = _Subscriber(pos=self._end, delivered=start or 0, acks=acks, flt=flt)
        self._subs.add(sub)
        if flt.narrows:
            self._narrow.add(sub)

        batch = max(1, min(req.batch, MAX_BATCH, self.settings.window))

        async def send(data: bytes, seq: int, events: int = 1) -> None:
            while True:
                gen = acks.pulse.gen
                sub.acked = min(acks.count, sub.sent)
                while sub.unacked and sub.unacked[0][0] <= sub.acked:
                    sub.delivered = max(sub.delivered, sub.unacked.popleft()[1])
                if sub.sent - sub.acked < self.settings.window:
                    break
                if sub.cut_off:
                    raise ResourceExhausted(
                        "the stream was not read while the daemon's buffer of live events "
                        "filled; resume from the last cursor received; last cursor "
                        f"delivered: {self.cursor(sub.delivered)}"
                    )
                if acks.closed:
                    raise InvalidArgument(
                        "received",
                        "the client closed its side of the stream: it must keep "
                        "acknowledging what it reads",
                    )
                if not sub.waiting:  # the first wait for this response: from here
                    sub.waiting, sub.write_mark = True, self._end
                await acks.pulse.wait_past(gen)
            sub.waiting = False
            await write(data + self._window_field)
            sub.sent += events
            sub.unacked.append((sub.sent, seq))

        async def send_batched(events: Iterable[tuple[bytes, int]]) -> None:
            """Writes these (serialized event, its number) in responses of at most `batch`
            events each, serializing no further ahead than the response being written."""
            rest = iter(events)
            while part := list(itertools.islice(rest, batch)):
                await send(packed([wire for wire, _ in part]), part[-1][1], len(part))

        async def replay(after: int) -> int:
            while True:
                floor, _ = self.store.events_floor()
                if after < floor:
                    raise OutOfRange(
                        "since_cursor: the retention dropped events this stream had yet to "
                        f"send; oldest cursor held: {self.cursor(floor)}"
                    )
                page = self.store.events_after(
                    after,
                    REPLAY_PAGE,
                    scheduler=flt.scheduler,
                    states=flt.states,
                    handles=flt.handles,
                )
                if not page:
                    return max(after, self.store.last_seq())
                await send_batched(self._replayed(page))
                after = page[-1].seq

        try:
            if req.snapshot:
                last = self.store.last_seq()  # with the statuses: no await between
                rows = self.store.statuses(
                    scheduler=flt.scheduler, states=flt.states, handles=flt.handles
                )
                await send_batched(
                    (response(self.store_id, e, Kind.SNAPSHOT, last).SerializeToString(), 0)
                    for e in rows
                )
                sub.delivered = last
            elif start is not None:
                # Subscribed above, before reading the store: what commits from now on is in
                # the buffer too, and skipped there by number.
                last = await replay(start)
            else:
                last = self.store.last_seq()
            if req.snapshot or start is not None:
                synced = pb.EventsResponse(kind=Kind.SYNCED, cursor=self.cursor(last))
                await send(synced.SerializeToString(), last)
            if not req.follow:
                # The client half-closes on SYNCED: ending first would race its last
                # acknowledgements, whose write then fails its call (grpcio).
                await _closed(acks, CLOSE_WAIT)
                return
            await self._live(sub, last, flt, interval, batch, send, send_batched, replay)
        finally:
            self._subs.discard(sub)
            self._narrow.discard(sub)

    def _replayed(self, page: list[StoredEvent]) -> Iterator[tuple[bytes, int]]:
        """A page of the store as sent: each run of removed events as one GAP saying how many,
        at the last of them (resuming from it loses nothing more)."""
        for removed, run in itertools.groupby(page, key=lambda e: e.kind == REMOVED_EVENT):
            if not removed:
                yield from self._wired(_Entry(e) for e in run)
                continue
            gone = list(run)
            gap = pb.EventsResponse(
                kind=Kind.GAP, cursor=self.cursor(gone[-1].seq), removed=len(gone)
            )
            yield gap.SerializeToString(), gone[-1].seq

    def _wired(self, entries: Iterable[_Entry]) -> Iterator[tuple[bytes, int]]:
        """Each entry as (its serialized response, its event's number)."""
        return ((entry.wire(self.store_id), entry.event.seq) for entry in entries)

    async def _live(
        self,
        sub: _Subscriber,
        last: int,
        flt: Filter,
        interval: float,
        batch: int,
        send: Callable[[bytes, int], Awaitable[None]],
        send_batched: Callable[[Iterable[tuple[bytes, int]]], Awaitable[None]],
        replay: Callable[[int], Awaitable[int]],
    ) -> None:
        loop = asyncio.get_running_loop()
        quiet_since = loop.time()
        narrow = flt.narrows
        pulse = sub.wake if narrow else self.pulse
        while True:
            if self._closing:
                raise ShuttingDown(self._closing)
            gen = pulse.gen
            matched, sub.pending = sub.pending or not narrow, False
            while sub.pos < self._end:
                if sub.pos < self._base and not (matched or sub.pending):
                    sub.pos = self._base  # what the buffer dropped meanwhile matched nothing
                elif sub.pos < self._base:  # the buffer moved past it: catch up from the store
                    sub.pos = self._end
                    last = await replay(last)
                    quiet_since = loop.time()
                    continue
                # What is in the buffer now, up to a batch, without an await between.
                taken: list[_Entry] = []
                while sub.pos < self._end and len(taken) < batch:
                    entry = self._ring[sub.pos - self._base]
                    sub.pos += 1
                    e = entry.event
                    if e.seq <= last:
                        continue
                    last = e.seq
                    if flt.match(e):
                        taken.append(entry)
                if taken:
                    await send_batched(self._wired(taken))
                    quiet_since = loop.time()
            if pulse.gen != gen:
                continue
            wait = quiet_since + interval - loop.time()
            if wait <= 0:
                mark = pb.EventsResponse(kind=Kind.BOOKMARK, cursor=self.cursor(last))
                await send(mark.SerializeToString(), last)
                quiet_since = loop.time()
                continue
            try:
                async with asyncio.timeout(wait):
                    await pulse.wait_past(gen)
            except TimeoutError:
                pass
