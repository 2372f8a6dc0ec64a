"""TorchX's Runner API on txd: code written against `torchx.runner.get_runner()` switches with
one changed import.

    from txd.client.runner import get_runner   # was: from torchx.runner import get_runner

    with get_runner() as runner:
        app_handle = runner.run(app, scheduler="local_cwd")
        print(runner.wait(app_handle).state)   # SUCCEEDED

Same method names, arguments and return types as TorchX's Runner: statuses are
`torchx.specs.AppStatus` (state a `torchx.specs.AppState`), describe() a `torchx.specs.AppDef`,
dryrun() a `torchx.specs.AppDryRunInfo` whose `.request` is the scheduler's TorchX request
object (txd.client.torchx_requests), scheduler_run_opts() a `torchx.specs.runopts`, list()
`torchx.schedulers.api.ListAppResponse`s; errors are TorchX's exceptions, each also txd's
(txd.client.torchx_compat.torchx_errors). So it needs torchx installed (code written for TorchX
has it: txd's `torchx` extra), and `run` takes a torchx or a txd AppDef.

Unlike TorchX, jobs live in the txd daemon (started, as txctl starts it, where none answers on
the socket; TXD_NO_AUTOSTART=1 turns that off), so another process or a later session can
status/wait/log them; wait() is pushed by the daemon, not polled. Built on the blocking
txd.client.Client: not for use inside a running event loop (use AsyncClient there).
"""

from __future__ import annotations

import builtins
import contextlib
import copy
import dataclasses
import datetime as dt
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from txd.cfgvalue import CfgVal
from txd.client._async import DEFAULT_TIMEOUT
from txd.client._errors import NotFoundError, TxdError
from txd.client._lines import long_line_note
from txd.client._sync import Client
from txd.client._torchx_only import drop_torchx_only
from txd.client.torchx_compat import (
    from_torchx,
    is_torchx,
    to_torchx_appdef,
    to_torchx_runopts,
    to_torchx_status,
    torchx_error,
    torchx_errors,
    torchx_specs,
)
from txd.v1 import AppDef

AppHandle = str  # {scheduler}://{session}/{app_id}, as in TorchX


