"""The test tiers: which tests need which engine, and the runner scripts/test calls.

Every test belongs to one tier, by its folder (`tier_of`; tests/conftest.py marks each test
with it). The tiers need different engines (a Slurm cluster, a dockerd and registry, the test
Kubernetes on that dockerd, moto whose Batch runs on that dockerd), and each runs as a pytest
process of its own (`pytest -m TIER`), so that no engine waits on another's tests:

    python tests/tiers.py [--tier NAME] [PYTEST_ARGS...]

runs the tiers in lanes, in parallel when two cores allow (LANES), each lane's tiers one after
the other. The tiers of the dockerd lane share one dockerd and one registry, started here once
(fixtures honour TXD_TEST_DOCKER_* and TXD_TEST_REGISTRY*; run alone, a tier starts its own).
Each tier's output goes to its own log, printed whole when the tier ends (no interleaving),
followed by its wall time; every tier runs with --durations=25. At the end: one table of wall
times and outcomes, then the line `N passed, N failed, N skipped` (summed over the tiers; CI
reads it). Exits 1 if any tier failed. Everything started here is stopped by pid on exit,
Ctrl-C included.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

# A test's tier, by its folder under tests/ (the first prefix that matches). A backend family's
# folder is one tier, its offline tests included; lsf's LSF is simulated: unit.
TIERS = (
    ("schedulers/hpc/slurm/", "slurm"),
    ("schedulers/docker/", "docker"),
    ("schedulers/kubernetes/", "kubernetes"),
    ("schedulers/aws/", "aws"),
    ("schedulers/local/", "daemon"),
    ("integration/", "daemon"),
    ("compat/", "daemon"),
    ("load/", "daemon"),
    ("remote/", "remote"),
    ("dashboard/", "dashboard"),
    ("", "unit"),
)
NAMES = ("unit", "daemon", "slurm", "docker", "aws", "kubernetes", "remote", "dashboard")
# The session fixtures that start an engine, and the tiers whose process may start it.
ENGINES = {
    "slurm_cluster": ("slurm",),
    "docker_engine": ("docker", "aws", "kubernetes"),
    "k8s_cluster": ("kubernetes",),
    "moto": ("aws",),
}
# Two lanes at once on two cores, each lane's tiers one after the other. The dockerd tiers of a
# lane share one dockerd and registry (a docker test restarts the engine, and each tier removes
# every container when it ends: two lanes cannot share one). kubernetes, the longest tier, has a
# lane of its own, with its cluster's kubelet on a dockerd of its own; the other lane holds the
# rest. One core: a single lane of them all, every dockerd tier on one engine.
LANES = (("unit", "kubernetes", "remote"), ("daemon", "docker", "aws", "slurm", "dashboard"))
ON_DOCKERD = set(ENGINES["docker_engine"])
DURATIONS = "--durations=25"
# How long a tier's pytest may take to tear its engines down after Ctrl-C.
STOP_GRACE = 60.0


def tier_of(path: Path) -> str:
    rel = path.resolve().relative_to(HERE).as_posix()
    return next(tier for prefix, tier in TIERS if rel.startswith(prefix))


@dataclass
class Result:
    tier: str
    lane: int
    log: Path
    wall: float = 0.0
    rc: int | None = None
    counts: dict[str, int] = field(default_factory=dict)
    failed: bool = True


SUMMARY = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)")


def counts_of(log: str) -> dict[str, int]:
    """The counts of pytest's last summary line (`== 3 passed, 1 skipped in 2.0s ==`)."""
    lines = [line for line in log.splitlines() if re.match(r"^=+ .* in [\d.]+s", line)]
    found = {k: int(n) for n, k in SUMMARY.findall(lines[-1])} if lines else {}
    return {
        "passed": found.get("passed", 0) + found.get("xpassed", 0),
        "failed": found.get("failed", 0) + found.get("error", 0) + found.get("errors", 0),
        "skipped": found.get("skipped", 0) + found.get("xfailed", 0),
    }


