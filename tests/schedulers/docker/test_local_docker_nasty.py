"""tests/nasty.py's values through a real txd on the real test engine: one local_docker job
whose container prints its argv, its env and a file read through a bind mount whose paths
(on the host and in the container) are named with the table."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from docker_testing import PYTHON
from nasty import NASTY_DIR, PWNED, nasty_args, nasty_env
from txd.v1 import AppDef, AppState, BindMount, Mount, Role
from txd_testing import read_logs

REPORT = (
    "import json, os, sys\n"
    "print(json.dumps({'argv': sys.argv[1:],"
    " 'env': {k: v for k, v in os.environ.items() if k.startswith('NASTY_')},"
    " 'mounted': open(os.environ['MOUNTED']).read()}))\n"
)


async def test_container_gets_every_value_exactly(docker_client: Any, tmp_path: Path) -> None:
    src = tmp_path / NASTY_DIR
    src.mkdir()
    (src / "f").write_text("through the mount\n")
    dst = "/mnt/" + NASTY_DIR
    role = Role(
        name="r",
        image=PYTHON,
        entrypoint="python3",
        args=["-c", REPORT, *nasty_args()],
        env={**nasty_env(), "MOUNTED": f"{dst}/f"},
        mounts=[Mount(bind=BindMount(src_path=str(src), dst_path=dst, read_only=True))],
    )
    app = AppDef(name="nasty", roles=[role])
    handle = await docker_client.run(app, scheduler="local_docker", cfg={"network": "none"})
    final = await docker_client.wait(handle, timeout=60)
    assert final.state == AppState.SUCCEEDED, final
    got = json.loads(await read_logs(docker_client, handle, streams="stdout"))
    assert got["argv"] == nasty_args()
    assert got["env"] == nasty_env()
    assert got["mounted"] == "through the mount\n"
    assert not os.path.exists(PWNED)
