"""`txctl tracker list jobs|metadata|artifacts`: what TorchX's experiment trackers recorded,
read through the first tracker configured (txd.client._tracking names them), as `torchx
tracker` reads it. The trackers are TorchX's plugins (entry points of `torchx.tracker`), so
this needs torchx in txctl's Python; the daemon is not asked."""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Callable
from typing import Any

from txd.client._format import table
from txd.client._tracking import TRACKERS, config_env_name, tracking_env
from txd.client.config import ConfigError, load_config


def tracker_command(args: argparse.Namespace, out: Callable[[Any, bool], None]) -> int:
    from txd.client.cli import CliError

    try:
        tracker = _first_tracker()
    except (ConfigError, _NoTracker) as e:
        raise CliError(str(e)) from None
    try:
        return _list(tracker, args, out)
    except Exception as e:  # the tracker's own (an unreachable store, a bad run id)
        raise CliError(f"the tracker failed: {type(e).__name__}: {e}") from e


class _NoTracker(Exception):
    pass


def _first_tracker() -> Any:
    """The first configured tracker that can be built, as torchx tracker uses."""
    try:
        from torchx.tracker.api import build_trackers
    except ImportError:
        from txd.client.torchx_compat import install_hint

        raise _NoTracker(
            f"the trackers are TorchX's plugins: install torchx in this Python ({install_hint()})"
        ) from None
    # Its warning that a name is not installed is said below, once, in txctl's words.
    logging.getLogger("torchx.tracker.api").setLevel(logging.ERROR)
    env = tracking_env(None, load_config())
    names = [n for n in env.get(TRACKERS, "").split(",") if n]
    if not names:
        raise _NoTracker(
            "no tracker configured: name one in a [torchx:tracker] section of .txdconfig (or "
            f".torchxconfig), its config in [tracker:NAME] config = ..., or set {TRACKERS}"
        )
    for name in names:
        try:
            built = list(build_trackers({name: env.get(config_env_name(name))}))
        except Exception as e:  # the factory refused its config: say which and why
            raise _NoTracker(f"tracker {name} cannot start: {type(e).__name__}: {e}") from e
        if built:
            return built[0]
    raise _NoTracker(
        f"no tracker of {', '.join(names)} is installed (neither an entry point of the group "
        "torchx.tracker nor a module of that name)"
    )


def _list(tracker: Any, args: argparse.Namespace, out: Callable[[Any, bool], None]) -> int:
    what = args.tracker_list
    if what == "jobs":
        ids = list(tracker.run_ids(parent_run_id=args.parent_run_id))
        out({"jobs": ids} if args.json else table(["JOB ID"], [[i] for i in ids]), args.json)
    elif what == "metadata":
        data = _plain(dict(tracker.metadata(args.run_id)))
        rows = [[k, v if isinstance(v, str) else json.dumps(v)] for k, v in data.items()]
        out({"metadata": data} if args.json else table(["ID", "VALUE"], rows), args.json)
    else:
        found = list(tracker.artifacts(args.run_id).values())
        if args.artifact:
            found = [a for a in found if a.name == args.artifact]
        listed = [{"name": a.name, "path": a.path, "metadata": _plain(a.metadata)} for a in found]
        rows = [[a["name"], a["path"], _shown(a["metadata"])] for a in listed]
        text = table(["ARTIFACT", "PATH", "METADATA"], rows)
        out({"artifacts": listed} if args.json else text, args.json)
    return 0


def _shown(metadata: Any) -> str:
    return "" if metadata is None else json.dumps(metadata)


def _plain(value: Any) -> Any:
    """`value` as JSON holds it (a tracker may return any object: its str() then)."""
    return json.loads(json.dumps(value, default=str))
