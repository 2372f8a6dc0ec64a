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
    """SageMaker's git_config (the SDK clones on the submitting host) is refused naming the
    reason, not as an unknown option; framework mode's other code options are txd's."""
    import pytest
    from txd.schedulers.aws.sagemaker_request import SageMakerOpts
    from txd.schedulers.errors import InvalidArgument

    cfg = {"role": CfgValue(str="r"), "output_path": CfgValue(str="s3://b/o")}
    with pytest.raises(InvalidArgument, match="does not clone git repositories") as e:
        options.resolve(SageMakerOpts, {**cfg, "git_config": CfgValue(str="x")})
    assert e.value.field == "cfg.git_config"
    for name in ("source_dir", "code_location"):
        opts = options.resolve(SageMakerOpts, {**cfg, name: CfgValue(str="s3://x/y")})
        assert getattr(opts, name) == "s3://x/y"
    with pytest.raises(InvalidArgument, match=r"unknown option \(valid options: "):
        options.resolve(SageMakerOpts, {**cfg, "no_such_option": CfgValue(str="x")})
