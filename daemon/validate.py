"""Validation and defaults at the daemon's edge: the one place an AppDef is checked, and the
limits of every request field (app.proto and runner.proto state them, and why).

`normalize_app` returns a copy with defaults applied (num_replicas unset -> 1, named resources
resolved) or raises InvalidArgument naming the first bad field. Schedulers see only apps that
passed through here. The other requests' fields are checked by the functions below, called
where each request is read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from google.protobuf.timestamp_pb2 import Timestamp
from txd import resources
from txd.handle import Handle
from txd.schedulers.errors import InvalidArgument
from txd.v1.app_pb2 import AppDef, Role
from txd.v1.scheduler_pb2 import CfgValue

# Names end up in app ids, file paths and native job names: keep them portable. (fullmatch:
# `$` would let a trailing newline through.) The rule is stated in app.proto; keep them equal.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
MAX_REQUEST_ID = 128

# Limits; each is stated in the proto comment of its field, with why it is enough.
KiB, MiB = 1 << 10, 1 << 20
MAX_ROLES = 1000
MAX_REPLICAS = 10_000  # per role, and in all roles together
MAX_ARGS = 10_000
MAX_ARGS_BYTES = MiB
MAX_ARG_BYTES = 128 * KiB  # Linux's MAX_ARG_STRLEN: exec refuses a longer string
MAX_ENV = 4096
MAX_ENV_BYTES = MiB
MAX_META = 1000  # entries of metadata, capabilities, port_map, devices
MAX_META_BYTES = MiB
MAX_MOUNTS = 1000
MAX_REPLICA_BYTES = 16 * MiB  # args and env copied into every replica, summed over replicas
MAX_TEXT = 4 * KiB  # image, entrypoint, paths: Linux's PATH_MAX
MAX_SCHEDULER = 128
MAX_HANDLE = KiB
MAX_REGEX = 4 * KiB
MAX_PAGE_TOKEN = 4 * KiB
MAX_STATES = 100
MAX_CFG = 256
MAX_CFG_BYTES = 64 * KiB
# google.protobuf.Timestamp's range: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999999Z.
MIN_SECONDS, MAX_SECONDS = -62_135_596_800, 253_402_300_799


def _size(text: str) -> int:
    return len(text.encode(errors="surrogatepass"))


def check_text(field: str, text: str, limit: int = MAX_TEXT, *, nul: bool = False) -> None:
    """A string field: at most `limit` UTF-8 bytes, and no NUL unless `nul`."""
    if (n := _size(text)) > limit:
        raise InvalidArgument(field, f"{n} bytes, at most {limit}")
    if not nul and "\0" in text:
        raise InvalidArgument(field, "contains a NUL character")


def _check_count(field: str, items: Iterable[object] | Mapping[str, object], limit: int) -> None:
    n = len(list(items)) if not isinstance(items, Mapping) else len(items)
    if n > limit:
        raise InvalidArgument(field, f"{n} entries, at most {limit}")


def check_string_map(
    field: str, m: Mapping[str, str], entries: int = MAX_META, total: int = MAX_META_BYTES
) -> int:
    """A string -> string map: at most `entries` entries and `total` bytes of keys and values;
    returns the bytes."""
    _check_count(field, m, entries)
    size = sum(_size(k) + _size(v) for k, v in m.items())
    if size > total:
        raise InvalidArgument(field, f"{size} bytes of keys and values, at most {total}")
    return size


def check_env(field: str, env: Mapping[str, str]) -> int:
    """An environment (Role.env, RunRequest.env); returns its bytes."""
    size = check_string_map(field, env, MAX_ENV, MAX_ENV_BYTES)
    for key, value in env.items():
        if not key or "=" in key or "\0" in key:
            raise InvalidArgument(field, f"invalid variable name {key!r}")
        if "\0" in value:
            raise InvalidArgument(f"{field}[{key}]", "contains a NUL character")
        if (n := _size(key) + 1 + _size(value)) > MAX_ARG_BYTES:
            raise InvalidArgument(
                f"{field}[{key}]", f"{n} bytes as KEY=value, at most {MAX_ARG_BYTES}"
            )
    return size


def check_timestamp(field: str, ts: Timestamp) -> None:
    if not MIN_SECONDS <= ts.seconds <= MAX_SECONDS:
        raise InvalidArgument(field, f"seconds {ts.seconds} not within years 1 to 9999")
    if not 0 <= ts.nanos < 1_000_000_000:
        raise InvalidArgument(field, f"nanos {ts.nanos} not in 0..999999999")


def check_scheduler(field: str, name: str) -> None:
    check_text(field, name, MAX_SCHEDULER)


def check_cfg(cfg: Mapping[str, CfgValue]) -> None:
    """Run options, before the scheduler reads them (it names unknown ones and bad types)."""
    _check_count("cfg", cfg, MAX_CFG)
    for name, value in cfg.items():
        field = f"cfg.{name}"
        check_text("cfg", name, MAX_SCHEDULER)
        kind = value.WhichOneof("kind")
        if kind == "str":
            check_text(field, value.str, MAX_CFG_BYTES)
        elif kind == "list":
            _check_count(field, value.list.items, MAX_CFG)
            if (n := sum(_size(i) for i in value.list.items)) > MAX_CFG_BYTES:
                raise InvalidArgument(field, f"{n} bytes, at most {MAX_CFG_BYTES}")
        elif kind == "dict":
            check_string_map(field, value.dict.items, MAX_CFG, MAX_CFG_BYTES)


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
    _check_count("app.roles", out.roles, MAX_ROLES)
    check_string_map("app.metadata", out.metadata)
    seen: set[str] = set()
    replicas = replica_bytes = 0
    for i, role in enumerate(out.roles):
        field = f"app.roles[{i}]"
        _check_name(f"{field}.name", role.name, "role name")
        if role.name in seen:
            raise InvalidArgument(f"{field}.name", f"duplicate role name {role.name!r}")
        seen.add(role.name)
        size = _normalize_role(field, role)
        replicas += role.num_replicas
        if replicas > MAX_REPLICAS:
            raise InvalidArgument(
                f"{field}.num_replicas",
                f"the app's roles have {replicas} replicas so far, at most {MAX_REPLICAS} in all",
            )
        replica_bytes += role.num_replicas * size
        if replica_bytes > MAX_REPLICA_BYTES:
            raise InvalidArgument(
                field,
                f"{role.num_replicas} replicas with {size} bytes of args and env each bring "
                f"the app to {replica_bytes} bytes of args and env over all replicas, "
                f"at most {MAX_REPLICA_BYTES}",
            )
    return out


def _normalize_role(field: str, role: Role) -> int:
    """Checks and fills in a role; returns the bytes of its entrypoint, args and env (what
    every replica gets a copy of)."""
    if not role.entrypoint.strip():
        raise InvalidArgument(f"{field}.entrypoint", "must not be empty")
    check_text(f"{field}.entrypoint", role.entrypoint)
    check_text(f"{field}.image", role.image)
    if not role.HasField("num_replicas"):
        role.num_replicas = 1
    elif role.num_replicas <= 0:
        raise InvalidArgument(f"{field}.num_replicas", f"must be >= 1, got {role.num_replicas}")
    elif role.num_replicas > MAX_REPLICAS:
        raise InvalidArgument(
            f"{field}.num_replicas", f"{role.num_replicas} replicas, at most {MAX_REPLICAS}"
        )
    if role.HasField("min_replicas") and not 1 <= role.min_replicas <= role.num_replicas:
        raise InvalidArgument(
            f"{field}.min_replicas",
            f"must be between 1 and num_replicas ({role.num_replicas}), got {role.min_replicas}",
        )
    if role.retry_policy not in Role.RetryPolicy.values():
        raise InvalidArgument(
            f"{field}.retry_policy", f"{role.retry_policy} is not a Role.RetryPolicy"
        )
    if role.max_retries < 0:
        raise InvalidArgument(f"{field}.max_retries", f"must be >= 0, got {role.max_retries}")
    _check_count(f"{field}.args", role.args, MAX_ARGS)
    args_bytes = 0
    for j, arg in enumerate(role.args):
        check_text(f"{field}.args[{j}]", arg, MAX_ARG_BYTES)
        args_bytes += _size(arg)
    if args_bytes > MAX_ARGS_BYTES:
        raise InvalidArgument(
            f"{field}.args", f"{args_bytes} bytes in all, at most {MAX_ARGS_BYTES}"
        )
    env_bytes = check_env(f"{field}.env", role.env)
    check_string_map(f"{field}.metadata", role.metadata)
    _check_count(f"{field}.port_map", role.port_map, MAX_META)
    for name, port in role.port_map.items():
        check_text(f"{field}.port_map", name, MAX_SCHEDULER)
        if not 1 <= port <= 65535:
            raise InvalidArgument(f"{field}.port_map[{name}]", f"port {port} not in 1..65535")
    _normalize_resource(f"{field}.resource", role)
    _check_count(f"{field}.mounts", role.mounts, MAX_MOUNTS)
    for j, mount in enumerate(role.mounts):
        _check_mount(f"{field}.mounts[{j}]", mount)
    return _size(role.entrypoint) + args_bytes + env_bytes


def _normalize_resource(field: str, role: Role) -> None:
    res = role.resource
    check_text(f"{field}.named", res.named, MAX_SCHEDULER)
    check_string_map(f"{field}.capabilities", res.capabilities)
    _check_count(f"{field}.devices", res.devices, MAX_META)
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
        check_text(f"{field}.devices", name, MAX_SCHEDULER)
        if count < 1:
            raise InvalidArgument(f"{field}.devices[{name}]", f"count must be >= 1, got {count}")


def _check_mount(field: str, mount) -> None:  # type: ignore[no-untyped-def]
    kind = mount.WhichOneof("kind")
    if kind is None:
        raise InvalidArgument(field, "a mount must be one of bind, volume or device")
    m = getattr(mount, kind)
    for f in m.DESCRIPTOR.fields:
        if f.type == f.TYPE_STRING:
            check_text(f"{field}.{kind}.{f.name}", getattr(m, f.name))
    src = m.src if kind == "volume" else m.src_path
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


def parse_handle(handle: str) -> Handle:
    """The handle `handle` spells, `{scheduler}://{session}/{app_id}`."""
    check_handle(handle)
    try:
        return Handle.parse(handle)
    except ValueError as e:
        raise InvalidArgument("app_handle", str(e)) from None


def check_handle(text: str) -> None:
    """What an app_handle field may hold at all: a handle, app id or prefix of one."""
    check_text("app_handle", text, MAX_HANDLE)


def check_request_id(request_id: str) -> None:
    if len(request_id) > MAX_REQUEST_ID:
        raise InvalidArgument("request_id", f"at most {MAX_REQUEST_ID} characters")
