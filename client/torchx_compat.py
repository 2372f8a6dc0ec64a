"""TorchX's `torchx.specs` objects <-> txd.v1 messages, for code written for TorchX.

A TorchX component (`return specs.AppDef(...)`) and a `torchx.specs.AppDef` given to the client
become a txd.v1.AppDef field by field (`from_torchx`); the TorchX-style Runner
(txd.client.runner) hands TorchX's own objects back (`to_torchx_*`). torchx is imported here
only, and only when one of these is called: txd never needs it otherwise.

TorchX macros (`specs.macros.app_id` is the string "${app_id}", ...) are txd's macros, so
strings pass unchanged. A named resource (`specs.resource(h="gpu.small")`,
`specs.named_resources[...]`) is already numbers in a TorchX AppDef; the numbers are sent.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import typing
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from txd.v1 import (
    AppDef,
    AppStatus,
    BindMount,
    DeviceMount,
    Mount,
    OptType,
    Resource,
    RetryPolicy,
    Role,
    VolumeMount,
)
from txd.v1.scheduler_pb2 import RunOpt

# TorchX's placeholders: MISSING for an unset image or entrypoint, NONE for an unset optional
# string (utils.binary's image, an absent error message). txd's unset string is "".
_MISSING = "<MISSING>"
_NONE = "<NONE>"
_UNSET = (_MISSING, _NONE)


class TorchXError(ValueError):
    """torchx is missing, or a TorchX object has no txd equivalent; the message is one line."""


def install_hint() -> str:
    """How to install torchx beside txd: txd's `torchx` extra, into this Python."""
    from txd.install import command

    return command("torchx")


def torchx_specs() -> ModuleType:
    """`torchx.specs`, or TorchXError saying how to install it."""
    try:
        import torchx.specs
    except ImportError:
        raise TorchXError(f"torchx is not installed in this Python ({install_hint()})") from None
    return torchx.specs


def is_torchx(obj: object) -> bool:
    return type(obj).__module__.split(".")[0] == "torchx"


# -- TorchX -> txd -----------------------------------------------------------------------------


def from_torchx(app: Any) -> AppDef:
    """The txd.v1.AppDef of a `torchx.specs.AppDef`. Raises TorchXError for anything else, or
    for a field txd cannot represent (naming it)."""
    if not (is_torchx(app) and type(app).__name__ == "AppDef"):
        raise TorchXError(
            f"expected a txd.v1.AppDef or a torchx.specs.AppDef, got {type(app).__name__}"
        )
    _no_other_fields(app, "AppDef", {"name", "roles", "metadata"})
    return AppDef(
        name=app.name,
        roles=[_role(role, f"roles[{i}]") for i, role in enumerate(app.roles)],
        metadata=_texts(app.metadata, "metadata"),
    )


_ROLE_FIELDS = {
    "name",
    "image",
    "base_image",  # deprecated in TorchX; accepted only unset
    "entrypoint",
    "args",
    "env",
    "num_replicas",
    "min_replicas",
    "max_retries",
    "retry_policy",
    "resource",
    "port_map",
    "metadata",
    "mounts",
}


def _role(role: Any, where: str) -> Role:
    where = f"{where} ({role.name})"
    _no_other_fields(role, where, _ROLE_FIELDS - {"base_image"})
    policy = str(getattr(role.retry_policy, "value", role.retry_policy))
    try:
        RetryPolicy.Value(policy)
    except ValueError:
        raise TorchXError(f"{where}: retry_policy {policy} is not supported by txd") from None
    out = Role(
        name=role.name,
        image="" if role.image in _UNSET else role.image,
        entrypoint="" if role.entrypoint in _UNSET else role.entrypoint,
        args=[_text(a, f"{where}.args") for a in role.args],
        env=_texts(role.env, f"{where}.env"),
        num_replicas=role.num_replicas,
        max_retries=role.max_retries,
        retry_policy=policy,
        port_map=dict(role.port_map),
        metadata=_texts(role.metadata, f"{where}.metadata"),
        mounts=[_mount(m, f"{where}.mounts[{j}]") for j, m in enumerate(role.mounts)],
    )
    if role.min_replicas is not None:
        out.min_replicas = role.min_replicas
    res = role.resource
    # TorchX's NULL_RESOURCE (-1s) means "unset": leave txd's Resource empty.
    if (res.cpu, res.gpu, res.memMB) != (-1, -1, -1) or res.capabilities or res.devices:
        out.resource.CopyFrom(
            Resource(
                cpu=res.cpu,
                gpu=res.gpu,
                mem_mb=res.memMB,
                capabilities=_texts(res.capabilities, f"{where}.resource.capabilities"),
                devices=dict(res.devices),
            )
        )
    return out


