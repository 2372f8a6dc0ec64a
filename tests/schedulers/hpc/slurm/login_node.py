"""A stand-in login node for the SSH tests: an asyncssh server on 127.0.0.1 that runs each
command in /bin/sh with this process's environment (so SLURM_CONF reaches the real cluster).

Usage: python login_node.py HOST_KEY AUTHORIZED_KEYS. Prints the port it listens on, then
serves until killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from typing import TYPE_CHECKING

from txd.schedulers.hpc.hosts import import_asyncssh

if TYPE_CHECKING:
    import asyncssh
else:
    asyncssh = import_asyncssh()


async def _pump(reader: asyncio.StreamReader, writer: asyncssh.SSHWriter[bytes]) -> None:
    while chunk := await reader.read(65536):
        writer.write(chunk)
        await writer.drain()


async def handle(process: asyncssh.SSHServerProcess[bytes]) -> None:
    """Runs the command the way sshd would. The bytes are pumped by hand, and the exit status
    sent only after stdout and stderr reached EOF: process.redirect() can drop trailing output.
    When the client closes the channel, the command's stdin is closed, as sshd does."""
    proc = await asyncio.create_subprocess_shell(
        process.command or "exec /bin/sh",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=os.environ["HOME"],
    )
    assert proc.stdin and proc.stdout and proc.stderr

    async def feed() -> None:
        assert proc.stdin
        try:
            while chunk := await process.stdin.read(65536):
                proc.stdin.write(chunk)
                await proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError, asyncssh.Error):
            pass
        finally:
            proc.stdin.close()

    feeder = asyncio.get_running_loop().create_task(feed())
    # If the channel goes away, the command ends on its own: its stdin was closed.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError, asyncssh.Error):
        await asyncio.gather(_pump(proc.stdout, process.stdout), _pump(proc.stderr, process.stderr))
    code = await proc.wait()
    feeder.cancel()
    with contextlib.suppress(asyncssh.Error, OSError):
        process.exit(code)


async def main() -> None:
    host_key, authorized = sys.argv[1], sys.argv[2]
    server = await asyncssh.create_server(
        asyncssh.SSHServer,
        "127.0.0.1",
        0,
        server_host_keys=[host_key],
        authorized_client_keys=authorized,
        process_factory=handle,
        encoding=None,
    )
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.wait_closed()


if __name__ == "__main__":
    asyncio.run(main())
