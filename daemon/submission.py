"""What must match for a Run to reuse a request id: everything that defines the submission.

The app and the scheduler are recorded whole with every job; the request's other fields that
change the job (cfg, cwd, env, workspace) are recorded as one digest each with a job submitted
under a request id (JobRecord.submission), so the job store holds no copy of the caller's
environment, and a field that differs can still be named.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from typing import Any

from txd.schedulers import options
from txd.v1.runner_pb2 import RunRequest
from txd.v1.scheduler_pb2 import CfgValue

# Each field as a message names it, in RunRequest's order.
FIELDS = {
    "cfg": "scheduler options (cfg)",
    "cwd": "working directory (cwd)",
    "env": "environment (env)",
    "workspace": "workspace",
}


def digests(req: RunRequest) -> dict[str, str]:
    """A digest of each of FIELDS as the request gives it (an empty cwd or env means the
    daemon's, whatever that is at the time: equal to another empty one). Paths are normalized
    and a workspace taken from cwd, as Run does; cfg is compared as given, not as resolved
    with the scheduler's defaults."""
    cwd = os.path.normpath(req.cwd) if req.cwd else ""
    workspace = os.path.normpath(os.path.join(cwd, req.workspace)) if req.workspace else ""
    values: dict[str, Any] = {
        "cfg": sorted((k, v.SerializeToString(deterministic=True)) for k, v in req.cfg.items()),
        "cwd": cwd,
        "env": sorted(req.env.items()),
        "workspace": workspace,
    }
    return {name: _digest(values[name]) for name in FIELDS}


def _digest(value: Any) -> str:
    # repr: str, bytes, tuples and lists print the same for equal values, and escape anything
    # (lone surrogates too) that would not encode.
    return hashlib.blake2b(repr(value).encode(), digest_size=16).hexdigest()


def differing(recorded: Mapping[str, str], req: RunRequest) -> list[str]:
    """The FIELDS in which `req` differs from the digests recorded with a job."""
    mine = digests(req)
    return [name for name in FIELDS if recorded.get(name) != mine[name]]


def differing_legacy(
    recorded_cfg: Mapping[str, Any], resolved: Mapping[str, CfgValue], req: RunRequest
) -> list[str]:
    """For a job recorded before digests were kept: only what its record holds can be compared,
    the options as they were resolved. Those the request names must have the recorded value
    (`resolved`: the request's options resolved by the scheduler). Not under a workspace, which
    may rewrite options (slurm's job_dir becomes the workspace's copy); cwd and env were not
    recorded, so they are not compared."""
    if req.workspace:
        return []
    for key in req.cfg:
        if key not in resolved:
            continue
        mine = json.loads(json.dumps(options.from_cfg_value(resolved[key])))
        if recorded_cfg.get(key) != mine:
            return ["cfg"]
    return []


def said(fields: list[str]) -> str:
    """`fields` as a message says them: 'working directory (cwd) and environment (env)'."""
    names = [FIELDS.get(f, f) for f in fields]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