def _mount(mount: Any, where: str) -> Mount:
    kind = type(mount).__name__
    if kind == "BindMount":
        return Mount(bind=BindMount(**dataclasses.asdict(mount)))
    if kind == "VolumeMount":
        return Mount(volume=VolumeMount(**dataclasses.asdict(mount)))
    if kind == "DeviceMount":
        return Mount(device=DeviceMount(**dataclasses.asdict(mount)))
    raise TorchXError(f"{where}: unknown mount type {kind}")


def _no_other_fields(obj: Any, where: str, known: set[str]) -> None:
    """A field newer TorchX versions added and txd does not know must be left at its default."""
    for f in dataclasses.fields(obj):
        if f.name in known:
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = object()  # required: always set
        if getattr(obj, f.name) != default:
            raise TorchXError(f"{where}: TorchX field {f.name!r} is not supported by txd")


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise TorchXError(f"{where}: expected a string, got {type(value).__name__} {value!r}")
    return value


def _texts(values: Mapping[str, Any], where: str) -> dict[str, str]:
    """A map of strings. TorchX allows any value in metadata and capabilities; txd's are
    strings, so other values are sent as JSON (True -> "true")."""
    out: dict[str, str] = {}
    for key, value in values.items():
        if isinstance(value, str):
            out[key] = value
            continue
        try:
            out[key] = json.dumps(value)
        except (TypeError, ValueError):
            raise TorchXError(
                f"{where}[{key}]: {type(value).__name__} value cannot be sent as text"
            ) from None
    return out


# -- txd -> TorchX -----------------------------------------------------------------------------


def to_torchx_appdef(app: AppDef) -> Any:
    """A `torchx.specs.AppDef` of a txd AppDef (as Runner.describe returns it)."""
    specs = torchx_specs()
    return specs.AppDef(
        name=app.name,
        roles=[_torchx_role(specs, role) for role in app.roles],
        metadata=dict(app.metadata),
    )


def _torchx_role(specs: ModuleType, role: Role) -> Any:
    res = role.resource
    return specs.Role(
        name=role.name,
        image=role.image,
        entrypoint=role.entrypoint,
        args=list(role.args),
        env=dict(role.env),
        num_replicas=role.num_replicas,
        min_replicas=role.min_replicas if role.HasField("min_replicas") else None,
        max_retries=role.max_retries,
        retry_policy=specs.RetryPolicy(RetryPolicy.Name(role.retry_policy)),
        resource=specs.Resource(
            cpu=res.cpu,
            gpu=res.gpu,
            memMB=res.mem_mb,
            capabilities=dict(res.capabilities),
            devices=dict(res.devices),
        )
        if role.HasField("resource")
        else specs.NULL_RESOURCE,
        port_map=dict(role.port_map),
        metadata=dict(role.metadata),
        mounts=[_torchx_mount(specs, m) for m in role.mounts],
    )


def _torchx_mount(specs: ModuleType, mount: Mount) -> Any:
    kind = mount.WhichOneof("kind")
    if kind == "bind":
        return specs.BindMount(mount.bind.src_path, mount.bind.dst_path, mount.bind.read_only)
    if kind == "volume":
        return specs.VolumeMount(mount.volume.src, mount.volume.dst_path, mount.volume.read_only)
    d = mount.device
    return specs.DeviceMount(d.src_path, d.dst_path or d.src_path, d.permissions or "rwm")


def to_torchx_status(status: AppStatus) -> Any:
    """A `torchx.specs.AppStatus` (state a `torchx.specs.AppState`) of a txd AppStatus."""
    specs = torchx_specs()
    return specs.AppStatus(
        state=specs.AppState(status.state),
        num_restarts=status.num_restarts,
        msg=status.msg,
        structured_error_msg=status.structured_error_msg or _NONE,
        ui_url=status.ui_url or None,
        roles=[
            specs.RoleStatus(
                role=rs.role,
                replicas=[
                    specs.ReplicaStatus(
                        id=r.id,
                        state=specs.AppState(r.state),
                        role=r.role or rs.role,
                        hostname=r.hostname,
                        structured_error_msg=r.structured_error_msg or _NONE,
                    )
                    for r in rs.replicas
                ],
            )
            for rs in status.roles
        ],
    )


# -- TorchX's exceptions -----------------------------------------------------------------------

# TorchX's name of an option where it differs from txd's (txd takes both).
TORCHX_OPTION_NAMES = {("slurm", "mail_user"): "mail-user", ("slurm", "mail_type"): "mail-type"}


