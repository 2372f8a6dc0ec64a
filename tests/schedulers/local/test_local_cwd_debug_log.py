"""local_cwd under a daemon at --log-level DEBUG, text and JSON: a job's env value and a run
option's value reach the job and its request, never the daemon's log (docs/security.md).

The option is log_dir, local_cwd's only free-text one: a path reaches the process table the
request is, and a path can name what should not be read (a project, a user)."""

from __future__ import annotations

import pytest
from txd_testing import (
    LOG_FORMATS,
    Daemon,
    debug_log,
    own_daemon,
    run_with_secrets,
    secret_app,
    sentinel,
    short_tmpdir,
)


@pytest.mark.parametrize("fmt", LOG_FORMATS)
async def test_debug_log_holds_no_env_or_option_value(
    fmt: str, request: pytest.FixtureRequest
) -> None:
    env_secret, opt_secret = sentinel("env"), sentinel("opt")
    root = short_tmpdir("txdt-secrets-")
    with own_daemon(Daemon(root, args=debug_log(fmt)), request) as d:
        app, cfg = secret_app(env_secret), {"log_dir": str(root / opt_secret)}
        await run_with_secrets(d, "local_cwd", app, cfg, [env_secret, opt_secret], env_secret)
