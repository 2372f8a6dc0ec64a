"""The load run of issue 12, shared by tests/load/test_load.py and `scripts/bench --only
load` (which runs it bigger): one real daemon on local_cwd, and at once

- `callers` concurrent RPC callers (Status, List, Watch), each on a connection of its own, in
  `caller_procs` processes (load_callers.py), timing every Status call;
- `followed` log streams following live jobs, each on a connection of its own, of which `slow`
  read a big log one chunk at a time with a pause after each;
- `jobs` local jobs in all (the followed ones included), the rest submitted in waves by
  `submitters` concurrent callers, each job's whole log read back once it ended.

Every job prints "job <i>\\n" and then one of a few seeded payload files (random bytes: invalid
UTF-8, lines up to `long_line` bytes, some without a last newline; the followed slow jobs a big
one), so each log is checked complete and in order by its sha256. The daemon's RSS and open fds
are sampled meanwhile. Nothing raises on a failed call: errors are counted in the Report, which
the test asserts on and the bench prints.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from txd.client import AsyncClient, TxdError
from txd.v1 import AppDef, AppState, Role
from txd_testing import Gates

CALLERS_SCRIPT = Path(__file__).with_name("load_callers.py")
PROBE_SCRIPT = Path(__file__).with_name("load_probe.py")
SLEEPER_SCRIPT = Path(__file__).with_name("load_sleeper.py")
SLEEP_PERIOD = 0.010  # s, a sleeper's sleep between wake-ups
KiB, MiB = 1 << 10, 1 << 20
PAYLOADS = 16  # distinct payloads of the ordinary jobs
BIG_PAYLOADS = 4  # distinct payloads of the slow-read jobs
SAMPLE_EVERY = 0.25  # seconds between RSS/fd samples
ERROR_SAMPLES = 20


@dataclass
class Shape:
    jobs: int = 2000
    wave: int = 250
    submitters: int = 50
    followed: int = 100
    slow: int = 20
    payload: int = 32 * KiB  # the largest ordinary payload (they range from 1 KiB to this)
    long_line: int = 80 * KiB  # a line without newline in every fourth payload
    slow_bytes: int = 8 * MiB  # the log of each slow-read job
    slow_pause: float = 0.05  # seconds a slow reader waits after each chunk
    callers: int = 200
    caller_procs: int = 4
    caller_pause: float = 0.2  # mean seconds between the starts of a caller's calls
    deadline: float = 30.0  # every unary call's, and a Watch's
    bound: float = 240.0  # the whole run's
    # One Status caller in a process of its own per entry, at that scheduling priority (nice;
    # below 0 needs root): load_probe.py. The callers above share 4 processes.
    probes: tuple[int, ...] = ()
    probe_pause: float = 0.05  # mean seconds between a probe's calls
    # One process that only sleeps per entry, at that priority (load_sleeper.py): how late the
    # machine wakes a process that waits on nothing else, the floor under any reply's time.
    sleepers: tuple[int, ...] = ()
    # The load generator's scheduling priority (nice): the caller processes' and, for the run,
    # this process's own (its submitters and followers). The probes keep theirs.
    generator_nice: int = 0
    # A diagnosis, not a setting (needs root): every thread of the daemon at this priority once
    # it has warmed up (its spawner, and so the jobs, keep theirs).
    daemon_nice: int | None = None


@dataclass
class Report:
    shape: Shape
    wall: float = 0.0
    submit_seconds: float = 0.0  # the waves' Run calls only
    checked: int = 0  # jobs whose log matched its checksum (followed streams included)
    followed_checked: int = 0
    log_bytes: int = 0  # bytes read back and checked
    mismatches: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # samples; error_count counts them all
    error_count: int = 0
    final_states: dict[str, int] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)  # by the callers, by kind
    status_latencies: list[float] = field(default_factory=list)
    probe_latencies: dict[int, list[float]] = field(default_factory=dict)  # by nice
    sleeper_lateness: dict[int, list[float]] = field(default_factory=dict)  # by nice
    rss_start_kib: int = 0
    rss_samples: list[tuple[float, int, int]] = field(default_factory=list)  # (t, KiB, fds)
    hwm_kib: int = 0  # VmHWM at the end: the peak RSS since the start
    daemon_cpu: float = 0.0  # the daemon's own CPU seconds (user + system) during the run
    # The read door's process (txd.daemon.readserver), where the daemon has one: its CPU
    # seconds during the run and its peak RSS.
    door_cpu: float = 0.0
    door_hwm_kib: int = 0

    def error(self, what: str) -> None:
        self.error_count += 1
        if len(self.errors) < ERROR_SAMPLES:
            self.errors.append(what)

    def percentile(self, p: float) -> float:
        return percentile(self.status_latencies, p)

    @property
    def peak_fds(self) -> int:
        return max((fds for _, _, fds in self.rss_samples), default=0)

    def summary(self) -> str:
        return (
            f"{self.shape.jobs} jobs in {self.wall:.1f} s ({self.checked} logs checked, "
            f"{self.log_bytes / MiB:.0f} MiB, {len(self.mismatches)} mismatched), "
            f"{self.error_count} errors; {sum(self.calls.values())} caller calls {self.calls}; "
            f"Status p50 {1000 * self.percentile(50):.1f} ms, p99 "
            f"{1000 * self.percentile(99):.1f} ms (n={len(self.status_latencies)}); "
            f"RSS at start {self.rss_start_kib / KiB:.1f} MiB, peak {self.hwm_kib / KiB:.1f} "
            f"MiB; peak fds {self.peak_fds}; daemon CPU {self.daemon_cpu:.1f} s"
            + (
                f"; read door CPU {self.door_cpu:.1f} s, peak RSS {self.door_hwm_kib / KiB:.1f} MiB"
                if self.door_hwm_kib
                else ""
            )
        )


# -- /proc -------------------------------------------------------------------------------------


def vm_kib(pid: int, key: str) -> int:
    """A /proc/<pid>/status field in KiB (VmRSS, VmHWM)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise LookupError(f"no {key} in /proc/{pid}/status")


