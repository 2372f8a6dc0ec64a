"""local_docker under a daemon at --log-level DEBUG, text and JSON: a job's env value and a run
option's value reach the engine, never the daemon's log (docs/security.md). The option is
`env` (KEY:value pairs for every replica: where a secret for the job would go); both end up in
the container's create request and in its inspect answer."""

from __future__ import annotations

import pytest
from docker_testing import BUSYBOX, Engine, make_docker_daemon
from txd_testing import LOG_FORMATS, debug_log, own_daemon, run_with_secrets, secret_app, sentinel


@pytest.mark.parametrize("fmt", LOG_FORMATS)
async def test_debug_log_holds_no_env_or_option_value(
    fmt: str, docker_engine: Engine, request: pytest.FixtureRequest
) -> None:
    env_secret, opt_secret = sentinel("env"), sentinel("opt")
    app = secret_app(env_secret, image=BUSYBOX)
    cfg = {"network": "none", "env": {"TXD_T_OPTION": opt_secret}}
    with own_daemon(make_docker_daemon(docker_engine, debug_log(fmt)), request) as d:
        await run_with_secrets(d, "local_docker", app, cfg, [env_secret, opt_secret], env_secret)