class Runner:
    """TorchX's Runner, answered by the txd daemon on `socket` ($TXD_SOCKET or the default).

    `name` (TorchX's session name) is accepted but unused: txd names the session of every job
    it runs `txd`. `component_defaults` ({component: {arg: value}}) replace components'
    declared defaults, as in TorchX.
    """

    def __init__(
        self,
        name: str = "txd",
        component_defaults: Mapping[str, Mapping[str, str]] | None = None,
        *,
        socket: str | Path | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
    ) -> None:
        torchx_specs()  # fail now, with how to install it, rather than at the first status
        self._name = name
        self._component_defaults = {k: dict(v) for k, v in (component_defaults or {}).items()}
        # As torchx's Runner just runs: a daemon is started where none answers (as txctl).
        self._client = Client(socket, timeout=timeout, autostart=True)
        self._closed = False

    def __enter__(self) -> Runner:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Closes the connection; the jobs keep running in the daemon. Safe to call twice."""
        if not self._closed:
            self._closed = True
            self._client.close()

    def name(self) -> str:
        return self._name

    # -- submitting ------------------------------------------------------------------------

    def run(
        self,
        app: AppDef,
        scheduler: str,
        cfg: Mapping[str, CfgVal] | None = None,
        workspace: str | None = None,
        parent_run_id: str | None = None,
    ) -> AppHandle:
        """Submits `app` (a torchx.specs.AppDef or a txd.v1.AppDef); returns its handle.
        `parent_run_id` and the trackers configured reach the job's torchx.tracker as
        TorchX's Runner hands them over (txd.client._tracking). `workspace` (a directory) is
        what the job runs, where the scheduler supports workspaces."""
        with _as_torchx(scheduler_call=True):
            app = _tracked(app, parent_run_id)
            return self._client.run(app, scheduler, cfg, workspace=_workspace(workspace))

    def run_component(
        self,
        component: str,
        component_args: builtins.list[str],
        scheduler: str,
        cfg: Mapping[str, CfgVal] | None = None,
        workspace: str | None = None,
        parent_run_id: str | None = None,
    ) -> AppHandle:
        """Runs a component (a builtin such as `dist.ddp`, or `path/file.py:function`, which
        may be a TorchX component) with its command-line arguments."""
        app = self._component(component, component_args)
        return self.run(app, scheduler, cfg, workspace, parent_run_id)

    def dryrun(
        self,
        app: AppDef,
        scheduler: str,
        cfg: Mapping[str, CfgVal] | None = None,
        workspace: str | None = None,
        parent_run_id: str | None = None,
    ) -> Any:
        """What run() would submit, as a torchx.specs.AppDryRunInfo. Its `.request` is the
        scheduler's TorchX request object filled from txd's request (txd.client.torchx_requests;
        the text itself for a scheduler TorchX does not have); `print()` it to see the request
        txd would send. schedule() submits it."""
        given = dict(cfg or {})
        with _as_torchx(scheduler_call=True):
            app = _tracked(app, parent_run_id)
            resp = self._client.dryrun(app, scheduler, given, workspace=_workspace(workspace))
        sent, _ = drop_torchx_only(resp.scheduler, given)  # warned about by the dry run
        info = torchx_specs().AppDryRunInfo(
            _request(resp, sent), lambda _request, text=resp.request: text
        )
        # TorchX's Runner fills these back references of its dry-run info the same way.
        info._app = to_torchx_appdef(resp.app)
        info._scheduler = resp.scheduler
        info._cfg = self._resolved(resp.scheduler, given)
        info._txd = _DryRun(app, resp.scheduler, sent, workspace, copy.deepcopy(info.request))
        return info

    def schedule(self, dryrun_info: Any) -> AppHandle:
        """Submits what dryrun() returned; returns the handle. txd submits the dry run's app
        and options again (the daemon builds the request anew, with a new app id), so a change
        made to `dryrun_info.request` cannot be honoured: it is refused rather than lost."""
        dry = getattr(dryrun_info, "_txd", None)
        if not isinstance(dry, _DryRun):
            raise ValueError("schedule() takes an AppDryRunInfo from this Runner's dryrun()")
        if dryrun_info.request != dry.request:
            raise ValueError(
                "dryrun_info.request was changed after the dry run; txd submits the dry run's "
                "app and options, not an edited request: make the change in the AppDef or "
                "in cfg (scheduler_run_opts(scheduler) lists the options)"
            )
        return self.run(dry.app, dry.scheduler, dry.cfg, dry.workspace)

    def _resolved(self, scheduler: str, cfg: Mapping[str, CfgVal]) -> dict[str, CfgVal]:
        """cfg with the scheduler's defaults filled in, as TorchX's dry-run info holds it."""
        out = {name: opt.default for name, opt in self.scheduler_run_opts(scheduler)}
        for key in cfg:  # given under txd's name (mail_user): not TorchX's (mail-user) too
            out.pop(key.replace("_", "-"), None)
        out.update(cfg)
        return out

    def scheduler_run_opts(self, scheduler: str) -> Any:
        """The scheduler's options as `torchx.specs.runopts`, under TorchX's names (slurm's
        `mail-user` ...), with txd's types, defaults and help; TorchX-only options txd
        ignores on that scheduler (`quiet` ...) are listed, their help saying so."""
        with _as_torchx(scheduler_call=True):
            opts = self._client.runopts(scheduler)
        return to_torchx_runopts(scheduler, opts)

    def dryrun_component(
        self,
        component: str,
        component_args: builtins.list[str],
        scheduler: str,
        cfg: Mapping[str, CfgVal] | None = None,
        workspace: str | None = None,
        parent_run_id: str | None = None,
    ) -> Any:
        app = self._component(component, component_args)
        return self.dryrun(app, scheduler, cfg, workspace, parent_run_id)

    def _component(self, component: str, component_args: builtins.list[str]) -> AppDef:
        from txd.client.components import ComponentError, ComponentNotFound, resolve

        if not isinstance(component_args, builtins.list):
            raise TypeError(
                "component_args must be the component's command-line arguments as a list of "
                f"strings, not {type(component_args).__name__}"
            )
        errors = torchx_errors()
        try:
            return resolve(
                component,
                component_args,
                defaults=self._component_defaults.get(component),
                prog="runner.run_component",
            )
        except ComponentNotFound as e:
            raise errors["ComponentNotFoundError"](str(e)) from e
        except ComponentError as e:
            raise errors["ComponentValidationError"](str(e)) from e

    # -- following jobs --------------------------------------------------------------------

    def status(self, app_handle: AppHandle) -> Any | None:
        """The job's torchx.specs.AppStatus, or None if txd does not know the job."""
        try:
            with _as_torchx():
                return to_torchx_status(self._client.status(app_handle))
        except NotFoundError:
            return None

    def wait(self, app_handle: AppHandle, wait_interval: float = 10) -> Any | None:
        """The terminal torchx.specs.AppStatus, or None if txd does not know the job. The
        daemon pushes the end, so `wait_interval` (TorchX's polling period) is unused."""
        try:
            with _as_torchx():
                return to_torchx_status(self._client.wait(app_handle))
        except NotFoundError:
            return None

    def cancel(self, app_handle: AppHandle) -> None:
        """Requests cancellation and returns; does nothing if the job ended or is unknown."""
        with contextlib.suppress(NotFoundError), _as_torchx():
            self._client.cancel(app_handle)

    def stop(self, app_handle: AppHandle) -> None:
        """cancel(), under its older name: TorchX 0.7 still has it, with the same warning."""
        warnings.warn(
            "This method will be deprecated in the future, please use `cancel` instead.",
            PendingDeprecationWarning,
            stacklevel=2,
        )
        self.cancel(app_handle)

    def delete(self, app_handle: AppHandle) -> None:
        """Cancels the job if it runs, then forgets it and its logs; nothing if unknown."""
        with contextlib.suppress(NotFoundError), _as_torchx():
            self._client.delete(app_handle)

    def describe(self, app_handle: AppHandle) -> Any | None:
        """The torchx.specs.AppDef as submitted, or None if txd does not know the job."""
        try:
            with _as_torchx():
                return to_torchx_appdef(self._client.describe(app_handle).app)
        except NotFoundError:
            return None

    def list(self, scheduler: str) -> builtins.list[Any]:
        """The jobs txd launched on `scheduler`, newest first, as ListAppResponses."""
        from torchx.schedulers.api import ListAppResponse

        specs = torchx_specs()
        with _as_torchx(scheduler_call=True):
            return [
                ListAppResponse(
                    app_id=s.app_id, state=specs.AppState(s.state), app_handle=s.app_handle
                )
                for s in self._client.list_iter(scheduler)
            ]

    def log_lines(
        self,
        app_handle: AppHandle,
        role_name: str,
        k: int = 0,
        regex: str | None = None,
        since: dt.datetime | None = None,
        until: dt.datetime | None = None,
        should_tail: bool = False,
        streams: Any | None = None,
    ) -> Iterator[str]:
        """Replica k of role_name's log, line by line, each line with its newline (the last
        one may have none). `should_tail` follows until the job ends; `streams` is a
        torchx.schedulers.api.Stream (or "stdout"/"stderr"/"combined"). Lines that are not
        UTF-8 are decoded with replacement characters. An unknown job is TorchX's
        UnknownAppException (as UnknownAppError, also txd's NotFoundError)."""
        if self.status(app_handle) is None:  # as TorchX's Runner checks first
            raise torchx_errors()["UnknownAppError"](
                f"Unknown app = {app_handle}: txd knows no such job (`txctl list` lists them)"
            )
        chunks = self._client.logs(
            app_handle,
            role_name,
            k,
            regex=regex or "",
            since=since,
            until=until,
            follow=should_tail,
            streams=str(getattr(streams, "value", streams or "combined")),
        )
        return _lines(_data(chunks))

    def scheduler_backends(self) -> builtins.list[str]:
        """The names of the schedulers the daemon can run jobs on."""
        return [s.name for s in self._client.schedulers().schedulers if not s.load_error]

    def __repr__(self) -> str:
        return f"Runner(name={self._name}, socket={self._client._async.target})"


