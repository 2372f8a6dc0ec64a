"""Bytes kept on disk instead of in memory: an unlinked temporary file (in TMPDIR, gone with
the process) that a log read fills and reads back, so a line of any length costs the daemon
a bounded amount of memory (a long line a regex matched late, the last lines of a `--tail`)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

# Bytes read back at a time.
READ_SIZE = 64 * 1024


class Spool:
    """Append-only bytes in an unlinked file; `close` frees the disk space at once."""

    def __init__(self) -> None:
        # Closed by close(): the file lives as long as the Spool.
        self._file = tempfile.TemporaryFile(buffering=0, prefix="txd-spool-")  # noqa: SIM115
        self._fd = self._file.fileno()
        self.size = 0

    def write(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        while view:
            n = os.pwrite(self._fd, view, self.size)
            view = view[n:]
            self.size += n

    def read(self, offset: int, n: int) -> bytes:
        """Up to n bytes from offset (fewer only at the end)."""
        parts: list[bytes] = []
        while n > 0:
            block = os.pread(self._fd, n, offset)
            if not block:
                break
            parts.append(block)
            offset += len(block)
            n -= len(block)
        return b"".join(parts)

    def pieces(self, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        """Bytes [start, end) in pieces of at most READ_SIZE."""
        end = self.size if end is None else end
        while start < end:
            block = self.read(start, min(READ_SIZE, end - start))
            if not block:
                return
            start += len(block)
            yield block

    def close(self) -> None:
        self._file.close()
