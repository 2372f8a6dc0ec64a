"""One connection to one Kubernetes cluster: raw REST calls on plain JSON dicts, and streams.

kubernetes_asyncio provides the configuration (kubeconfig or in-cluster, with token, client
certificate and exec-plugin authentication) and the transport (its ApiClient's aiohttp session);
its model classes are not used: txd's objects are the dicts the apiserver speaks.

Every request counts itself in `calls` under a short kind ("list pods", "watch pods",
"create jobs", "get log", ...), for the bench's API requests per minute. Failures raise
KubeError: the apiserver's Status (HTTP status, reason, message), or status 0 when the server
cannot be reached or the configuration cannot be loaded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import weakref
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.config import ConfigException, list_kube_config_contexts
from kubernetes_asyncio.config.incluster_config import load_incluster_config
from kubernetes_asyncio.config.kube_config import load_kube_config

# A plain request: connect quickly, and give the server a minute to answer.
_REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=None, connect=10, sock_read=60)
# The in-cluster service account's namespace (the pod's own).
_INCLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
# How much of a non-JSON error body a message quotes.
_BODY_QUOTE = 200
# The longest aclose waits for its cut connections to be gone (one or two loop turns).
_CLOSE_TIMEOUT = 10.0


class KubeError(Exception):
    """A Kubernetes API request failed.

    `status` is the HTTP status (0: the server could not be reached, or the configuration could
    not be loaded), `reason` the Status reason ("NotFound", "Expired", ...; the HTTP reason when
    the body is no Status), `message` the apiserver's Status message (or what went wrong).
    `str()` is one line: what was asked, then why it failed.
    """

    def __init__(self, status: int, reason: str, message: str, *, what: str = "") -> None:
        self.status = status
        self.reason = reason
        self.message = message
        self.what = what
        super().__init__(self._line())

    def _line(self) -> str:
        code = f" ({self.status} {self.reason})" if self.status else ""
        head = f"{self.what}: " if self.what else ""
        return " ".join(f"{head}{self.message}{code}".split())


def call_kind(method: str, path: str, query: Mapping[str, Any] | None = None) -> str:
    """The short name `calls` counts a request under: "<verb> <resource>", the verb as
    Kubernetes names it (list, watch, get, create, replace, patch, delete, deletecollection),
    the resource as in the path ("pods", "jobs"), "<resource>/<subresource>" for a subresource
    other than a pod's log, which is "get log"."""
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    # /api/v1/... or /apis/GROUP/VERSION/...; then namespaces/NS/ for a namespaced resource.
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    resource = rest[0] if rest else "/".join(parts) or "/"
    named, sub = len(rest) >= 2, rest[2] if len(rest) >= 3 else ""
    method = method.upper()
    if method == "GET":
        watching = str((query or {}).get("watch", "")).lower() in ("true", "1")
        verb = "get" if named else "watch" if watching else "list"
    else:
        verb = {"POST": "create", "PUT": "replace", "PATCH": "patch"}.get(method, "")
        if method == "DELETE":
            verb = "delete" if named else "deletecollection"
        verb = verb or method.lower()
    if sub == "log":
        return f"{verb} log"
    return f"{verb} {resource}/{sub}" if sub else f"{verb} {resource}"