def get_runner(
    name: str | None = None,
    component_defaults: Mapping[str, Mapping[str, str]] | None = None,
    **scheduler_params: Any,
) -> Runner:
    """A Runner on the txd daemon of $TXD_SOCKET (or the default socket), as TorchX's
    get_runner. Scheduler parameters belong to the daemon in txd (`txd --set SCHED.KEY=VALUE`
    or its config file), so passing any is an error."""
    if scheduler_params:
        raise ValueError(
            f"scheduler parameters ({', '.join(sorted(scheduler_params))}) are set on the txd "
            "daemon (txd --set SCHEDULER.KEY=VALUE), not on the runner"
        )
    return Runner(name or "txd", component_defaults)


@dataclasses.dataclass
class _DryRun:
    """What schedule() submits for a dry run, and its request as the dry run returned it."""

    app: AppDef
    scheduler: str
    cfg: dict[str, CfgVal]
    workspace: Any
    request: Any


def _txd_app(app: Any) -> AppDef:
    return from_torchx(app) if is_torchx(app) else app


def _tracked(app: Any, parent_run_id: str | None) -> AppDef:
    """The txd AppDef of `app` with the trackers' variables in every role (as TorchX's
    Runner sets them); a config file that cannot be read is a ValueError naming it."""
    from txd.client._tracking import tracking_env, with_env
    from txd.client.config import ConfigError, load_config

    try:
        config = load_config()
    except ConfigError as e:
        raise ValueError(str(e)) from None
    return with_env(_txd_app(app), tracking_env(parent_run_id, config))


