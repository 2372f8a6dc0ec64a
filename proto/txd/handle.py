"""A job's handle, `{scheduler}://{session}/{app_id}`: the name txd gives every job it runs, in
TorchX's form. The daemon builds and checks handles, the client reads them: one type for both."""

from __future__ import annotations

import re
from dataclasses import dataclass

# The session may hold a '/', the scheduler and the app id may not.
_FORM = re.compile(r"(?P<scheduler>[^:/]+)://(?P<session>.*)/(?P<app_id>[^/]+)")


@dataclass(frozen=True, slots=True)
class Handle:
    scheduler: str
    session: str
    app_id: str

    @classmethod
    def parse(cls, text: str) -> Handle:
        """The handle `text` spells; ValueError (saying the form) when it spells none."""
        m = _FORM.fullmatch(text)
        if m is None:
            raise ValueError(f"{text!r} is not of the form {{scheduler}}://{{session}}/{{app_id}}")
        return cls(m["scheduler"], m["session"], m["app_id"])

    def format(self) -> str:
        return f"{self.scheduler}://{self.session}/{self.app_id}"

    def __str__(self) -> str:
        return self.format()