@functools.cache
def torchx_errors() -> dict[str, type[Exception]]:
    """The exceptions the TorchX-style Runner raises, by name: each is TorchX's exception for
    the condition (what code written for TorchX catches) and txd's own (what txd code catches).
    Made on first use: torchx is imported only then."""
    specs = torchx_specs()
    from torchx.specs.finder import ComponentNotFoundException, ComponentValidationException
    from txd.client._errors import InvalidArgumentError, NotFoundError
    from txd.client.components import ComponentError, ComponentNotFound

    def txd_init(self: Any, message: str) -> None:
        Exception.__init__(self, message)
        self.message = message

    def txd_str(self: Any) -> str:
        return str(self.message)  # not KeyError's repr() of its argument

    def make(name: str, bases: tuple[type, ...], doc: str) -> type[Exception]:
        ns = {"__init__": txd_init, "__str__": txd_str, "__doc__": doc, "__module__": __name__}
        return type(name, bases, ns)

    return {
        "UnknownAppError": make(
            "UnknownAppError",
            (specs.UnknownAppException, NotFoundError),
            "txd knows no such job (TorchX's UnknownAppException).",
        ),
        "MalformedAppHandleError": make(
            "MalformedAppHandleError",
            (specs.MalformedAppHandleException, InvalidArgumentError),
            "The text names no one job (TorchX's MalformedAppHandleException).",
        ),
        "UnknownSchedulerError": make(
            "UnknownSchedulerError",
            (KeyError, specs.UnknownSchedulerException, NotFoundError),
            "The daemon has no such scheduler: TorchX's Runner raises KeyError (and "
            "UnknownSchedulerException is TorchX's name for it).",
        ),
        "InvalidRunConfigError": make(
            "InvalidRunConfigError",
            (specs.InvalidRunConfigException, InvalidArgumentError),
            "An option is unknown, of the wrong type, missing or refused "
            "(TorchX's InvalidRunConfigException; `cfg_key` names it).",
        ),
        "AppValidationError": make(
            "AppValidationError",
            (ValueError, InvalidArgumentError),
            "The AppDef is invalid for the scheduler (TorchX raises ValueError).",
        ),
        "ComponentNotFoundError": make(
            "ComponentNotFoundError",
            (ComponentNotFoundException, ComponentNotFound),
            "No such component (TorchX's ComponentNotFoundException).",
        ),
        "ComponentValidationError": make(
            "ComponentValidationError",
            (ComponentValidationException, ComponentError),
            "The component or its arguments are invalid (TorchX's ComponentValidationException).",
        ),
    }


def torchx_error(err: Exception, *, scheduler_call: bool = False) -> Exception:
    """The TorchX-and-txd exception for a txd client error, or `err` itself when TorchX has
    none for it. `scheduler_call`: the call named a scheduler, so NOT_FOUND means that one."""
    from txd.client._errors import InvalidArgumentError, NotFoundError, TxdError

    types = torchx_errors()
    out: Exception
    if isinstance(err, InvalidArgumentError):
        field = err.field or ""
        if field.startswith("cfg."):
            out = types["InvalidRunConfigError"](err.message)
            out.cfg_key = field[4:]  # type: ignore[attr-defined]
        elif field == "app_handle":
            out = types["MalformedAppHandleError"](err.message)
        else:
            out = types["AppValidationError"](err.message)
    elif isinstance(err, NotFoundError) and scheduler_call:
        out = types["UnknownSchedulerError"](err.message)
    else:
        return err
    if isinstance(err, TxdError) and isinstance(out, TxdError):
        out.status_details = err.status_details
    return out


# -- TorchX's runopts --------------------------------------------------------------------------


def to_torchx_runopts(scheduler: str, opts: list[RunOpt]) -> Any:
    """`torchx.specs.runopts` of a scheduler's txd options, under TorchX's names, plus the
    TorchX-only options txd accepts and ignores there (their help says so)."""
    from txd.cfgvalue import from_cfg_value
    from txd.client._torchx_only import TORCHX_ONLY

    specs = torchx_specs()
    types: dict[int, Any] = {
        OptType.STR: str,
        OptType.INT: int,
        OptType.FLOAT: float,
        OptType.BOOL: bool,
        # typing's forms, not list[str]: TorchX compares types with `== List[str]`
        OptType.LIST: typing.List[str],  # noqa: UP006
        OptType.DICT: typing.Dict[str, str],  # noqa: UP006
    }
    out = specs.runopts()
    for o in opts:
        default = None if o.required or not o.HasField("default") else from_cfg_value(o.default)
        out.add(
            TORCHX_OPTION_NAMES.get((scheduler, o.name), o.name),
            type_=types[o.type],
            help=o.help,
            default=default,
            required=o.required,
        )
    for name, only in TORCHX_ONLY.items():
        if scheduler in only.schedulers:
            out.add(
                name,
                type_=only.type,
                help=f"accepted and ignored by txd: {only.why}",
                default=False if only.type is bool else None,  # as TorchX's
            )
    return out
