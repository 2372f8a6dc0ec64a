"""`parse_mounts`: mounts written as flat key=value tokens, as a `--mounts` list argument yields."""

from __future__ import annotations

import os

from txd.client.components._parser import ComponentError
from txd.v1 import BindMount, DeviceMount, Mount, VolumeMount

_ALIASES = {
    "type": "type",
    "src": "src",
    "source": "src",
    "dst": "dst",
    "destination": "dst",
    "target": "dst",
    "readonly": "readonly",
    "read_only": "readonly",
    "perm": "perm",
}
_VALID_KEYS = "type, src|source, dst|destination|target, readonly|read_only, perm"
_TYPES = ("bind", "volume", "device")


def parse_mounts(opts: list[str]) -> list[Mount]:
    """Parse tokens such as `["type=bind", "src=/data", "dst=/data", "readonly"]` into Mounts.

    Every `type=` token starts a new mount; the tokens after it describe that mount. `readonly`
    is a flag (`readonly=true|false` also works). Raises ComponentError (a ValueError).
    """
    groups: list[dict[str, str]] = []
    for raw in opts:
        token = raw.strip()
        if not token:
            continue  # "type=bind,src=a,dst=b," leaves an empty token behind
        key, sep, value = token.partition("=")
        key = _ALIASES.get(key.strip(), "")
        if not key:
            raise ComponentError(f"unknown mount option {token!r} (valid: {_VALID_KEYS})")
        if key == "type":
            groups.append({"type": value.strip()})
            continue
        if not groups:
            raise ComponentError(
                f"mount option {token!r} comes before any type=; start each mount with "
                "type=bind|volume|device"
            )
        group = groups[-1]
        if key == "readonly":
            value = _flag(value.strip(), token) if sep else "true"
        if key in group:
            raise ComponentError(f"mount {len(groups)}: {key} given more than once")
        group[key] = value.strip()
    return [_build(index, group) for index, group in enumerate(groups, start=1)]


def _flag(value: str, token: str) -> str:
    lowered = value.lower()
    if lowered not in ("true", "false"):
        raise ComponentError(f"bad mount option {token!r}: readonly takes true or false")
    return lowered


def _build(index: int, group: dict[str, str]) -> Mount:
    kind = group.pop("type")
    if kind not in _TYPES:
        raise ComponentError(
            f"mount {index}: unknown type {kind!r} (expected bind, volume or device)"
        )
    where = f"mount {index} ({kind})"
    src = group.get("src", "")
    if not src:
        raise ComponentError(f"{where}: src is required")
    dst = group.get("dst", "")
    read_only = group.get("readonly") == "true"
    if kind == "device":
        if "readonly" in group:
            raise ComponentError(f"{where}: readonly does not apply to devices; use perm=r")
        perm = group.get("perm", "rwm")
        if not perm or set(perm) - set("rwm"):
            raise ComponentError(f"{where}: perm {perm!r} must be a combination of r, w and m")
        return Mount(device=DeviceMount(src_path=src, dst_path=dst or src, permissions=perm))
    if "perm" in group:
        raise ComponentError(f"{where}: perm only applies to device mounts")
    if not dst:
        raise ComponentError(f"{where}: dst is required")
    if kind == "bind":
        if src.startswith("~"):
            src = os.path.expanduser(src)
        return Mount(bind=BindMount(src_path=src, dst_path=dst, read_only=read_only))
    return Mount(volume=VolumeMount(src=src, dst_path=dst, read_only=read_only))
