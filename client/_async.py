"""AsyncClient: every Runner RPC as an awaitable (or an async iterator for the streams)."""

from __future__ import annotations

import asyncio
import builtins
import datetime as dt
import os
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf.timestamp_pb2 import Timestamp
from txd import defaults
from txd.cfgvalue import CfgVal, to_cfg_value
from txd.client import _tcp
from txd.client._errors import TxdError, UnavailableError, from_rpc_error
from txd.client._readdoor import DoorClosed, ReadDoor
from txd.client._resume import ResumePolicy, Resumer, say_on_stderr
from txd.v1 import AppState, Stream
from txd.v1 import runner_pb2 as pb
from txd.v1.app_pb2 import AppDef, AppStatus
from txd.v1.runner_pb2_grpc import RunnerStub
from txd.v1.scheduler_pb2 import RunOpt

if TYPE_CHECKING:
    from txd.client._serving import Served

DEFAULT_TIMEOUT = 30.0
_INT32_MAX = 2**31 - 1  # page_size is an int32
# The daemon's message limits (txd.defaults): a request over its limit fails here, before
# it is sent, with the same RESOURCE_EXHAUSTED; a response up to the daemon's is accepted.
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", defaults.MAX_REQUEST_BYTES),
    ("grpc.max_receive_message_length", defaults.MAX_RESPONSE_BYTES),
]
# The watch door carries small messages. gRPC's BDP probe (a PING each time it samples the
# bandwidth, to grow flow-control windows that these never fill) only wakes both ends: off, a
# storm's callers spend less CPU (docs/performance.md).
DOOR_OPTIONS = [("grpc.http2.bdp_probe", 0)]
EVENTS_ACK_EVERY = 100  # most events taken between acknowledgements
EVENTS_BATCH = 64  # events per response at most (one write of the daemon's for many changes)
# How gRPC's client says no server took the connection (its own words, not a daemon's).
_CONNECT_FAILED = "failed to connect to all addresses"
_STREAMS = {"combined": Stream.COMBINED, "stdout": Stream.STDOUT, "stderr": Stream.STDERR}


def _timestamp(when: dt.datetime | None) -> Timestamp | None:
    if when is None:
        return None
    ts = Timestamp()
    ts.FromDatetime(when if when.tzinfo else when.astimezone())
    return ts


def _default_host() -> str | None:
    """With no socket or host given: $TXD_HOST, else the endpoint `txctl host use` chose, as
    txctl takes them; None (the local daemon) when neither names one."""
    from txd.client._endpoint import HOST_ENV, LOCAL, hosts_file, load_hosts

    chosen = os.environ.get(HOST_ENV) or (load_hosts()["current"] if hosts_file().exists() else "")
    return None if chosen in ("", LOCAL) else chosen


