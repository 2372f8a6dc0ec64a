"""`txctl run`'s scheduler options as a TorchX user types them (issue 20, gap 1)."""

from __future__ import annotations

import pytest
from txd.client import cli


@pytest.mark.parametrize("flag", ["-c", "--cfg", "-cfg", "--scheduler_args"])
def test_torchx_cfg_flags_are_c(flag: str) -> None:
    args = cli._parser().parse_args(["run", flag, "a=1,b=2", "utils.echo"])
    assert args.component == "utils.echo"
    assert cli.parse_cfg(args.cfg) == {"a": "1", "b": "2"}


def test_empty_cfg_is_no_options() -> None:
    args = cli._parser().parse_args(["run", "-c", "", "utils.echo"])
    assert cli.parse_cfg(args.cfg) == {}
