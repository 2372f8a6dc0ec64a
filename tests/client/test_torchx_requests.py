"""txd.client.torchx_requests: a dry run's text that cannot be read back (cut by the daemon for
its size, or not the shape expected) is refused by name, and the Runner then hands back the
text with a warning rather than failing the dry run."""

from __future__ import annotations

import pytest
from txd.v1 import AppDef, Role

pytest.importorskip("torchx.specs")


def test_a_cut_request_is_not_read() -> None:
    from txd.client.torchx_requests import RequestError, torchx_request

    cut = '{"app_id": "a", "container_create": [\n... (12 more characters not shown)'
    with pytest.raises(RequestError, match="cut the dry run's request short"):
        torchx_request("local_docker", cut, AppDef(), {})
    with pytest.raises(RequestError, match="cannot read slurm's dry run request"):
        torchx_request("slurm", "#!/bin/bash\necho no srun here\n", AppDef(), {})


def test_the_runner_falls_back_to_the_text_with_a_warning() -> None:
    from txd.client.runner import _request
    from txd.v1.runner_pb2 import DryRunResponse

    app = AppDef(name="a", roles=[Role(name="r", entrypoint="echo")])
    cut = DryRunResponse(
        app=app, scheduler="aws_batch", request="{\n... (9 more characters not shown)"
    )
    with pytest.warns(UserWarning, match="request is the request's text: the daemon cut"):
        assert _request(cut, {}) == cut.request
    plugin = DryRunResponse(app=app, scheduler="my_plugin", request="whatever it prints")
    assert _request(plugin, {}) == "whatever it prints"  # no TorchX type: its text, no warning