def reset_peak_rss(pid: int) -> None:
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS


def door_pid(daemon: int) -> int | None:
    """The daemon's read door process (txd.daemon.readserver), if it runs one."""
    for tid in os.listdir(f"/proc/{daemon}/task"):
        with contextlib.suppress(OSError), open(f"/proc/{daemon}/task/{tid}/children") as f:
            for child in f.read().split():
                with open(f"/proc/{child}/cmdline", "rb") as c:
                    if b"txd.daemon.readserver" in c.read():
                        return int(child)
    return None


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of the process itself (not its children)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


# -- payloads ----------------------------------------------------------------------------------


def write_payloads(directory: Path, shape: Shape) -> tuple[list[bytes], list[bytes]]:
    """The payload files (small, then big) in directory, and their contents."""
    directory.mkdir(parents=True, exist_ok=True)
    small, big = [], []
    for k in range(PAYLOADS):
        rng = random.Random(k)
        data = rng.randbytes(KiB + k * (shape.payload - KiB) // (PAYLOADS - 1))
        if k % 4 == 1:  # a long line: no newline in it, over several 64 KiB chunks
            data += b"\xff\xfe" + rng.randbytes(shape.long_line).replace(b"\n", b"~") + b"\n"
        if k % 4 == 3:
            data = data.rstrip(b"\n") + b"no newline at the end \xc3"
        (directory / f"p{k}").write_bytes(data)
        small.append(data)
    for k in range(BIG_PAYLOADS):
        data = random.Random(1000 + k).randbytes(shape.slow_bytes)
        (directory / f"big{k}").write_bytes(data)
        big.append(data)
    return small, big


def job_app(i: int, payload: Path, gate: str = "") -> AppDef:
    """Job i: prints its header, waits for the gate when given one, then its payload."""
    script = 'printf "job %s\\n" "$1"; ' + (f"{gate}; " if gate else "") + 'exec cat "$2"'
    role = Role(name="w", entrypoint="sh", args=["-c", script, "sh", str(i), str(payload)])
    return AppDef(name="load", roles=[role])


def expected(i: int, payload: bytes) -> tuple[int, str]:
    header = f"job {i}\n".encode()
    digest = hashlib.sha256(header)
    digest.update(payload)
    return len(header) + len(payload), digest.hexdigest()


# -- the run -----------------------------------------------------------------------------------


class Load:
    def __init__(self, socket: Path, pid: int, work: Path, shape: Shape) -> None:
        self.socket, self.pid, self.work, self.shape = socket, pid, work, shape
        self.report = Report(shape)
        self.small: list[bytes] = []
        self.big: list[bytes] = []
        self.done = asyncio.Event()

    def client(self) -> AsyncClient:
        return AsyncClient(self.socket, timeout=self.shape.deadline, own_connection=True)

    async def run(self) -> Report:
        shape = self.shape
        self.small, self.big = write_payloads(self.work / "payloads", shape)
        async with self.client() as c:  # warm-up: local_cwd loaded before the baseline
            await c.wait(await c.run(job_app(-1, self.path(0))), timeout=shape.deadline)
        if shape.daemon_nice is not None:
            for tid in os.listdir(f"/proc/{self.pid}/task"):
                with contextlib.suppress(ProcessLookupError):  # a thread that has just ended
                    os.setpriority(os.PRIO_PROCESS, int(tid), shape.daemon_nice)
        t0, cpu0 = time.perf_counter(), cpu_seconds(self.pid)
        self.door = door_pid(self.pid)
        self.door_cpu0 = cpu_seconds(self.door) if self.door else 0.0
        own_nice = os.getpriority(os.PRIO_PROCESS, 0)
        if shape.generator_nice == own_nice:
            return await self._run(t0, cpu0)
        os.setpriority(os.PRIO_PROCESS, 0, shape.generator_nice)
        try:
            return await self._run(t0, cpu0)
        finally:
            os.setpriority(os.PRIO_PROCESS, 0, own_nice)  # back up needs root

    async def _run(self, t0: float, cpu0: float) -> Report:
        shape, rep = self.shape, self.report
        loop = asyncio.get_running_loop()
        procs = await self.start_callers()
        probes = await self.start_probes()
        sampler = loop.create_task(self.sample(t0))
        try:
            async with asyncio.timeout(shape.bound):
                with Gates(self.work) as gates:
                    await asyncio.gather(self.follow_all(gates), self.waves())
        except TimeoutError:
            rep.error(f"the run did not finish within {shape.bound} s")
        finally:
            self.done.set()
            await self.stop_callers(procs)
            await self.stop_probes(probes)
            await sampler
            rep.wall = time.perf_counter() - t0
            rep.hwm_kib = vm_kib(self.pid, "VmHWM")
            rep.daemon_cpu = cpu_seconds(self.pid) - cpu0
            if self.door:
                with contextlib.suppress(OSError, LookupError):  # it ended meanwhile
                    rep.door_cpu = cpu_seconds(self.door) - self.door_cpu0
                    rep.door_hwm_kib = vm_kib(self.door, "VmHWM")
        return rep

    async def sample(self, t0: float) -> None:
        while not self.done.is_set():
            with contextlib.suppress(OSError, LookupError):
                self.report.rss_samples.append(
                    (time.perf_counter() - t0, vm_kib(self.pid, "VmRSS"), open_fds(self.pid))
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.done.wait(), SAMPLE_EVERY)

    # callers

    async def start_callers(self) -> list[asyncio.subprocess.Process]:
        """The caller processes, once each has every caller connected; the daemon's peak RSS
        is measured from then on (its baseline includes their connections)."""
        shape = self.shape
        procs = await start_callers(
            self.socket, shape.callers, shape.caller_procs, shape.caller_pause, shape.deadline,
            shape.bound + shape.deadline, nice=shape.generator_nice,
        )  # fmt: skip
        self.report.rss_start_kib = vm_kib(self.pid, "VmRSS")
        reset_peak_rss(self.pid)
        return procs

    async def stop_callers(self, procs: list[asyncio.subprocess.Process]) -> None:
        rep = self.report
        rep.calls, rep.status_latencies, count, errors = await stop_callers(
            procs, 2 * self.shape.deadline
        )
        rep.error_count += count
        rep.errors += errors[: ERROR_SAMPLES - len(rep.errors)]

    async def start_probes(self) -> list[asyncio.subprocess.Process]:
        """The probes, then the sleepers (Shape.probes, Shape.sleepers), each once running."""
        shape = self.shape
        probes = [
            (PROBE_SCRIPT, self.socket, nice, k, shape.probe_pause, shape.deadline, shape.bound)
            for k, nice in enumerate(shape.probes)
        ]
        sleepers = [(SLEEPER_SCRIPT, nice, SLEEP_PERIOD, shape.bound) for nice in shape.sleepers]
        procs = []
        for script, *args in probes + sleepers:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, str(script), *map(str, args),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            )  # fmt: skip
            procs.append(proc)
            assert proc.stdout is not None
            async with asyncio.timeout(shape.deadline):
                line = await proc.stdout.readline()
            if line != b"ready\n":
                raise RuntimeError(f"{script.name} did not start: {line!r}")
        return procs

    async def stop_probes(self, procs: list[asyncio.subprocess.Process]) -> None:
        rep, shape = self.report, self.shape
        for p in procs:
            assert p.stdin is not None
            p.stdin.close()
        kinds = [("probe", n) for n in shape.probes] + [("sleeper", n) for n in shape.sleepers]
        for (kind, nice), p in zip(kinds, procs, strict=True):
            assert p.stdout is not None
            try:
                async with asyncio.timeout(2 * shape.deadline):
                    out = json.loads(await p.stdout.read())
                    await p.wait()
            except (TimeoutError, ValueError) as e:
                rep.error(f"a {kind} process did not report: {e!r}")
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
                await p.wait()
                continue
            if kind == "sleeper":
                rep.sleeper_lateness[nice] = out["lateness"]
                continue
            rep.probe_latencies[nice] = out["status_latencies"]
            for e in out["errors"]:
                rep.error(f"probe (nice {nice}): {e}")

    # followed jobs

    async def follow_all(self, gates: Gates) -> None:
        """`followed` jobs that print their header and wait on one gate: each gets a follower,
        and once every follower has the header the gate lets all the jobs go on."""
        shape = self.shape
        gate = gates.new("follow")
        following = asyncio.Event()
        started = 0

        def on_first_chunk() -> None:
            nonlocal started
            started += 1
            if started == shape.followed:
                following.set()

        async def open_gate() -> None:
            await following.wait()
            for _ in range(shape.followed):
                gate.open()

        jobs = []
        async with self.client() as c:
            for i in range(shape.followed):
                slow = i < shape.slow
                payloads = self.big if slow else self.small
                k = i % len(payloads)
                path = self.work / "payloads" / (f"big{k}" if slow else f"p{k}")
                try:
                    handle = await c.run(job_app(i, path, gate.wait))
                except TxdError as e:
                    self.report.error(f"Run (followed job {i}): {e}")
                    following.set()  # no follower will wait for it: do not hold the others
                    continue
                jobs.append((handle, i, payloads[k], slow))
        opener = asyncio.get_running_loop().create_task(open_gate())
        try:
            await asyncio.gather(*(self.follow(*job, on_first_chunk) for job in jobs))
        finally:
            opener.cancel()

    async def follow(
        self, handle: str, i: int, payload: bytes, slow: bool, on_first_chunk: Any
    ) -> None:
        size, digest = 0, hashlib.sha256()
        first = True
        async with self.client() as c:
            try:
                async for chunk in c.logs(handle, follow=True):
                    size += len(chunk.data)
                    digest.update(chunk.data)
                    if first:
                        first = False
                        on_first_chunk()
                    if slow:
                        await asyncio.sleep(self.shape.slow_pause)  # a slow reader
            except TxdError as e:
                self.report.error(f"Logs -f {handle}: {e}")
                return
            finally:
                if first:  # no chunk came: do not hold the others' gate
                    on_first_chunk()
            await self.check(c, handle, i, payload, (size, digest.hexdigest()), followed=True)

    # the waves

    async def waves(self) -> None:
        shape = self.shape
        sem = asyncio.Semaphore(shape.submitters)
        clients = [self.client() for _ in range(shape.submitters)]
        todo = list(range(shape.followed, shape.jobs))

        async def submit(k: int, i: int) -> tuple[str, int] | None:
            async with sem:
                try:
                    return await clients[k % len(clients)].run(job_app(i, self.path(i))), i
                except TxdError as e:
                    self.report.error(f"Run (job {i}): {e}")
                    return None

        async def finish(k: int, handle: str, i: int) -> None:
            async with sem:
                c = clients[k % len(clients)]
                try:
                    status = await c.wait(handle, timeout=self.shape.deadline)
                    got = await read_log(c, handle)
                except TxdError as e:
                    self.report.error(f"Wait/Logs {handle}: {e}")
                    return
                self.count_state(status.state)
                await self.check(c, handle, i, self.small[i % PAYLOADS], got)

        try:
            for start in range(0, len(todo), shape.wave):
                wave = todo[start : start + shape.wave]
                t0 = time.perf_counter()
                runs = await asyncio.gather(*(submit(k, i) for k, i in enumerate(wave)))
                self.report.submit_seconds += time.perf_counter() - t0
                submitted = [r for r in runs if r is not None]
                await asyncio.gather(*(finish(k, h, i) for k, (h, i) in enumerate(submitted)))
        finally:
            for c in clients:
                await c.close()

    def path(self, i: int) -> Path:
        return self.work / "payloads" / f"p{i % PAYLOADS}"

    def count_state(self, state: int) -> None:
        name = AppState.Name(state)
        self.report.final_states[name] = self.report.final_states.get(name, 0) + 1

    async def check(
        self,
        c: AsyncClient,
        handle: str,
        i: int,
        payload: bytes,
        got: tuple[int, str],
        followed: bool = False,
    ) -> None:
        rep = self.report
        if followed:  # the stream ended: the job has, or is about to
            try:
                self.count_state((await c.wait(handle, timeout=self.shape.deadline)).state)
            except TxdError as e:
                rep.error(f"Wait {handle}: {e}")
        want = expected(i, payload)
        if got != want:
            rep.mismatches.append(f"{handle} (job {i}): {got[0]} bytes, expected {want[0]}")
            return
        rep.checked += 1
        rep.followed_checked += followed
        rep.log_bytes += got[0]