class Kube:
    """One cluster connection (see `connect`). `namespace` is the context's namespace, or
    "default", and `namespace_from` says which; `server` the apiserver's URL; `calls` counts
    every request by kind."""

    def __init__(
        self, api: ApiClient, namespace: str, source: str, namespace_from: str = ""
    ) -> None:
        self._api = api
        self.namespace = namespace
        self.source = source  # where the configuration came from, for messages
        self.namespace_from = namespace_from or source
        self.server: str = api.configuration.host or ""
        self.calls: Counter[str] = Counter()
        self._closed = False
        # Every connection a request went out on, while it is open (see aclose).
        self._transports: weakref.WeakSet[asyncio.Transport] = weakref.WeakSet()

    @classmethod
    async def connect(cls, kubeconfig: str = "", context: str = "") -> Kube:
        """Connects as kubectl would: the kubeconfig file `kubeconfig`, else those $KUBECONFIG
        names (colon-separated), else ~/.kube/config; when none of these is set and exists, the
        in-cluster service account. `context` "" is the file's current context."""
        cfg = Configuration()
        path = os.pathsep.join(
            os.path.expanduser(p)
            for p in (kubeconfig or os.environ.get("KUBECONFIG", "")).split(os.pathsep)
        )
        if not path:
            default = Path.home() / ".kube" / "config"
            path = str(default) if default.exists() else ""
        if not path:
            if context:
                raise KubeError(0, "ConfigError", f"context {context!r} needs a kubeconfig file")
            return cls._in_cluster(cfg)
        if not any(Path(p).expanduser().is_file() for p in path.split(os.pathsep) if p):
            raise KubeError(0, "ConfigError", f"kubeconfig {path} does not exist")
        try:
            contexts, current = list_kube_config_contexts(path)
            names = [c.get("name") for c in contexts or []]
            if context and context not in names:
                known = ", ".join(map(str, names)) or "none"
                msg = f"kubeconfig {path} has no context {context!r} (it has: {known})"
                raise KubeError(0, "ConfigError", msg)
            if not context and not current:
                raise KubeError(0, "ConfigError", f"kubeconfig {path} sets no current-context")
            loader = await load_kube_config(
                config_file=path, context=context or None, client_configuration=cfg,
                persist_config=False,
            )  # fmt: skip
        except KubeError:
            raise
        except Exception as e:  # yaml, ConfigException, missing keys: all mean a bad file
            raise KubeError(0, "ConfigError", f"kubeconfig {path}: {_one_line(e)}") from e
        active = loader.current_context or {}
        named = (active.get("context") or {}).get("namespace")
        namespace = named or "default"
        user = (loader._user.value if loader._user is not None else {}) or {}
        if "exec" in user:
            cfg.refresh_api_key_hook = _exec_refresher(loader)
        where = f"kubeconfig {path}, context {active.get('name', context)}"
        origin = f"the context's ({where})" if named else f"{where} names none"
        return cls(ApiClient(configuration=cfg), str(namespace), where, origin)

    @classmethod
    def _in_cluster(cls, cfg: Configuration) -> Kube:
        try:
            load_incluster_config(client_configuration=cfg)
        except ConfigException as e:
            msg = (
                "no kubeconfig (none given, $KUBECONFIG unset, no ~/.kube/config)"
                f" and not in a cluster: {e}"
            )
            raise KubeError(0, "ConfigError", msg) from e
        try:
            namespace = _INCLUSTER_NAMESPACE.read_text().strip()
        except OSError:
            namespace = ""
        origin = "the in-cluster service account's" if namespace else "the pod names none"
        where = "in-cluster service account"
        return cls(ApiClient(configuration=cfg), namespace or "default", where, origin)

    async def aclose(self) -> None:
        """Closes every connection and returns once each is gone; later calls raise KubeError.
        Idempotent.

        The pool only waits for the connections it holds. One closed before, a stream left
        midway or a request cut short, is no longer its own, and its TLS close waits for the
        server's close_notify; a busy or hung server answers late, the event loop may end
        first, and the socket is left open (found unclosed at GC). So every connection still
        open is cut here (no close_notify: we are done with the server), and awaited."""
        if self._closed:
            return
        self._closed = True
        lost = []
        for transport in list(self._transports):
            closed = getattr(transport.get_protocol(), "closed", None)  # aiohttp's: at loss
            if isinstance(closed, asyncio.Future) and not closed.done():
                lost.append(closed)
                transport.abort()
        with contextlib.suppress(Exception):
            await self._api.close()
        if lost:  # gather retrieves the error a connection was lost with
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_CLOSE_TIMEOUT):
                    await asyncio.gather(*lost, return_exceptions=True)

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        """One REST call (`path` like /api/v1/namespaces/NS/pods); the JSON answer. A merge
        patch needs content_type "application/merge-patch+json"."""
        what = f"{method.upper()} {path}"
        async with self._send(method, path, query, body, content_type, _REQUEST_TIMEOUT) as resp:
            try:
                data = await resp.read()
            except (aiohttp.ClientError, OSError, TimeoutError) as e:
                raise self._unreachable(what, e) from e
        if not data:
            return {}
        try:
            result = json.loads(data)
        except ValueError as e:
            quoted = data[:_BODY_QUOTE].decode(errors="replace")
            raise KubeError(resp.status, "BadResponse", f"not JSON: {quoted!r}", what=what) from e
        return result if isinstance(result, dict) else {"items": result}

    async def answers(self, timeout: float) -> None:
        """GET /version, which any user may ask, within `timeout` seconds. Raises KubeError(0)
        when the apiserver cannot be reached or says nothing (a hung one still accepts
        connections); any other answer, an error status too, shows that it answers."""
        try:
            async with asyncio.timeout(timeout):
                await self.request("GET", "/version")
        except TimeoutError as e:
            msg = f"the Kubernetes API server at {self.server} did not answer within {timeout:g} s"
            raise KubeError(0, "Timeout", msg, what="GET /version") from e
        except KubeError as e:
            if e.status == 0:
                raise

    @contextlib.asynccontextmanager
    async def stream(
        self,
        path: str,
        query: Mapping[str, Any] | None = None,
        *,
        read_timeout: float | None = None,
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        """A GET whose body is read as it arrives (watches, `pods/NAME/log?follow=true`):

            async with kube.stream(path, {"watch": "true"}) as chunks:
                async for chunk in chunks: ...

        An error status raises KubeError on entering; the connection closes on leaving, however
        the consumer stops. `read_timeout`: the longest silence before KubeError(0) (None:
        wait forever, for a log that may be quiet for hours). A connection that drops midway
        raises KubeError(0) from the iteration; a body that ends normally ends the iteration.
        """
        timeout = aiohttp.ClientTimeout(total=None, connect=10, sock_read=read_timeout)
        what = f"GET {path}"
        async with self._send("GET", path, query, None, "", timeout) as resp:
            try:
                yield self._chunks(resp, what)
            finally:
                resp.close()  # not release(): a body read partway must not go back to the pool

    async def _chunks(self, resp: aiohttp.ClientResponse, what: str) -> AsyncIterator[bytes]:
        try:
            async for chunk in resp.content.iter_any():
                yield chunk
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            raise self._unreachable(what, e) from e

    @contextlib.asynccontextmanager
    async def _send(
        self,
        method: str,
        path: str,
        query: Mapping[str, Any] | None,
        body: Mapping[str, Any] | None,
        content_type: str,
        timeout: aiohttp.ClientTimeout,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """Sends a request through the ApiClient (which adds the credentials); yields the
        response once its status is a success, and releases it afterwards."""
        method = method.upper()
        what = f"{method} {path}"
        if self._closed:
            raise KubeError(0, "Closed", f"the connection to {self.server} is closed", what=what)
        self.calls[call_kind(method, path, query)] += 1
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        params = [(k, _query_value(v)) for k, v in (query or {}).items() if v is not None]
        try:
            resp: aiohttp.ClientResponse = await self._api.call_api(
                path, method, query_params=params, header_params=headers,
                body=dict(body) if body is not None else None, auth_settings=["BearerToken"],
                _preload_content=False, _request_timeout=timeout,
            )  # fmt: skip
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            raise self._unreachable(what, e) from e
        if resp.connection is not None and resp.connection.transport is not None:
            self._transports.add(resp.connection.transport)
        try:
            if not 200 <= resp.status <= 299:
                raise await _status_error(resp, what)
            yield resp
        finally:
            resp.release()

    def _unreachable(self, what: str, e: BaseException) -> KubeError:
        msg = f"cannot reach the Kubernetes API server at {self.server}: {_one_line(e)}"
        return KubeError(0, "Unreachable", msg, what=what)


async def _status_error(resp: aiohttp.ClientResponse, what: str) -> KubeError:
    """The apiserver's Status (kind: Status, reason, message) as a KubeError."""
    try:
        data = await resp.read()
    except (aiohttp.ClientError, OSError, TimeoutError):
        data = b""
    reason, message = resp.reason or "", ""
    try:
        status = json.loads(data)
        if isinstance(status, dict):
            reason = str(status.get("reason") or reason)
            message = str(status.get("message") or "")
    except ValueError:
        message = data[:_BODY_QUOTE].decode(errors="replace").strip()
    return KubeError(resp.status, reason, message or reason or "failed", what=what)


def _query_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text or type(e).__name__


def _exec_refresher(loader: Any) -> Any:
    """A refresh hook that runs the kubeconfig's exec plugin again once its token expires (the
    loader keeps the token until its expirationTimestamp)."""

    async def refresh(cfg: Configuration) -> None:
        await loader.load_from_exec_plugin()
        token = getattr(loader, "token", None)
        if token:
            cfg.api_key["BearerToken"] = token

    return refresh
