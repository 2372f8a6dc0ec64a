"""TorchX's dashed option names (slurm's mail-user/mail-type) are txd's options (issue 20)."""

from __future__ import annotations

from txd.schedulers import options
from txd.schedulers.hpc.slurm_script import SlurmOpts
from txd.v1.scheduler_pb2 import CfgValue


def test_slurm_dashed_mail_options_resolve() -> None:
    cfg = {"mail-user": CfgValue(str="me@x"), "mail-type": CfgValue(str="END")}
    opts = options.resolve(SlurmOpts, cfg)
    assert (opts.mail_user, opts.mail_type) == ("me@x", "END")


def test_torchx_options_txd_refuses_say_why() -> None:
    """SageMaker's framework-mode options (TorchX has them, txd has no framework mode) are
    refused naming the reason, not as an unknown option."""
    import pytest
    from txd.schedulers.aws.sagemaker_request import SageMakerOpts
    from txd.schedulers.errors import InvalidArgument

    cfg = {"role": CfgValue(str="r"), "output_path": CfgValue(str="s3://b/o")}
    for name in ("source_dir", "git_config", "code_location", "dependencies"):
        with pytest.raises(InvalidArgument, match="framework mode") as e:
            options.resolve(SageMakerOpts, {**cfg, name: CfgValue(str="x")})
        assert e.value.field == f"cfg.{name}"
    with pytest.raises(InvalidArgument, match=r"unknown option \(valid options: "):
        options.resolve(SageMakerOpts, {**cfg, "no_such_option": CfgValue(str="x")})