class AsyncClient:
    """A connection to txd. Use as `async with AsyncClient() as c: ...`.

    `socket` defaults to $TXD_SOCKET or the per-user default. `timeout` bounds every unary call
    except wait(); streams and wait() run until they end unless given a timeout of their own.
    gRPC channels to the same socket share one connection (its global subchannel pool);
    `own_connection` gives this client a connection of its own, as a separate process has.

    `socket` may be `tcp://HOST:PORT`, a daemon's TCP listener (`txd --listen`): TLS with the
    `token` (else TXD_TOKEN, or the file named by TXD_TOKEN_FILE), the server's CA from `ca`
    (else TXD_CA, else the system's roots), and a `client_cert` (certificate, key) pair when the
    listener asks for one (else TXD_CLIENT_CERT and TXD_CLIENT_KEY). Raises ValueError when
    that cannot be set up (no token, an unreadable file).

    watch(), wait() and logs() survive a lost connection (a daemon restart, a dropped ssh
    tunnel): they reconnect with backoff for up to `reconnect` seconds (a float or a
    ResumePolicy; default $TXD_RECONNECT_TIMEOUT, else 60; 0: never), saying so on stderr,
    and carry on where they were (txd.client._resume).

    `autostart`: where no daemon answers on the local socket (not through `host` or TCP), start
    one on it and the state dir ($TXD_STATE_DIR or the default) before the first call and
    before each reconnect, as txctl does, saying so on stderr; TXD_NO_AUTOSTART=1 turns it
    off. The Runner (txd.client.runner) sets it.
    """

    def __init__(
        self,
        socket: str | Path | None = None,
        *,
        host: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        own_connection: bool = False,
        token: str | None = None,
        ca: str | Path | None = None,
        client_cert: tuple[str | Path, str | Path] | None = None,
        reconnect: ResumePolicy | float | None = None,
        autostart: bool = False,
    ) -> None:
        if host is None and isinstance(socket, str) and socket.startswith(("ssh://", "tcp://")):
            host, socket = socket, None
        if host is None and socket is None:
            host = _default_host()
        self._tcp: grpc.ChannelCredentials | None = None
        self._endpoint: Any = None
        if host is not None and _tcp.is_tcp(host):
            self.target = host
            _tcp.address(self.target)  # a bad address fails here, not on the first call
            cert, key = client_cert or (None, None)
            self._tcp = _tcp.credentials(token=token, ca=ca, client_cert=cert, client_key=key)
            self.socket_path = Path()  # there is none: `target` says where the daemon is
        else:
            if host is not None:  # a remote daemon, through an ssh tunnel (txd.client._tunnel)
                from txd.client._endpoint import resolve

                self._endpoint = resolve(host)
            self.socket_path = defaults.socket_path(str(socket) if socket else None)
            self.target = str(self.socket_path)
        self._ssh = self._endpoint  # kept: a reconnect starts the tunnel again
        # The local daemon's socket by default: where none is, another login node's daemon
        # serving the shared state dir is reached over ssh, as txctl does (connect()).
        self._may_route = host is None
        self._served: Served | None = None  # the record of the host it was routed to
        self._said_route = False
        self._may_start = autostart  # checked once, at the first call
        # True when the daemon runs on another host: run() then sends no cwd or environment
        # of this one (the daemon uses its own).
        self.remote = self._endpoint is not None or self._tcp is not None
        self.timeout = timeout
        self._options = [("grpc.use_local_subchannel_pool", 1)] if own_connection else []
        self._channel: grpc.aio.Channel | None = None
        self._stub: RunnerStub | None = None
        # The side doors beside a local daemon's socket (not through a TCP listener or an ssh
        # tunnel), looked for at their first use and again after one gave no answer: the read
        # door (Status outside the event loop that queues every other call, txd.daemon.readdoor)
        # and the watch door (Watch streams at a fraction of grpcio's cost per open stream,
        # txd.daemon.watchdoor). None where there is none.
        self._read: ReadDoor | None = None
        self._watch: tuple[grpc.aio.Channel, RunnerStub] | None = None
        self._looked: set[str] = set()  # "read", "watch": looked for
        if isinstance(reconnect, ResumePolicy):
            policy = reconnect
        else:
            policy = ResumePolicy.from_env(None if reconnect is None else float(reconnect))
        self.resumer = Resumer(
            self,
            policy,
            say_on_stderr("txd.client"),
            rejoin=self._rejoin_tunnel if self._ssh is not None else None,
        )
        if autostart and not self.remote:  # a daemon that died meanwhile is started again
            self.resumer.rejoin = self._start_daemon

    async def _rejoin_tunnel(self) -> None:
        """Before a reconnect: the ssh tunnel again, started anew when it is gone."""
        self._endpoint = self._ssh
        await self.connect()

    def _use_own_connection(self) -> None:
        """From the next channel on, a connection of this client's own: the process-wide
        pool's connection to a daemon that went away retries on gRPC's own backoff (1 s,
        growing), so a reconnect through it would lag the daemon's return by up to seconds."""
        own = ("grpc.use_local_subchannel_pool", 1)
        if own not in self._options:
            self._options.append(own)

    async def probe(self, timeout: float) -> None:
        """Returns when the daemon answers (a Where call); raises TxdError otherwise."""
        await self._call("Where", pb.WhereRequest(), timeout=timeout)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._close_read_door()
        await self._close_watch_door()
        if self._channel is not None:
            await self._channel.close(None)
            self._channel = self._stub = None

    def _side_door(self, name: str, path: str) -> bool:
        """Whether to use the side door `name` at `path`, the first time it is asked."""
        if name in self._looked:
            return False
        self._looked.add(name)
        return self._tcp is None and os.path.exists(path)

    def _read_door(self) -> ReadDoor | None:
        if self._side_door("read", path := defaults.read_door(self.target)):
            self._read = ReadDoor(path)
        return self._read

    def _watch_door(self) -> RunnerStub | None:
        if self._side_door("watch", path := defaults.watch_door(self.target)):
            options = [*CHANNEL_OPTIONS, *DOOR_OPTIONS, *self._options]
            channel = grpc.aio.insecure_channel(f"unix:{path}", options=options)
            self._watch = channel, RunnerStub(channel)
        return self._watch[1] if self._watch is not None else None

    async def _close_read_door(self) -> None:
        """Forgets the door, to be looked for again on its next use."""
        self._looked.discard("read")
        door, self._read = self._read, None
        if door is not None:
            await door.close()

    async def _close_watch_door(self) -> None:
        """Forgets the door, to be looked for again on its next use."""
        self._looked.discard("watch")
        door, self._watch = self._watch, None
        if door is not None:
            await door[0].close(None)

    async def connect(self) -> None:
        """Starts the ssh tunnel to a remote host, when none runs (the first call does it;
        raises UnavailableError naming the hop that failed: ssh, the remote command, the
        daemon). Nothing to do for a local daemon."""
        if self._may_route:
            self._may_route = False
            self._route_to_serving_host()
        if self._may_start:
            self._may_start = False
            if self._endpoint is None and self._tcp is None:
                await self._start_daemon()
        if self._endpoint is None or self._stub is not None:
            return
        import asyncio

        from txd.client._errors import UnavailableError
        from txd.client._tunnel import TunnelError, describe, ensure

        try:
            self.socket_path = await asyncio.to_thread(ensure, self._endpoint)
            self.target = str(self.socket_path)
        except TunnelError as e:
            if self._served is not None:  # who serves, and when a takeover is possible
                from txd.client._serving import unanswered

                raise UnavailableError(unanswered(self._served, self._endpoint.url)) from None
            raise UnavailableError(describe(e, self._endpoint)) from None
        if self._served is not None and not self._said_route:
            self._said_route = True  # once the tunnel is up: never then contradicted
            say_on_stderr("txd.client")(
                f"txd serves this state dir on host {self._served.host}; reaching it over ssh "
                f"({self._endpoint.url})"
            )
        self._endpoint = None

    async def _start_daemon(self) -> None:
        """A daemon on the local socket, started when none answers (`autostart`): before
        the first call, and before each reconnect, as txctl's are."""
        import asyncio

        from txd.client._daemon import NoDaemon, autostart_allowed, ensure_local

        try:
            said = await asyncio.to_thread(
                ensure_local,
                self.socket_path,
                defaults.state_dir(None),
                autostart=autostart_allowed(),
            )
        except NoDaemon as e:
            raise UnavailableError(str(e)) from None
        if said:
            self.resumer.say(said)

    def _route_to_serving_host(self) -> None:
        """No daemon's socket here, and a daemon of another host, still beating, serves the
        state dir this host shares (its record, txd.client._serving): that daemon is the one
        to reach, over ssh. The client is then remote (run() sends no cwd or environment)."""
        try:
            self.socket_path.stat()
            return  # a socket here: the call says whether it answers
        except FileNotFoundError:
            pass
        except OSError:
            return  # cannot tell (another user's folder): the call says why
        from txd.client._endpoint import EndpointError
        from txd.client._errors import UnavailableError
        from txd.client._serving import RecordError, other_host, serving_endpoint

        try:
            served = other_host(defaults.state_dir())
            if served is None or not served.fresh():
                return
            ep = serving_endpoint(served)
        except (RecordError, EndpointError) as e:
            raise UnavailableError(f"no txd daemon answers on {self.socket_path}: {e}") from None
        self._served = served
        self._endpoint = self._ssh = ep
        self.remote = True
        self.resumer.rejoin = self._rejoin_tunnel

    @property
    def stub(self) -> RunnerStub:
        if self._endpoint is not None:
            raise RuntimeError("a remote AsyncClient needs `await client.connect()` first")
        if self._stub is None:
            options = [*CHANNEL_OPTIONS, *self._options]
            if self._tcp is not None:
                self._channel = _tcp.channel(self.target, self._tcp, options)
            else:
                self._channel = grpc.aio.insecure_channel(f"unix:{self.target}", options=options)
            self._stub = RunnerStub(self._channel)
        return self._stub

    async def _call(self, method: str, request: Any, timeout: float | None = -1.0) -> Any:
        await self.connect()
        try:
            return await getattr(self.stub, method)(
                request, timeout=self.timeout if timeout == -1.0 else timeout
            )
        except grpc.RpcError as e:
            raise self._error(e) from None

    def _error(self, e: grpc.RpcError) -> TxdError:
        """The call's error; where no daemon took the connection to a local socket, in words
        that say why and what to do, instead of gRPC's ("failed to connect to all addresses;
        ... connect failed: ... No such file or directory")."""
        err = from_rpc_error(e)
        if not (
            isinstance(err, UnavailableError)
            and self._tcp is None
            and self._ssh is None
            and err.message.startswith(_CONNECT_FAILED)
        ):
            return err
        from txd.client._daemon import connect_error

        why = connect_error(self.socket_path)
        if why is None:  # it answers now: gRPC's own words
            return err
        path, said = self.socket_path, why.strerror or str(why)
        if isinstance(why, PermissionError):
            return UnavailableError(
                f"cannot connect to txd on {path}: {said} (the socket or its folder is another "
                "user's; use your own with TXD_SOCKET)"
            )
        if self.remote:  # the local end of an ssh tunnel (txctl's): no daemon to start here
            return UnavailableError(f"the ssh tunnel's socket {path} does not answer: {said}")
        return UnavailableError(
            f"no txd daemon answers on {path}: {said}; start the daemon with `txd`, or any txctl "
            "command does"
        )

    async def _stream(
        self, method: str, request: Any, timeout: float | None = None
    ) -> AsyncIterator[Any]:
        await self.connect()
        call = getattr(self.stub, method)(request, timeout=timeout)
        try:
            async for item in call:
                yield item
        except grpc.RpcError as e:
            raise self._error(e) from None
        finally:
            call.cancel()  # the consumer stopped early: end the stream on the daemon too

    # -- jobs ------------------------------------------------------------------------------

    async def run(
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
        """Submits app (a txd.v1.AppDef, or a torchx.specs.AppDef); returns its handle.
        cwd/env default to this process's (local_cwd runs the job from there). A request_id
        makes retries safe: the same id never runs twice. `workspace`: a directory of code the
        job runs instead of its image's (RunRequest.workspace); None, as in TorchX's Runner,
        means none (txctl's default is the working directory)."""
        await self.connect()  # where the daemon is decides whether cwd and env are sent
        req = pb.RunRequest(
            request_id=request_id,
            **_submission(app, scheduler, cfg, cwd, env, workspace, self.remote),
        )
        return (await self._call("Run", req)).app_handle

    async def dryrun(
        self,
        app: AppDef,
        scheduler: str = "",
        cfg: Mapping[str, CfgVal] | None = None,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        workspace: str | None = None,
    ) -> pb.DryRunResponse:
        """What run() would submit (the app with defaults applied, the native request, and
        what would be built or copied from the workspace)."""
        await self.connect()
        req = pb.DryRunRequest(**_submission(app, scheduler, cfg, cwd, env, workspace, self.remote))
        return await self._call("DryRun", req)

    async def status(self, handle: str) -> AppStatus:
        """The job's latest status, from the read door where there is one: the same answer as
        the main socket's, and not queued behind its other calls under load."""
        request = pb.StatusRequest(app_handle=handle)
        await self.connect()
        if (door := self._read_door()) is not None:
            try:
                return await door.status(request, self.timeout)
            except DoorClosed:
                # Not answering (a dead daemon's file, a daemon stopping, an older daemon's
                # wire): the main socket answers, or says why not.
                await self._close_read_door()
        return (await self._call("Status", request)).status

    async def wait(self, handle: str, timeout: float | None = None) -> AppStatus:
        """The terminal status, pushed by the daemon when the job ends; asked again after a
        reconnect (within `timeout` in all, when given)."""
        req = pb.WaitRequest(app_handle=handle)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:  # bounded: each lost connection ends it or costs the Resumer's bounded time
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            gen = self.resumer.generation
            try:
                return (await self._call("Wait", req, timeout=left)).status
            except TxdError as e:
                await self.resumer.recover(e, f"the wait for {handle}", gen)

    async def watch(self, handle: str) -> AsyncIterator[AppStatus]:
        """The current status, then each change, ending with the terminal one. After a
        reconnect the job is watched again: its current status comes first (a status it
        passed through meanwhile is not sent; the last one is)."""
        while True:  # bounded as wait()'s
            gen = self.resumer.generation
            try:
                async for msg in self._watch_once(pb.WatchRequest(app_handle=handle)):
                    yield msg.status
                return
            except TxdError as e:
                await self.resumer.recover(e, f"the watch of {handle}", gen)

    async def _watch_once(self, request: pb.WatchRequest) -> AsyncIterator[pb.WatchResponse]:
        """One Watch call: at the watch door where there is one, else at the socket."""
        await self.connect()
        if (door := self._watch_door()) is not None:
            call = door.Watch(request)
            got = False
            try:
                async for msg in call:
                    got = True
                    yield msg
                return
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNAVAILABLE or got:
                    raise from_rpc_error(e) from None
                # Not answering before its first status (a dead daemon's file): the socket
                # answers, or says why not.
                await self._close_watch_door()
            finally:
                call.cancel()  # the consumer stopped early: end the stream on the daemon too
        async for msg in self._stream("Watch", request):
            yield msg

    async def events(
        self,
        *,
        since: str | dt.datetime | None = None,
        snapshot: bool = False,
        follow: bool = True,
        scheduler: str = "",
        states: Iterable[AppState | int] = (),
        handles: Iterable[str] = (),
        bookmark_interval: float | None = None,
    ) -> AsyncIterator[pb.EventsResponse]:
        """Every job's status changes in commit order (EventsResponse: kind, cursor, status,
        time). `since` a cursor (a response's `cursor`) or a time: replay what was committed
        after it, then SYNCED; `snapshot`: each job's current status (SNAPSHOT), then SYNCED;
        neither: live changes only. `follow`: go on with live changes (else end at SYNCED).
        BOOKMARK responses move the cursor when nothing matching happened. To resume after
        an error or a restart, call again with since= the last cursor received: no change is
        missed or repeated, but for the events of jobs deleted or pruned meanwhile, which a
        GAP response stands for (`removed`: how many; their DELETED events follow). A cursor
        older than the daemon's retention raises OutOfRangeError (its oldest_cursor names
        where the events held start).

        A lost connection is ridden out as watch() does: the stream is asked again from the
        last cursor received (a snapshot cut before its SYNCED is taken again whole), so the
        caller sees no change missed or repeated."""
        req = pb.EventsRequest(
            snapshot=snapshot,
            follow=follow,
            scheduler=scheduler,
            app_handles=list(handles),
            batch=EVENTS_BATCH,
        )
        req.states.extend(int(s) for s in states)  # type: ignore[misc]
        if isinstance(since, str):
            req.since_cursor = since
        elif (ts := _timestamp(since)) is not None:
            req.since_time.CopyFrom(ts)
        if bookmark_interval is not None:
            req.bookmark_interval.FromNanoseconds(int(bookmark_interval * 1e9))
        synced = not snapshot  # a snapshot's SNAPSHOT cursors cannot resume it
        while True:  # bounded as watch()'s: by the resumer's deadline
            gen = self.resumer.generation
            try:
                async for msg in self._events_once(req, follow):
                    if msg.kind == pb.EventsResponse.SYNCED:
                        synced = True
                    if synced and msg.cursor:  # from here on, a cursor resumes exactly
                        req.ClearField("snapshot")
                        req.ClearField("since_time")
                        req.since_cursor = msg.cursor
                    yield msg
                return
            except TxdError as e:
                await self.resumer.recover(e, "the events stream", gen)

    async def _events_once(
        self, req: pb.EventsRequest, follow: bool
    ) -> AsyncIterator[pb.EventsResponse]:
        """One Events call, acknowledging as the caller takes each response."""
        await self.connect()
        call = self.stub.Events()
        try:
            await call.write(req)
            taken = acked = 0
            acking = True
            while (msg := await call.read()) is not grpc.aio.EOF:  # type: ignore[attr-defined]
                window = msg.window
                more = list(msg.more)
                msg.ClearField("window")  # the protocol's, not the caller's
                msg.ClearField("more")
                yield msg
                for m in more:
                    yield m
                # The caller took them: acknowledge, so the daemon sends on (its window).
                taken += 1 + len(more)
                if msg.kind == pb.EventsResponse.SYNCED and not follow:
                    # The daemon ends the stream once we half-close: no acknowledgement after.
                    acking = False
                    await call.done_writing()
                    continue
                due = taken - acked >= min(EVENTS_ACK_EVERY, max(window // 2, 1))
                if acking and due:
                    try:
                        await call.write(pb.EventsRequest(received=taken))
                    except (grpc.RpcError, asyncio.InvalidStateError):
                        # The daemon ended the stream meanwhile: the next read says how.
                        acking = False
                    acked = taken
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
        finally:
            call.cancel()

    async def describe(self, handle: str, *, native: bool = False) -> pb.DescribeResponse:
        """The job as submitted; with `native`, also its backend request as txd rendered it
        at submit time (`.native`: `.recorded`, `.text`, or `.missing` saying why none)."""
        req = pb.DescribeRequest(app_handle=handle, native=native)
        return await self._call("Describe", req)

    async def list(
        self,
        scheduler: str = "",
        backend: bool = False,
        *,
        states: Iterable[AppState] = (),
        created_since: dt.datetime | None = None,
        limit: int | None = None,
        page_size: int = 0,
    ) -> builtins.list[AppStatus]:
        """Jobs txd launched, newest first; with `backend`, every job of yours the scheduler
        knows instead. Only those of `scheduler`, in `states` and created since
        `created_since`, when given; the newest `limit` of them, when given. Fetched a page
        (of `page_size` jobs, 0: the daemon's default) at a time; see list_iter to handle
        each as it arrives."""
        return [
            status
            async for status in self.list_iter(
                scheduler,
                backend,
                states=states,
                created_since=created_since,
                limit=limit,
                page_size=page_size,
            )
        ]

    async def list_iter(
        self,
        scheduler: str = "",
        backend: bool = False,
        *,
        states: Iterable[AppState] = (),
        created_since: dt.datetime | None = None,
        limit: int | None = None,
        page_size: int = 0,
    ) -> AsyncIterator[AppStatus]:
        """The jobs of list(), yielded as their page arrives: one page in memory at a time."""
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be at least 1, not {limit}")
        states = builtins.list(states)
        token, left = "", limit
        while True:  # ends: every page holds at least one job, or it is the last
            size = page_size
            if left is not None:  # ask for no more than is left
                size = min(left, page_size or _INT32_MAX)
            page = await self.list_page(
                scheduler,
                backend,
                states=states,
                created_since=created_since,
                page_size=size,
                page_token=token,
            )
            for status in page.apps[:left]:
                yield status
            if left is not None:
                left -= min(left, len(page.apps))
            if not page.next_page_token or left == 0:
                return
            if not page.apps or page.next_page_token == token:
                raise TxdError("the daemon sent a page that lists nothing new; stopped paging")
            token = page.next_page_token

    async def list_page(
        self,
        scheduler: str = "",
        backend: bool = False,
        *,
        states: Iterable[AppState] = (),
        created_since: dt.datetime | None = None,
        page_size: int = 0,
        page_token: str = "",
    ) -> pb.ListResponse:
        """One page of the list, as the List RPC returns it (see ListRequest in runner.proto):
        pass its next_page_token, with the same filters, for the next page."""
        req = pb.ListRequest(
            scheduler=scheduler,
            backend=backend,
            states=states,
            created_since=_timestamp(created_since),
            page_size=page_size,
            page_token=page_token,
        )
        return await self._call("List", req)

    async def cancel(self, handle: str) -> AppStatus:
        return (await self._call("Cancel", pb.CancelRequest(app_handle=handle))).status

    async def delete(self, handle: str) -> None:
        await self._call("Delete", pb.DeleteRequest(app_handle=handle))

    async def prune(
        self, created_before: dt.datetime, scheduler: str = "", *, dry_run: bool = False
    ) -> pb.PruneResponse:
        """Deletes finished jobs created before `created_before` (of `scheduler`, when given),
        with their logs: up to 1000 per call, oldest first; call again while `.more` is set.
        With dry_run, only lists them. `.failed` maps the handles of jobs kept (their
        scheduler failed) to why."""
        req = pb.PruneRequest(
            created_before=_timestamp(created_before), scheduler=scheduler, dry_run=dry_run
        )
        return await self._call("Prune", req)

    async def logs(
        self,
        handle: str,
        role: str = "",
        replica: int | Sequence[int] | None = None,
        *,
        regex: str = "",
        since: dt.datetime | None = None,
        until: dt.datetime | None = None,
        follow: bool = False,
        streams: str = "combined",
        tail: int | None = None,
    ) -> AsyncIterator[pb.LogsResponse]:
        """Chunks of raw log bytes, each tagged with its role and replica (`replica`: one
        index, or several, of each role read; None: every replica); with `tail`, only
        the last `tail` lines of each replica (then, following, what comes next). A chunk with
        `long_line` set carries no data: a line `regex` may have missed (LogsResponse).

        After a lost connection and a reconnect the read goes on from the last byte delivered
        of each replica (LogsRequest.offsets): no byte is lost or repeated. With `tail` it
        cannot (the last lines move as the log grows): it goes on with what is written after
        the reconnect, and says on stderr that bytes written meanwhile may be missing."""
        if streams not in _STREAMS:
            raise ValueError(f"streams must be one of {', '.join(_STREAMS)}, not {streams!r}")
        req = pb.LogsRequest(
            app_handle=handle,
            role=role,
            replica=replica if isinstance(replica, int) else None,
            replicas=() if replica is None or isinstance(replica, int) else replica,
            regex=regex,
            since=_timestamp(since),
            until=_timestamp(until),
            follow=follow,
            streams=_STREAMS[streams],
            tail=tail,
        )
        sent: dict[tuple[str, int], int] = {}  # bytes delivered per replica
        notes: set[tuple[str, int, int]] = set()  # unreadable (-1) and long-line notes sent
        while True:  # bounded as wait()'s
            gen = self.resumer.generation
            try:
                async for chunk in self._stream("Logs", req):
                    key = (chunk.role, chunk.replica)
                    if chunk.unreadable or chunk.HasField("long_line"):
                        note = (*key, chunk.long_line.offset if chunk.long_line.length else -1)
                        if note in notes:
                            continue  # said before the reconnect
                        notes.add(note)
                    sent[key] = sent.get(key, 0) + len(chunk.data)
                    yield chunk
                return
            except TxdError as e:
                await self.resumer.recover(e, f"the log read of {handle}", gen)
            if tail is None:
                del req.offsets[:]
                req.offsets.extend(
                    pb.ReplicaOffset(role=role, replica=k, offset=n)
                    for (role, k), n in sent.items()
                    if n
                )
            elif any(sent.values()):  # else nothing was shown: the same tail again
                req.tail = 0  # only what comes next: the lines shown stay the last ones shown
                self.resumer.say(
                    "a log read with tail cannot resume at a byte: it goes on with what is "
                    "written from now on; lines written while disconnected may be missing"
                )

    # -- schedulers ------------------------------------------------------------------------

    async def schedulers(self, *, check_backends: bool = False) -> pb.SchedulersResponse:
        """Every scheduler the daemon knows; with `check_backends`, whether each one's backend
        is ready (SchedulerInfo.not_ready), which takes up to a few seconds."""
        return await self._call("Schedulers", pb.SchedulersRequest(check_backends=check_backends))

    async def runopts(self, scheduler: str = "") -> builtins.list[RunOpt]:
        return list((await self._call("RunOpts", pb.RunOptsRequest(scheduler=scheduler))).opts)

    # -- the daemon ------------------------------------------------------------------------

    async def where(self) -> pb.WhereResponse:
        """Which daemon answers: its host, socket, state dir, version, pid, user, start time
        and uptime."""
        return await self._call("Where", pb.WhereRequest())

    async def metrics(self, *, prometheus: bool = False) -> pb.MetricsResponse:
        """The daemon's metrics: `.text` in the OpenMetrics text format, or with `prometheus`
        in Prometheus's text format 0.0.4; `.content_type` names it."""
        kind = pb.MetricsRequest.PROMETHEUS if prometheus else pb.MetricsRequest.OPENMETRICS
        return await self._call("Metrics", pb.MetricsRequest(format=kind))


def _appdef(app: AppDef) -> AppDef:
    """app itself, or the txd AppDef of a torchx.specs.AppDef (torchx loaded only then)."""
    if isinstance(app, AppDef):
        return app
    from txd.client.torchx_compat import from_torchx

    return from_torchx(app)


def _submission(
    app: AppDef,
    scheduler: str,
    cfg: Mapping[str, CfgVal] | None,
    cwd: str | None,
    env: Mapping[str, str] | None,
    workspace: str | None,
    remote: bool = False,
) -> dict[str, Any]:
    """The fields Run and DryRun share; the caller's cwd and environment by default (the
    daemon's own for a remote daemon), the workspace as an absolute path (a remote daemon's
    path as given). TorchX-only options of the scheduler (`quiet` ...) are dropped with a
    warning, as txctl drops them."""
    import warnings

    from txd.client._torchx_only import drop_torchx_only

    cfg, notes = drop_torchx_only(scheduler, cfg or {})
    for note in notes:  # as txctl names them on stderr
        warnings.warn(note, UserWarning, stacklevel=4)
    return {
        "app": _appdef(app),
        "scheduler": scheduler,
        "cfg": {k: to_cfg_value(v) for k, v in cfg.items()},
        "cwd": cwd or ("" if remote else os.getcwd()),
        "env": ({} if remote else dict(os.environ)) if env is None else dict(env),
        "workspace": (workspace if remote else os.path.abspath(workspace)) if workspace else "",
    }


__all__ = ["AsyncClient", "TxdError"]
