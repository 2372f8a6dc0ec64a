"""Validation and defaults at the daemon's edge: the one place an AppDef is checked.

`normalize_app` returns a copy with defaults applied (num_replicas unset -> 1, named resources
resolved) or raises InvalidArgument naming the first bad field. Schedulers see only apps that
passed through here.
"""

from __future__ import annotations

import re

from txd.schedulers import resources
from txd.schedulers.errors import InvalidArgument
from txd.v1.app_pb2 import AppDef, Role

# Names end up in app ids, file paths and native job names: keep them portable. (fullmatch:
# `$` would let a trailing newline through.) The rule is stated in app.proto; keep them equal.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_HANDLE = re.compile(r"^(?P<scheduler>[^:/]+)://(?P<session>.*)/(?P<app_id>[^/]+)$")
MAX_REQUEST_ID = 128


def _check_name(field: str, name: str, what: str) -> None:
    if not name:
        raise InvalidArgument(field, f"{what} must not be empty")
    if not _NAME.fullmatch(name):
        raise InvalidArgument(
            field,
            f"{what} {name!r} must be 1-128 characters of letters, digits, '_', '.' or '-', "
            "not starting with '.' or '-'",
        )


def normalize_app(app: AppDef) -> AppDef:
    out = AppDef()
    out.CopyFrom(app)
    _check_name("app.name", app.name, "app name")
    if not out.roles:
        raise InvalidArgument("app.roles", "an app needs at least one role")
    seen: set[str] = set()
    for i, role in enumerate(out.roles):
        field = f"app.roles[{i}]"
        _check_name(f"{field}.name", role.name, "role name")
        if role.name in seen:
            raise InvalidArgument(f"{field}.name", f"duplicate role name {role.name!r}")
        seen.add(role.name)
        _normalize_role(field, role)
    return out


def _no_nul(field: str, text: str) -> None:
    """No string reaches an exec, a script or a file name with a NUL in it: each would cut it."""
    if "\0" in text:
        raise InvalidArgument(field, "contains a NUL character")


def _normalize_role(field: str, role: Role) -> None:
    if not role.entrypoint.strip():
        raise InvalidArgument(f"{field}.entrypoint", "must not be empty")
    _no_nul(f"{field}.entrypoint", role.entrypoint)
    _no_nul(f"{field}.image", role.image)
    if not role.HasField("num_replicas"):
        role.num_replicas = 1
    elif role.num_replicas <= 0:
        raise InvalidArgument(f"{field}.num_replicas", f"must be >= 1, got {role.num_replicas}")
    if role.HasField("min_replicas") and not 1 <= role.min_replicas <= role.num_replicas:
        raise InvalidArgument(
            f"{field}.min_replicas",
            f"must be between 1 and num_replicas ({role.num_replicas}), got {role.min_replicas}",
        )
    if role.max_retries < 0:
        raise InvalidArgument(f"{field}.max_retries", f"must be >= 0, got {role.max_retries}")
    for j, arg in enumerate(role.args):
        _no_nul(f"{field}.args[{j}]", arg)
    for key, value in role.env.items():
        if not key or "=" in key or "\0" in key:
            raise InvalidArgument(f"{field}.env", f"invalid variable name {key!r}")
        _no_nul(f"{field}.env[{key}]", value)
    for name, port in role.port_map.items():
        if not 1 <= port <= 65535:
            raise InvalidArgument(f"{field}.port_map[{name}]", f"port {port} not in 1..65535")
    _normalize_resource(f"{field}.resource", role)
    for j, mount in enumerate(role.mounts):
        _check_mount(f"{field}.mounts[{j}]", mount)


def _normalize_resource(field: str, role: Role) -> None:
    res = role.resource
    if res.named:
        try:
            named = resources.lookup(res.named)
        except KeyError as e:
            raise InvalidArgument(f"{field}.named", e.args[0]) from None
        named.capabilities.update(res.capabilities)
        named.named = res.named
        res.CopyFrom(named)
    for attr in ("cpu", "gpu", "mem_mb"):
        if getattr(res, attr) < 0:
            raise InvalidArgument(f"{field}.{attr}", f"must be >= 0, got {getattr(res, attr)}")
    for name, count in res.devices.items():
        if count < 1:
            raise InvalidArgument(f"{field}.devices[{name}]", f"count must be >= 1, got {count}")


def _check_mount(field: str, mount) -> None:  # type: ignore[no-untyped-def]
    kind = mount.WhichOneof("kind")
    if kind is None:
        raise InvalidArgument(field, "a mount must be one of bind, volume or device")
    m = getattr(mount, kind)
    src = m.src if kind == "volume" else m.src_path
    _no_nul(f"{field}.{kind}.{'src' if kind == 'volume' else 'src_path'}", src)
    _no_nul(f"{field}.{kind}.dst_path", m.dst_path)
    if not src:
        raise InvalidArgument(f"{field}.{kind}", "source must not be empty")
    if kind == "device":
        if not m.dst_path:
            m.dst_path = m.src_path
        if not m.permissions:
            m.permissions = "rwm"
        if set(m.permissions) - set("rwm"):
            raise InvalidArgument(
                f"{field}.device.permissions", f"{m.permissions!r} is not a subset of 'rwm'"
            )
    elif not m.dst_path:
        raise InvalidArgument(f"{field}.{kind}.dst_path", "must not be empty")


def parse_handle(handle: str) -> tuple[str, str, str]:
    """(scheduler, session, app_id) of `{scheduler}://{session}/{app_id}`."""
    m = _HANDLE.match(handle)
    if not m:
        raise InvalidArgument(
            "app_handle", f"{handle!r} is not of the form {{scheduler}}://{{session}}/{{app_id}}"
        )
    return m["scheduler"], m["session"], m["app_id"]


def check_request_id(request_id: str) -> None:
    if len(request_id) > MAX_REQUEST_ID:
        raise InvalidArgument("request_id", f"at most {MAX_REQUEST_ID} characters")
