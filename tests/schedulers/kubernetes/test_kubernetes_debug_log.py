"""kubernetes and kubernetes_mcad under a daemon at --log-level DEBUG, text and JSON: a job's env
value and a run option's value reach the apiserver, never the daemon's log (docs/security.md).
(kubernetes_asyncio logs a response's body at DEBUG when it reads it whole; txd reads the
apiserver's answers as streams, which it does not log: these passed before the daemon held
libraries at WARNING, and guard against a change that would log them.)

The option is image_secret (the pull secret every pod names: the option nearest to a secret,
and it lands in the pod template, the request's body, where a namespace would be in its path).
Kubelet pulls nothing (the image is the engine's own), so the job runs without that secret.
kubernetes_mcad's job is submitted and cancelled: nothing plays MCAD here, the AppWrapper's
create and its watch events are what carry the values."""

from __future__ import annotations

from typing import Any

import pytest
from docker_testing import BUSYBOX
from k8s_testing import K8S_CFG, Cluster, make_k8s_daemon
from txd.v1 import AppState
from txd_testing import (
    LOG_FORMATS,
    assert_log_keeps,
    debug_log,
    own_daemon,
    run_with_secrets,
    secret_app,
    sentinel,
    submit_with_secrets,
)

pytestmark = pytest.mark.timeout(240)


@pytest.mark.parametrize("fmt", LOG_FORMATS)
async def test_debug_log_holds_no_env_or_option_value(
    fmt: str, k8s_cluster: Cluster, k8s_namespace: str, request: pytest.FixtureRequest
) -> None:
    env_secret, opt_secret = sentinel("env"), sentinel("opt")
    d = make_k8s_daemon(k8s_cluster, k8s_namespace, args=debug_log(fmt))
    cfg: dict[str, Any] = {**K8S_CFG, "image_secret": opt_secret}
    with own_daemon(d, request):
        secrets = [env_secret, opt_secret]
        await run_with_secrets(
            d, "kubernetes", secret_app(env_secret, image=BUSYBOX), cfg, secrets, env_secret, 120
        )


@pytest.mark.parametrize("fmt", LOG_FORMATS)
async def test_mcad_debug_log_holds_no_env_or_option_value(
    fmt: str,
    k8s_cluster: Cluster,
    k8s_namespace: str,
    crds: list[str],
    request: pytest.FixtureRequest,
) -> None:
    env_secret, opt_secret = sentinel("env"), sentinel("opt")
    d = make_k8s_daemon(k8s_cluster, k8s_namespace, args=debug_log(fmt))
    cfg: dict[str, Any] = {**K8S_CFG, "image_secret": opt_secret}
    with own_daemon(d, request):
        async with d.client() as c:
            secrets = [env_secret, opt_secret]
            handle = await submit_with_secrets(
                c, "kubernetes_mcad", secret_app(env_secret, image=BUSYBOX), cfg, secrets
            )
            await c.cancel(handle)
            final = await c.wait(handle, timeout=120)
            assert final.state == AppState.CANCELLED, final
        assert_log_keeps(d, secrets)