async def start_callers(
    socket: Path,
    callers: int,
    nprocs: int,
    pause: float,
    deadline: float,
    max_seconds: float,
    gone_ok: bool = False,
    nice: int = 0,
) -> list[asyncio.subprocess.Process]:
    """`callers` RPC callers in `nprocs` processes (load_callers.py), once all are connected.
    gone_ok: jobs are deleted meanwhile, a job gone is no error. nice: their priority."""
    per = -(-callers // nprocs)
    procs = []
    for k in range(nprocs):
        n = min(per, callers - k * per)
        args = (socket, n, k, pause, deadline, max_seconds, int(gone_ok), nice)
        procs.append(
            await asyncio.create_subprocess_exec(
                sys.executable,
                str(CALLERS_SCRIPT),
                *map(str, args),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
        )
    async with asyncio.timeout(deadline):
        for p in procs:
            assert p.stdout is not None
            line = await p.stdout.readline()
            if line != b"ready\n":
                raise RuntimeError(f"a caller process did not start: {line!r}")
    return procs


async def stop_callers(
    procs: list[asyncio.subprocess.Process], timeout: float
) -> tuple[dict[str, int], list[float], int, list[str]]:
    """Stops the caller processes: their calls by kind, Status latencies, the number of
    errors and a sample of them (a process that did not report counts as one)."""
    calls: dict[str, int] = {}
    latencies: list[float] = []
    errors: list[str] = []
    count = 0
    for p in procs:
        assert p.stdin is not None
        p.stdin.close()
    for p in procs:
        assert p.stdout is not None
        try:
            async with asyncio.timeout(timeout):
                out = json.loads(await p.stdout.read())
                await p.wait()
        except (TimeoutError, ValueError) as e:
            errors.append(f"a caller process did not report: {e!r}")
            count += 1
            with contextlib.suppress(ProcessLookupError):
                p.kill()
            await p.wait()
            continue
        for kind, n in out["calls"].items():
            calls[kind] = calls.get(kind, 0) + n
        latencies += out["status_latencies"]
        count += out["errors"]
        errors += out["error_samples"]
    return calls, latencies, count, errors


def percentile(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] if xs else float("nan")


async def read_log(c: AsyncClient, handle: str) -> tuple[int, str]:
    """A whole log's size and sha256."""
    size, digest = 0, hashlib.sha256()
    async for chunk in c.logs(handle):
        size += len(chunk.data)
        digest.update(chunk.data)
    return size, digest.hexdigest()


async def run_load(socket: Path, pid: int, work: Path, shape: Shape) -> Report:
    """Runs the load on the daemon `pid` serving `socket`; work: a directory for payloads."""
    return await Load(socket, pid, work, shape).run()
