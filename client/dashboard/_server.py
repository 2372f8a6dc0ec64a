"""The dashboard's HTTP app: the page (static files in ./static), its JSON API and its
Server-Sent Events streams, each a thin use of the daemon's API through an AsyncClient.

    GET  /                   the page (public: the token is in the URL's fragment)
    GET  /static/NAME        its script and stylesheet (public)
    GET  /api/events         SSE: `snapshot` (every row), then `changed` / `deleted` / `failed`
    GET  /api/job?handle=H   Describe(native=true): app, status, options, native request
    GET  /api/logs?handle=H[&role=R&replica=N]   SSE `log` chunks: the last lines, then follow
    POST /api/cancel, /api/delete   {"handle": H}: also needs this dashboard's own Origin

Every /api request needs `Authorization: Bearer TOKEN` (see _guard).
"""

from __future__ import annotations

import asyncio
import codecs
import sys
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

from aiohttp import web
from txd.client._errors import InvalidArgumentError, NotFoundError, TxdError
from txd.client.dashboard._feed import Feed, Tab, sse
from txd.client.dashboard._guard import Guard

LOG_TAIL = 2000  # lines of each replica's log shown before following
PING = 15.0  # seconds between SSE comments: a closed tab is noticed, proxies keep the stream
STATIC = {"app.js": "text/javascript", "style.css": "text/css"}
PUBLIC = frozenset({"/", "/favicon.ico", *(f"/static/{name}" for name in STATIC)})
# On every answer, errors and streams included: no script, style or form target but the
# dashboard's own; never framed, sniffed, embedded by another origin or sharing a window with
# one that opened it; no referrer; nothing cached.
HARDENING = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
    "form-action 'none'",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
GUARD: web.AppKey[Guard] = web.AppKey("guard", Guard)
FEED: web.AppKey[Feed] = web.AppKey("feed", Feed)
CLIENT: web.AppKey[Any] = web.AppKey("client", object)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _say(line: str) -> None:
    print(f"txctl dashboard: {line}", file=sys.stderr, flush=True)


def _static(name: str) -> bytes:
    return resources.files("txd.client.dashboard").joinpath("static", name).read_bytes()


@web.middleware
async def _guarded(request: web.Request, handler: Handler) -> web.StreamResponse:
    guard = request.app[GUARD]
    why = guard.refusal(request.method, request.headers, request.path in PUBLIC)
    if why is not None:
        _say(f"refused {request.method} {request.path}: {why}")
        return web.Response(status=403, text="403: forbidden (see txctl dashboard's output)\n")
    return await handler(request)


async def _harden(request: web.Request, response: web.StreamResponse) -> None:
    response.headers.update(HARDENING)


async def _page(request: web.Request) -> web.StreamResponse:
    return web.Response(body=_static("index.html"), content_type="text/html")


async def _no_icon(request: web.Request) -> web.StreamResponse:
    return web.Response(status=204)  # a browser asks; the page has none


async def _file(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    if name not in STATIC:
        raise web.HTTPNotFound()
    return web.Response(body=_static(name), content_type=STATIC[name])


async def _stream(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "X-Accel-Buffering": "no"}
    )
    await response.prepare(request)
    return response


async def _events(request: web.Request) -> web.StreamResponse:
    feed = request.app[FEED]
    await feed.synced.wait()
    response = await _stream(request)
    tab: Tab = feed.subscribe()
    try:
        while True:  # ends when the tab goes (the handler is cancelled) or is dropped
            try:
                first = await asyncio.wait_for(tab.queue.get(), PING)
            except TimeoutError:
                await response.write(b": ping\n\n")
                continue
            batch = [first]
            while not tab.queue.empty() and batch[-1] is not None:
                batch.append(tab.queue.get_nowait())
            await response.write(b"".join(m for m in batch if m is not None))
            if batch[-1] is None:
                break
    except ConnectionResetError:
        pass  # the tab went while a write was on its way (before the handler was cancelled)
    finally:
        feed.unsubscribe(tab)
    return response


def _error(e: TxdError) -> web.Response:
    status = 404 if isinstance(e, NotFoundError) else 400
    if not isinstance(e, NotFoundError | InvalidArgumentError):
        status = 502
    return web.json_response({"error": str(e)}, status=status)


def _handle(request: web.Request) -> str:
    handle = request.query.get("handle", "")
    if not handle:
        raise web.HTTPBadRequest(text="missing ?handle=")
    return handle


async def _job(request: web.Request) -> web.StreamResponse:
    from txd.client._format import to_dict

    client = request.app[CLIENT]
    try:
        resp = await client.describe(_handle(request), native=True)
    except TxdError as e:
        return _error(e)
    data = to_dict(resp)
    return web.json_response(data)


async def _logs(request: web.Request) -> web.StreamResponse:
    client = request.app[CLIENT]
    handle = _handle(request)
    role = request.query.get("role", "")
    replica_text = request.query.get("replica", "")
    try:
        replica = int(replica_text) if replica_text else None
    except ValueError:
        raise web.HTTPBadRequest(text=f"replica must be a number, not {replica_text!r}") from None
    response = await _stream(request)
    decoders: dict[tuple[str, int], Any] = {}
    try:
        logs = client.logs(handle, role, replica, follow=True, tail=LOG_TAIL)
        async for chunk in logs:
            key = (chunk.role, chunk.replica)
            if chunk.unreadable:
                text = f"[txd: this replica's log can no longer be read: {chunk.unreadable}]\n"
            elif chunk.HasField("long_line"):
                continue
            else:
                decoder = decoders.setdefault(key, codecs.getincrementaldecoder("utf-8")("replace"))
                text = decoder.decode(chunk.data)
            if text:
                await response.write(
                    sse("log", {"role": chunk.role, "replica": chunk.replica, "text": text})
                )
        await response.write(sse("end", {}))
    except TxdError as e:
        await response.write(sse("failed", {"error": str(e)}))
    except ConnectionResetError:
        pass  # the tab went while a write was on its way
    return response


async def _change(request: web.Request, what: str) -> web.StreamResponse:
    client = request.app[CLIENT]
    try:
        body = await request.json()
        handle = body["handle"]
        if not isinstance(handle, str) or not handle:
            raise TypeError
    except (ValueError, KeyError, TypeError):
        return web.json_response({"error": 'send JSON {"handle": "..."}'}, status=400)
    try:
        if what == "cancel":
            await client.cancel(handle)
        else:
            await client.delete(handle)
    except TxdError as e:
        return _error(e)
    _say(f"{what} {handle}")
    return web.json_response({"ok": True})


async def _cancel(request: web.Request) -> web.StreamResponse:
    return await _change(request, "cancel")


async def _delete(request: web.Request) -> web.StreamResponse:
    return await _change(request, "delete")


def app(client: Any, guard: Guard, feed: Feed) -> web.Application:
    application = web.Application(middlewares=[_guarded])
    application.on_response_prepare.append(_harden)
    application[GUARD] = guard
    application[FEED] = feed
    application[CLIENT] = client
    application.router.add_get("/", _page)
    application.router.add_get("/static/{name}", _file)
    application.router.add_get("/favicon.ico", _no_icon)
    application.router.add_get("/api/events", _events)
    application.router.add_get("/api/job", _job)
    application.router.add_get("/api/logs", _logs)
    application.router.add_post("/api/cancel", _cancel)
    application.router.add_post("/api/delete", _delete)
    return application
