"""What sits at a path, in words, for messages of both the daemon and its clients."""

from __future__ import annotations

import os
import stat

_KINDS = (
    (stat.S_ISREG, "a regular file"),
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISFIFO, "a named pipe"),
)


def describe(st: os.stat_result) -> str:
    """ "a regular file of uid 1001", "a folder (yours)" ..."""
    kind = next((name for test, name in _KINDS if test(st.st_mode)), "a special file")
    return f"{kind} (yours)" if st.st_uid == os.geteuid() else f"{kind} of uid {st.st_uid}"
