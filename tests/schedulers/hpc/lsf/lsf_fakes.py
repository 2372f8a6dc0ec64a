"""Test doubles for the lsf scheduler: a Host that answers with recorded LSF output and keeps
every command it was asked to run, and Hosts that hand out one such Host per login node.

Imported as the module `lsf_fakes`: the suite runs with --import-mode=importlib, which puts no
test folder on sys.path, so pyproject's pytest `pythonpath` adds this one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from txd.schedulers.errors import BackendUnavailable
from txd.schedulers.hpc.hosts import CHUNK, Host, Hosts, Result, SshTarget

RECORDED = Path(__file__).with_name("recorded")


def recorded(name: str) -> bytes:
    return (RECORDED / name).read_bytes()


@dataclass(frozen=True)
class Reply:
    stdout: bytes = b""
    stderr: bytes = b""
    returncode: int = 0


Responder = Callable[[tuple[str, ...], bytes | None], Reply]


class FakeHost(Host):
    """Answers `run` from replies set per program (the last one repeats) or from a responder
    function, and `stream` (cat / tail) from `files`, in pipe-sized chunks. A program in
    `missing` is not installed; while `down`, the host cannot be reached at all.

    Bytes appended with `write` reach running follows (`tail -F`) at once, as inotify would
    wake tail; bytes put into `files` directly are seen only by later reads."""

    def __init__(self, label: str = "fake host") -> None:
        super().__init__()
        self.label = label
        self.runs: list[tuple[tuple[str, ...], bytes | None]] = []
        self.streams: list[tuple[str, ...]] = []
        self.replies: dict[str, list[Reply]] = {}
        self.responders: dict[str, Responder] = {}
        self.files: dict[str, bytes] = {}
        self.missing: set[str] = set()
        self.down = False
        self.closed = False
        self._written = asyncio.Event()  # set, and replaced, at every `write`

    def reply(self, program: str, *replies: Reply) -> None:
        self.replies[program] = list(replies)

    def respond(self, program: str, responder: Responder) -> None:
        self.responders[program] = responder

    def argvs(self, program: str) -> list[tuple[str, ...]]:
        return [argv for argv, _ in self.runs if argv[0] == program]

    def write(self, path: str, data: bytes) -> None:
        """Appends to (and creates) a file, as a job writing its output."""
        self.files[path] = self.files.get(path, b"") + data
        self._written.set()
        self._written = asyncio.Event()

    def _refuse(self, argv: tuple[str, ...]) -> None:
        if self.down:  # as SshHost words a login node it cannot connect to
            raise BackendUnavailable(f"cannot reach {self.label}: Connection refused")
        if argv[0] in self.missing:
            raise self._missing(argv)

    async def _run(
        self, argv: tuple[str, ...], input: bytes | None, env: Mapping[str, str] | None = None
    ) -> Result:
        self.runs.append((argv, input))
        self._refuse(argv)
        if argv[0] in self.responders:
            reply = self.responders[argv[0]](argv, input)
        else:
            queue = self.replies.get(argv[0])
            assert queue, f"unexpected command {argv}"
            reply = queue.pop(0) if len(queue) > 1 else queue[0]
        return Result(argv, reply.returncode, reply.stdout, reply.stderr)

    async def _stream(self, argv: tuple[str, ...]) -> AsyncIterator[bytes]:
        self.streams.append(argv)
        self._refuse(argv)
        path = argv[-1]
        if argv[0] == "cat":
            offset = 0
        elif "-F" in " ".join(argv):
            # tail -F from byte argv[-2] (inside `sh -c`): what is there, then each write as it
            # happens, until the reader stops (the closed stdin the real command ends on).
            sent = int(argv[-2]) - 1
            while True:
                written = self._written
                data = self.files.get(path, b"")
                for i in range(sent, len(data), CHUNK):
                    yield data[i : i + CHUNK]
                sent = len(data)
                await written.wait()
        else:  # tail -c +N -- path
            offset = int(argv[2].lstrip("+")) - 1
        data = self.files.get(path, b"")
        for i in range(offset, len(data), CHUNK):
            yield data[i : i + CHUNK]

    async def close(self) -> None:
        self.closed = True


class FakeHosts(Hosts):
    """One FakeHost per target, created on first use (or placed beforehand with `put`)."""

    def __init__(self) -> None:
        super().__init__()
        self.made: dict[SshTarget | None, FakeHost] = {}

    def put(self, target: SshTarget | None, host: FakeHost) -> FakeHost:
        self.made[target] = host
        return host

    def get(self, target: SshTarget | None) -> Host:
        if target not in self.made:
            self.made[target] = FakeHost(f"fake {target or 'this host'}")
        return self.made[target]

    def calls(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for host in self.made.values():
            for program, n in host.calls.items():
                total[program] = total.get(program, 0) + n
        return total

    async def close(self) -> None:
        for host in self.made.values():
            await host.close()


def submitted(argv: tuple[str, ...], script: bytes | None, first_id: int = 5000) -> Reply:
    """What the submit script prints when every bsub in it succeeds (as bsub_three.stdout)."""
    assert script is not None
    n = sum(1 for line in script.decode().splitlines() if line.startswith("bsub "))
    lines = [f"Job <{first_id + i}> is submitted to queue <normal>.\n" for i in range(n)]
    return Reply(stdout="".join(lines).encode())


def bqueues(argv: tuple[str, ...], stdin: bytes | None) -> Reply:
    """`bqueues -w QUEUE` as LSF answers it: the header and the queue's row of bqueues.txt, or
    bqueues_no_such.stderr (with the queue's name) for a queue not there."""
    assert argv[:2] == ("bqueues", "-w") and len(argv) == 3, argv
    header, *rows = recorded("bqueues.txt").decode().splitlines(keepends=True)
    row = [r for r in rows if r.split()[0] == argv[2]]
    if not row:
        said = recorded("bqueues_no_such.stderr").decode().replace("nosuch", argv[2], 1)
        return Reply(stderr=said.encode(), returncode=255)
    return Reply(stdout=(header + row[0]).encode())


def shared_jobdirs(argv: tuple[str, ...], stdin: bytes | None) -> Reply:
    """The jobdir probe (hpc.lsf_precheck.jobdir_argv) on a login node whose shared
    filesystem lets the user write anywhere: the fake's model, not a real shell (the probe
    itself runs in a real shell in test_lsf_precheck.py)."""
    assert argv[:2] == ("sh", "-c") and argv[2].endswith('logdir "$1" "$2"'), argv
    return Reply(stdout=f"ok {argv[4]} is writable\n".encode())
