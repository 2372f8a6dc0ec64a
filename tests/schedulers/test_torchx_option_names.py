"""TorchX's dashed option names (slurm's mail-user/mail-type) are txd's options (issue 20)."""

from __future__ import annotations

from txd.schedulers import options
from txd.schedulers.hpc.slurm_script import SlurmOpts
from txd.v1.scheduler_pb2 import CfgValue


def test_slurm_dashed_mail_options_resolve() -> None:
    cfg = {"mail-user": CfgValue(str="me@x"), "mail-type": CfgValue(str="END")}
    opts = options.resolve(SlurmOpts, cfg)
    assert (opts.mail_user, opts.mail_type) == ("me@x", "END")