def _request(resp: Any, cfg: Mapping[str, CfgVal]) -> Any:
    """TorchX's request object of a DryRunResponse; its text for a scheduler TorchX does not
    have, or (with a warning saying why) one whose text cannot be read back."""
    from txd.client.torchx_requests import RequestError, has_request_type, torchx_request

    if not has_request_type(resp.scheduler):
        return resp.request
    try:
        return torchx_request(resp.scheduler, resp.request, resp.app, cfg)
    except RequestError as e:
        warnings.warn(f"dryrun(...).request is the request's text: {e}", stacklevel=3)
        return resp.request


@contextlib.contextmanager
def _as_torchx(*, scheduler_call: bool = False) -> Iterator[None]:
    """txd's errors raised as TorchX's (txd.client.torchx_compat.torchx_error)."""
    try:
        yield
    except TxdError as e:
        out = torchx_error(e, scheduler_call=scheduler_call)
        if out is e:
            raise
        raise out from None


def _workspace(workspace: Any) -> str | None:
    """A workspace as TorchX's Runner takes it: a directory, or a Workspace of one project
    copied to the top (multi-project workspaces are not supported)."""
    if workspace is None or isinstance(workspace, str):
        return workspace
    projects = getattr(workspace, "projects", None)
    if isinstance(projects, dict) and len(projects) == 1 and not next(iter(projects.values())):
        return str(next(iter(projects)))
    raise ValueError("txd takes a workspace as one directory, not several projects")


def _data(chunks: Iterator[Any]) -> Iterator[bytes]:
    """The bytes of LogsResponse chunks; a long line the regex may have missed (long_line) is
    a warning, as `txctl logs` says it on stderr."""
    for chunk in chunks:
        if chunk.HasField("long_line"):
            warnings.warn(long_line_note(chunk), stacklevel=2)
        else:
            yield chunk.data


def _lines(chunks: Iterator[bytes]) -> Iterator[str]:
    """Whole lines (with their newline) out of byte chunks; the unfinished rest at the end."""
    pending: builtins.list[bytes] = []  # the unfinished line, in pieces (no quadratic joins)
    for data in chunks:
        *whole, tail = data.split(b"\n")
        if whole:
            whole[0] = b"".join([*pending, whole[0]])
            pending = []
        for line in whole:
            yield (line + b"\n").decode(errors="replace")
        if tail:
            pending.append(tail)
    if pending:
        yield b"".join(pending).decode(errors="replace")


__all__ = ["AppHandle", "Runner", "get_runner"]
