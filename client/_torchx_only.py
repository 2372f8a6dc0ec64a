"""TorchX run options with no meaning in txd: accepted where TorchX 0.7 has them, dropped
before the request is sent, and named once (txctl on stderr, the Python client as a warning).

On any other scheduler such a key is what it is in TorchX there: an unknown option, refused by
the daemon. Options TorchX has that txd refuses on purpose say why in the daemon's error (the
scheduler's TORCHX_REFUSED, see txd.schedulers.options.resolve).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

V = TypeVar("V")


@dataclass(frozen=True)
class TorchXOnly:
    schedulers: frozenset[str]  # those TorchX 0.7 has the option on
    why: str  # why txd ignores it
    type: type  # its type in TorchX's runopts (what Runner.scheduler_run_opts declares)


TORCHX_ONLY: dict[str, TorchXOnly] = {
    "quiet": TorchXOnly(
        frozenset({"local_docker", "kubernetes", "aws_batch", "aws_sagemaker"}),
        "TorchX's switch for its image build/push output; txd builds in the daemon and prints "
        "none of it here",
        bool,
    ),
    "user": TorchXOnly(
        frozenset({"aws_sagemaker"}),
        "TorchX hands it to the SageMaker SDK as the user to tag the job with; txd's training "
        "job is not tagged with a user name",
        str,
    ),
}

DEFAULT_SCHEDULER = "local_cwd"  # the daemon's default when a request names none


def drop_torchx_only(scheduler: str, cfg: Mapping[str, V]) -> tuple[dict[str, V], list[str]]:
    """cfg without the TorchX-only keys of `scheduler` ("" is the default one), and a note for
    each key dropped."""
    name = scheduler or DEFAULT_SCHEDULER
    dropped = [k for k, o in TORCHX_ONLY.items() if k in cfg and name in o.schedulers]
    notes = [f"option {k!r} is ignored on {name}: {TORCHX_ONLY[k].why}" for k in dropped]
    return {k: v for k, v in cfg.items() if k not in dropped}, notes