class Runner:
    def __init__(self, tiers: list[str], pytest_args: list[str], logs: Path) -> None:
        self.tiers = tiers
        self.pytest_args = pytest_args
        self.logs = logs
        self.printing = threading.Lock()
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.stopping = threading.Event()
        self.results: list[Result] = []

    def lanes(self) -> list[list[str]]:
        lanes = [[t for t in lane if t in self.tiers] for lane in LANES]
        lanes = [lane for lane in lanes if lane]
        if (os.cpu_count() or 1) < 2:
            return [[t for lane in lanes for t in lane]]
        return lanes

    def run_tier(self, tier: str, lane: int, env: dict[str, str]) -> Result:
        result = Result(tier, lane, self.logs / f"{tier}.log")
        argv = [str(REPO / ".venv/bin/pytest"), "-m", tier, DURATIONS, *self.pytest_args]
        start = time.monotonic()
        with result.log.open("wb") as out:
            # A session of its own: a Ctrl-C reaches it through this runner, which lets its
            # engines stop in order (see stop()).
            proc = subprocess.Popen(
                argv,
                cwd=REPO,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            self.procs[tier] = proc
            if self.stopping.is_set():  # Ctrl-C came as it started
                os.kill(proc.pid, signal.SIGINT)
            result.rc = proc.wait()
        result.wall = time.monotonic() - start
        text = result.log.read_text(errors="replace")
        result.counts = counts_of(text)
        # 5: no test collected, a failure only when the tier was to run all of its tests.
        result.failed = result.rc not in (0, 5) or (result.rc == 5 and not self.pytest_args)
        with self.printing:
            print(f"\n===== tier {tier} (lane {lane + 1}): {result.log} =====", flush=True)
            sys.stdout.write(text)
            outcome = "FAILED" if result.failed else "ok"
            print(
                f"===== tier {tier}: {result.wall:.1f} s, exit {result.rc}, {outcome}", flush=True
            )
        return result

    def run_lane(self, lane: int, tiers: list[str]) -> None:
        env = dict(os.environ)
        with self.shared_dockerd(tiers, env):
            for tier in tiers:
                if self.stopping.is_set():
                    return
                self.results.append(self.run_tier(tier, lane, env))

    def run(self) -> int:
        start = time.monotonic()
        lanes = self.lanes()
        threads = [
            threading.Thread(target=self.run_lane, args=(i, lane)) for i, lane in enumerate(lanes)
        ]
        for t in threads:
            t.start()
        try:
            for t in threads:
                while t.is_alive():
                    t.join(0.5)
        except KeyboardInterrupt:
            self.stop()
            for t in threads:  # each lane stops its shared engine
                t.join()
            raise
        return self.report(time.monotonic() - start, lanes)

    def stop(self) -> None:
        """Ctrl-C: SIGINT to every running pytest (it tears its fixtures down, engines
        included), then SIGKILL to the process group of any that has not exited in time."""
        self.stopping.set()
        running = [p for p in self.procs.values() if p.poll() is None]
        for p in running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGINT)
        deadline = time.monotonic() + STOP_GRACE
        for p in running:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()

    @contextlib.contextmanager
    def shared_dockerd(self, tiers: list[str], env: dict[str, str]) -> Iterator[None]:
        """One dockerd and one registry for the dockerd tiers of a lane, when it has several,
        handed to them through `env`; stopped by pid (scripts/docker-down, registry-down) when
        the lane ends."""
        if len([t for t in tiers if t in ON_DOCKERD]) < 2:
            yield
            return
        engine = Path(tempfile.mkdtemp(prefix="txd-docker-", dir="/tmp"))
        registry = Path(tempfile.mkdtemp(prefix="txd-registry-", dir="/tmp"))
        own = {**os.environ, "TXD_DOCKER_OWNER": str(os.getpid())}
        try:
            up = _script("docker-up", engine, own)
            reg = _script("registry-up", registry, own) if up is not None else None
            if up is not None and reg is not None:
                env.update(
                    TXD_TEST_DOCKER_RUN=str(engine),
                    TXD_TEST_DOCKER_HOST=_exported(up, "DOCKER_HOST"),
                    TXD_TEST_DOCKER_OWNER=str(os.getpid()),
                    TXD_TEST_REGISTRY_RUN=str(registry),
                    TXD_TEST_REGISTRY=_exported(reg, "REGISTRY"),
                )
            yield
        finally:
            _script("registry-down", registry, own)
            _script("docker-down", engine, own)
            for d in (engine, registry):
                subprocess.run(["rm", "-rf", str(d)], check=False)

    def report(self, wall: float, lanes: list[list[str]]) -> int:
        order = {t: i for i, t in enumerate(t for lane in lanes for t in lane)}
        results = sorted(self.results, key=lambda r: order[r.tier])
        total = {"passed": 0, "failed": 0, "skipped": 0}
        print(f"\n{'tier':<11} {'lane':>4} {'wall':>8}  {'outcome':<8} passed failed skipped")
        for r in results:
            for k in total:
                total[k] += r.counts.get(k, 0)
            outcome = "FAILED" if r.failed else "ok"
            print(
                f"{r.tier:<11} {r.lane + 1:>4} {r.wall:>7.1f}s  {outcome:<8} "
                f"{r.counts['passed']:>6} {r.counts['failed']:>6} {r.counts['skipped']:>7}"
            )
        missing = [t for lane in lanes for t in lane if t not in {r.tier for r in results}]
        for t in missing:
            print(f"{t:<11} {'':>4} {'':>8}  not run")
        print(
            f"{'all':<11} {'':>4} {wall:>7.1f}s  ({len(lanes)} lane(s) on {os.cpu_count()} cores)"
        )
        print(f"{total['passed']} passed, {total['failed']} failed, {total['skipped']} skipped")
        return 1 if missing or any(r.failed for r in results) else 0


def _script(name: str, run_dir: Path, env: dict[str, str]) -> str | None:
    proc = subprocess.run(
        [str(REPO / "scripts" / name), str(run_dir)], env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        print(f"scripts/{name} {run_dir}: exit {proc.returncode}\n{proc.stderr}", flush=True)
        return None
    return proc.stdout


def _exported(stdout: str, name: str) -> str:
    m = re.search(rf"^export {name}=(\S+)$", stdout, re.MULTILINE)
    assert m, f"no `export {name}=...` in:\n{stdout}"
    return m.group(1)


def main(argv: list[str]) -> int:
    tiers = list(NAMES)
    if argv[:1] == ["--tier"] and len(argv) > 1:
        tiers, argv = argv[1].split(","), argv[2:]
    elif argv[:1] and argv[0].startswith("--tier="):
        tiers, argv = argv[0].partition("=")[2].split(","), argv[1:]
    unknown = [t for t in tiers if t not in NAMES]
    if unknown:
        print(f"unknown tier {', '.join(unknown)}: the tiers are {', '.join(NAMES)}")
        return 2
    logs = Path(tempfile.mkdtemp(prefix="txd-test-logs-"))
    runner = Runner(tiers, argv, logs)
    # SIGTERM (CI cancelling the job) as Ctrl-C: the tiers' engines are stopped either way.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started in the background
    try:
        rc = runner.run()
    except KeyboardInterrupt:
        print("\ninterrupted: every tier stopped", flush=True)
        rc = 130
    # Every log was printed above; the files stay only to look into a run that did not pass.
    if rc == 0:
        shutil.rmtree(logs, ignore_errors=True)
    else:
        print(f"the tiers' logs are kept in {logs}", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
