"""fakepoll (txd_fakepoll.py, installed beside this module) that can also list: its backend
list is every <state_dir>/*.job file, also those txd did not submit, created at the file's
mtime. For the tests of List with backend=true."""

from __future__ import annotations

from typing import Any

from txd.v1 import AppState, AppStatus, Capabilities
from txd_fakepoll import FakePoll


class FakeList(FakePoll):
    name = "fakelist"
    description = "test double: fakepoll whose backend can list its jobs"
    capabilities = Capabilities(cancel=True, describe=True, list=True)

    async def list(self) -> list[AppStatus]:
        out = []
        for path in sorted(self.dir.glob("*.job")):
            status = AppStatus(state=AppState.Value(path.read_text()), app_id=path.stem)
            status.created.FromNanoseconds(path.stat().st_mtime_ns)
            out.append(status)
        return out


def create_scheduler(session_name: str, **kwargs: Any) -> FakeList:
    return FakeList(session_name, state_dir=kwargs["state_dir"])
