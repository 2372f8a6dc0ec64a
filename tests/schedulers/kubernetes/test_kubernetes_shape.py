"""Which shape kubernetes gives an app without a Volcano queue: one Job per replica on
Kubernetes 1.20 (which drops completionMode), an Indexed Job per role from 1.21 on. The real test
cluster is 1.20, so the kubernetes tests on it prove the plain shape live; the choice for newer
servers is checked here from the version the scheduler read (the indexed objects themselves are
validated against current schemas in test_kubernetes_objects.py)."""

from __future__ import annotations

import pytest
from txd.schedulers.api import SubmitContext
from txd.schedulers.kubernetes import kubernetes
from txd.v1 import AppDef, Role

APP = AppDef(
    name="shape",
    roles=[
        Role(name="trainer", image="img", entrypoint="python", num_replicas=3),
        Role(name="ps", image="img", entrypoint="python", num_replicas=1),
    ],
)


@pytest.mark.parametrize(
    ("version", "shape", "jobs"),
    [
        ((1, 20), "plain", 4),  # a Job per replica
        ((1, 21), "indexed", 2),  # a Job per role
        ((1, 34), "indexed", 2),
    ],
)
async def test_shape_follows_the_server_version(
    version: tuple[int, int], shape: str, jobs: int
) -> None:
    sched = kubernetes.create_scheduler("t", settings={"namespace": "ns"})
    sched._version = version  # what GET /version answered: no cluster is asked here
    info = await sched.submit_dryrun(APP, {}, SubmitContext(cwd="/", env={}))
    req = info.request
    assert req.shape == shape
    kinds = [o["kind"] for o in req.objects]
    assert kinds == ["Service"] + ["Job"] * jobs, kinds
    modes = {o["spec"].get("completionMode") for o in req.objects[1:]}
    assert modes == ({"Indexed"} if shape == "indexed" else {None})
    if shape == "indexed":
        assert [o["spec"]["completions"] for o in req.objects[1:]] == [3, 1]
