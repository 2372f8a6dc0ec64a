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


@pytest.mark.parametrize(
    ("text", "pairs"),
    [
        ("A=1;B=2", {"A": "1", "B": "2"}),
        ("A=1,B=2", {"A": "1", "B": "2"}),
        ("A=x,y;B=2", {"A": "x,y", "B": "2"}),
        ("A=x;y", {"A": "x;y"}),
        ("A=k=v,B=2", {"A": "k=v", "B": "2"}),
        ("A='',B=\"\"", {"A": "", "B": ""}),  # TorchX's to_dict: quotes alone are empty
        ("A='x',B=' '", {"A": "'x'", "B": "' '"}),  # other quotes stay
        ("", {}),
    ],
)
def test_env_pairs_split_as_torchx(text: str, pairs: dict[str, str]) -> None:
    from txd.client.components._parser import ArgType

    assert ArgType("dict", str, str, True).parse(text) == pairs


def test_env_without_key_is_refused() -> None:
    from txd.client.components._parser import ArgType

    with pytest.raises(ValueError, match="KEY=VALUE"):
        ArgType("dict", str, str, True).parse("=1")


def test_torchx_only_quiet_is_dropped_with_a_reason_where_torchx_has_it() -> None:
    from txd.client._torchx_only import drop_torchx_only

    cfg, notes = drop_torchx_only("kubernetes", {"quiet": "true", "image_repo": "r"})
    assert cfg == {"image_repo": "r"}
    assert notes == [
        "option 'quiet' is ignored on kubernetes: TorchX's switch for its image build/push "
        "output; txd builds in the daemon and prints none of it here"
    ]
    # TorchX has no `quiet` on slurm or local_cwd (the default): there it stays, unknown
    for scheduler in ("slurm", "local_cwd", ""):
        assert drop_torchx_only(scheduler, {"quiet": "true"}) == ({"quiet": "true"}, [])
    # SageMaker's `user` is TorchX-only there, and a real option of aws_batch
    assert drop_torchx_only("aws_sagemaker", {"user": "me"})[0] == {}
    assert drop_torchx_only("aws_batch", {"user": "me"}) == ({"user": "me"}, [])
