"""AppDef macros and the variables local_cwd sets for every replica."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from txd.v1 import AppDef, AppState, Role
from txd_testing import first_line, read_logs_by_replica


async def test_macros_in_args_and_env(client: Any, workdir: Path) -> None:
    script = (
        'echo "args: ${app_id} ${replica_id} ${img_root} ${rank0_env}"; '
        'echo "env: $M_APP $M_REPLICA $M_ROOT $M_RANK0"; '
        'echo "rank0 host via macro: $${${rank0_env}}"; '
        'echo "vars: $TORCHX_RANK0_HOST $TORCHX_JOB_ID"; '
        'echo "unknown: ${not_a_macro:-kept}"'
    )
    app = AppDef(
        name="macros",
        roles=[
            Role(
                name="m",
                entrypoint="sh",
                args=["-c", script],
                num_replicas=2,
                env={
                    "M_APP": "${app_id}",
                    "M_REPLICA": "r${replica_id}",
                    "M_ROOT": "${img_root}",
                    "M_RANK0": "${rank0_env}",
                },
            )
        ],
    )
    handle = await client.run(app, cwd=str(workdir))
    assert (await client.wait(handle, timeout=30)).state == AppState.SUCCEEDED
    app_id = handle.rsplit("/", 1)[1]
    assert handle == f"local_cwd://txd/{app_id}"
    logs = await read_logs_by_replica(client, handle)
    assert set(logs) == {"m/0", "m/1"}
    for k in (0, 1):
        assert logs[f"m/{k}"].decode().splitlines() == [
            f"args: {app_id} {k} {workdir} TORCHX_RANK0_HOST",
            f"env: {app_id} r{k} {workdir} TORCHX_RANK0_HOST",
            "rank0 host via macro: localhost",
            f"vars: localhost {handle}",
            "unknown: kept",
        ]


async def test_describe_keeps_macros_unsubstituted(client: Any, workdir: Path) -> None:
    app = AppDef(name="macrodesc", roles=[Role(name="m", entrypoint="echo", args=["${app_id}"])])
    handle = await client.run(app, cwd=str(workdir))
    await client.wait(handle, timeout=30)
    desc = await client.describe(handle)
    assert list(desc.app.roles[0].args) == ["${app_id}"]
    assert desc.app.roles[0].num_replicas == 1
    logs = await read_logs_by_replica(client, handle)
    assert logs == {"m/0": (handle.rsplit("/", 1)[1] + "\n").encode()}


def test_torchx_job_id_through_cli(txctl: Any) -> None:
    proc = txctl("run", "--wait", "utils.sh", "sh", "-c", 'echo "job=$TORCHX_JOB_ID"', check=0)
    handle = first_line(proc.stdout)
    assert txctl("logs", handle, check=0).stdout == f"job={handle}\n"
