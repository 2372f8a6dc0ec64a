"""The hand-off to TorchX's experiment trackers (torchx.tracker), which run inside the job:
txctl and the Runner set, in every role's environment, what `AppRun.run_from_env()` reads
there, as TorchX's Runner sets it at submission:

- TORCHX_PARENT_RUN_ID: the run this job belongs to (`txctl run --parent_run_id`, the
  Runner's `parent_run_id`); TORCHX_PARENT_RUN_ID in the submitter's environment wins;
- TORCHX_TRACKERS: the trackers' names, the keys of the config files' `[torchx:tracker]`
  section; TORCHX_TRACKERS in the submitter's environment (comma-separated) wins;
- TORCHX_TRACKER_<NAME>_CONFIG: each tracker's `config` of its `[tracker:<name>]` section;
  the variable of that name in the submitter's environment wins.

TORCHX_JOB_ID, the run's own id, is the daemon's to set (the job's handle).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from txd.client.config import Config
from txd.v1 import AppDef

PARENT_RUN_ID = "TORCHX_PARENT_RUN_ID"
TRACKERS = "TORCHX_TRACKERS"


def config_env_name(tracker: str) -> str:
    """The variable holding a tracker's config, as torchx.tracker names it."""
    return f"TORCHX_TRACKER_{tracker.upper()}_CONFIG"


def tracking_env(
    parent_run_id: str | None, config: Config, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The variables to set in every role of a job submitted with `parent_run_id` under
    `config` and the submitter's environment `environ` (this process's by default)."""
    environ = os.environ if environ is None else environ
    env: dict[str, str] = {}
    parent = environ.get(PARENT_RUN_ID, parent_run_id)
    if parent:
        env[PARENT_RUN_ID] = parent
    names = list(config.sections.get("torchx:tracker", {}))
    if TRACKERS in environ:
        names = [n for n in environ[TRACKERS].split(",") if n]
    if names:
        env[TRACKERS] = ",".join(names)
    for name in names:
        value = environ.get(config_env_name(name))
        if value is None:
            value = config.sections.get(f"tracker:{name}", {}).get("config")
        if value:
            env[config_env_name(name)] = value
    return env


def with_env(app: AppDef, env: Mapping[str, str]) -> AppDef:
    """`app` with `env` set in every role (over the role's own values, as TorchX sets them);
    `app` itself when there is nothing to set."""
    if not env:
        return app
    out = AppDef()
    out.CopyFrom(app)
    for role in out.roles:
        role.env.update(env)
    return out
