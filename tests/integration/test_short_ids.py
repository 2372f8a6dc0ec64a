"""Short ids through a real daemon: wherever a handle is expected, txctl and the client take a
job's app id alone or a unique prefix of it; an ambiguous one lists the candidates, an unknown
one is NOT_FOUND naming what was typed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from txd.client._errors import InvalidArgumentError, NotFoundError
from txd_testing import no_traceback, sh_app, unique


def _distinct_prefixes(a: str, b: str) -> tuple[str, str]:
    """The shortest prefix of each that the other does not start with."""
    n = next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y) + 1
    return a[:n], b[:n]


async def test_app_id_and_prefix_name_a_job_everywhere(client: Any, txctl: Any) -> None:
    name = unique("sid")
    done = await client.run(sh_app("echo short-id-out", name=name))
    live = await client.run(sh_app("sleep 60", name=name))
    done_id, live_id = done.rsplit("/", 1)[1], live.rsplit("/", 1)[1]
    done_prefix, live_prefix = _distinct_prefixes(done_id, live_id)

    # The client: status, wait, describe and logs by app id and by prefix.
    assert (await client.wait(done_prefix)).app_handle == done
    assert (await client.status(done_id)).app_handle == done
    assert (await client.describe(done_prefix)).status.app_handle == done
    assert b"".join([c.data async for c in client.logs(done_prefix)]) == b"short-id-out\n"

    # txctl: the same, and cancel and delete.
    assert json.loads(txctl("status", "--json", done_prefix, check=0).stdout)["app_handle"] == done
    assert json.loads(txctl("wait", "--json", done_id, check=0).stdout)["app_handle"] == done
    assert txctl("logs", done_prefix, check=0).stdout == "short-id-out\n"
    assert done in txctl("describe", done_prefix, check=0).stdout
    txctl("cancel", live_prefix, check=0)
    assert json.loads(txctl("wait", "--json", live_prefix, check=1).stdout)["state"] == "CANCELLED"

    # The app name begins both ids: ambiguous, both handles named.
    proc = txctl("status", name, check=2)
    no_traceback(proc)
    assert f"'{name}' matches 2 jobs" in proc.stderr
    assert done in proc.stderr and live in proc.stderr
    with pytest.raises(InvalidArgumentError, match="matches 2 jobs"):
        await client.status(name)

    txctl("delete", live_id, check=0)
    assert (await client.status(name)).app_handle == done  # now unique
    txctl("delete", done_prefix, check=0)
    proc = txctl("status", done_prefix, check=2)
    no_traceback(proc)
    assert f"no job '{done_prefix}'" in proc.stderr
    with pytest.raises(NotFoundError, match=f"no job '{done_id}'"):
        await client.logs(done_id).__anext__()
