"""A tiny LSF, played on a FakeHost: a test double for the contract suite over lsf (no LSF can be
installed here). It answers the commands lsf.py runs in the formats of recorded/ and keeps each
job's state; its jobs do what a suite Script says instead of running docker.

- `/bin/bash -s` with a submit script (lsf_script.build_request): every `bsub ... << 'EOF'` block is
  read back (-P, -J, -q, -m, -w started("..."), -R select[hname!='...']); the docker command
  of its body must be `--entrypoint ENTRYPOINT` with `script_args` arguments, and its
  `> out 2> err` redirections are where the job writes. Answers one "Job <id> is submitted to
  (default) queue <q>." line per bsub, as bsub_three.stdout / bsub_default_queue.stdout.
- `bjobs -noheader [-a] -o "<fields> delimiter='|'"`: rows as bjobs_apps.stdout, in the
  fields asked for; "No job found" (bjobs_no_job.stderr) when there is none.
- `bkill <id>...`: bkill_terminated.stdout's line for a live job, bkill_finished.stderr's for an
  ended one, "No matching job found" (lsf_status.NO_JOB's wording; not recorded) for an unknown id.
- `bhosts`: recorded/bhosts.txt.

Time is mbatchd's scheduling cycle, run once per bjobs call (the scheduler's poll is the clock),
so no sleep decides anything. A cycle, from the states it starts with: a job bkilled before the
previous cycle ends EXIT 130 (for one cycle bjobs still shows it, as LSF may while the signal is
on its way, and bkill says "being terminated" again); a running job that does not block, or was
released, writes the Script's `then` and ends DONE, or EXIT with its exit code; a pending job
whose `started(...)` dependency holds starts on its host and writes `first`. Not modelled:
queues' limits, suspension, requeues, LSF forgetting finished jobs (CLEAN_PERIOD).
"""

from __future__ import annotations

import base64
import itertools
import re
import shlex
import zlib
from dataclasses import dataclass

from lsf_fakes import FakeHost, Reply, bqueues, recorded, shared_jobdirs
from txd.schedulers.testing import Output, Script

ENTRYPOINT = "txd-contract-job"
_STARTED = re.compile(r'^started\("([^"]+)"\)$')
_NOT_ON = re.compile(r"hname!='([^']+)'")
# bhosts.txt's hosts with job slots, in its order (the first is the rank-0 host lsf picks).
HOSTS = [f[0] for f in map(str.split, recorded("bhosts.txt").decode().splitlines()) if f[1] != "0"]


def script_args(script: Script) -> list[str]:
    """The role args that make a simulated job play `script`: key=value words, bytes compressed
    (shlex, which reads the script back, is slow on long words) in base64 (which no shell,
    docker or LSF touches)."""
    b64 = {
        "first.out": script.first.stdout,
        "first.err": script.first.stderr,
        "then.out": script.then.stdout,
        "then.err": script.then.stderr,
    }
    words = [f"{k}={base64.b64encode(zlib.compress(v)).decode()}" for k, v in b64.items()]
    return [*words, f"block={int(script.block)}", f"exit={script.exit_code}"]


def _script_of(args: list[str]) -> Script:
    kv = dict(a.split("=", 1) for a in args)

    def data(key: str) -> bytes:
        return zlib.decompress(base64.b64decode(kv[key]))

    def out(stage: str) -> Output:
        return Output(data(f"{stage}.out"), data(f"{stage}.err"))

    block, code = kv["block"] == "1", int(kv["exit"])
    return Script(first=out("first"), block=block, then=out("then"), exit_code=code)


@dataclass
class SimJob:
    job_id: int
    project: str
    name: str
    after: str | None  # the job name of -w started("...")
    host: str  # where it starts
    script: Script
    out: str | None  # where the body's stdout / stderr go (no jobdir: nowhere we read)
    err: str | None
    stat: str = "PEND"
    exec_host: str = "-"  # until it starts
    exit_code: str = "-"  # bjobs shows "-" unless the job exited non-zero
    killed: bool = False
    dying: bool = False  # killed, and one cycle has passed
    released: bool = False


class LsfSim:
    def __init__(self, host: FakeHost, first_id: int = 4101) -> None:
        self.host = host
        self.jobs: dict[int, SimJob] = {}
        self._ids = itertools.count(first_id)
        host.reply("bhosts", Reply(recorded("bhosts.txt")))
        host.respond("/bin/bash", self._bash)
        host.respond("bjobs", self._bjobs)
        host.respond("bkill", self._bkill)
        host.respond("bqueues", bqueues)
        host.respond("sh", shared_jobdirs)

    def release(self, project: str) -> None:
        """Lets the blocking jobs of an app go on at the next cycle."""
        for job in self.jobs.values():
            if job.project == project:
                job.released = True

    # -- the commands ---------------------------------------------------------------------

    def _bash(self, argv: tuple[str, ...], stdin: bytes | None) -> Reply:
        assert argv == ("/bin/bash", "-s") and stdin is not None, argv
        lines = iter(stdin.decode().split("\n"))
        said = []
        for line in lines:
            words = shlex.split(line, comments=True)
            if not words or words[0] == "set" or words[:3] == ["mkdir", "-p", "--"]:
                continue
            assert words[0] == "bsub" and words[-2] == "<<", f"not a line lsf_script writes: {line}"
            body = "\n".join(iter(lines.__next__, words[-1]))  # the here-document
            opts = _options(words[1:-2])
            job = self._bsub(opts, shlex.split(body))
            queue = f"queue <{opts['-q']}>" if "-q" in opts else "default queue <normal>"
            said.append(f"Job <{job.job_id}> is submitted to {queue}.")
        return Reply(_lines(said))

    def _bsub(self, opts: dict[str, str], body: list[str]) -> SimJob:
        out = err = None
        if body[-4::2] == [">", "2>"]:
            out, err, body = body[-3], body[-1], body[:-4]
        assert body[:2] == ["docker", "run"], body
        assert body[body.index("--entrypoint") + 1] == ENTRYPOINT, "not a simulator job"
        excluded = _NOT_ON.findall(opts.get("-R", ""))
        dep = _STARTED.match(opts.get("-w", ""))
        job = SimJob(
            job_id=next(self._ids),
            project=opts["-P"],
            name=opts["-J"],
            after=dep[1] if dep else None,
            host=opts.get("-m") or next(h for h in HOSTS if h not in excluded),
            script=_script_of(body[body.index("--rm") + 2 :]),
            out=out,
            err=err,
        )
        self.jobs[job.job_id] = job
        return job

    def _bjobs(self, argv: tuple[str, ...], stdin: bytes | None) -> Reply:
        assert "-noheader" in argv, argv
        self._cycle()
        spec = argv[argv.index("-o") + 1]
        fields, _, delim = spec.partition(" delimiter=")
        sep = delim.strip("'") or " "
        shown = [j for j in self.jobs.values() if "-a" in argv or j.stat not in ("DONE", "EXIT")]
        if not shown:
            return Reply(stderr=recorded("bjobs_no_job.stderr"))
        rows = [sep.join(_field(j, f) for f in fields.split()) for j in shown]
        return Reply(_lines(rows))

    def _bkill(self, argv: tuple[str, ...], stdin: bytes | None) -> Reply:
        out, err = [], []
        for word in argv[1:]:
            job = self.jobs.get(int(word))
            if job is None:
                err.append(f"Job <{word}>: No matching job found")
            elif job.stat in ("DONE", "EXIT"):
                err.append(f"Job <{word}>: Job has already finished")
            else:
                job.killed = True
                out.append(f"Job <{word}> is being terminated")
        return Reply(_lines(out), _lines(err), returncode=255 if err else 0)

    # -- the scheduling cycle -------------------------------------------------------------

    def _cycle(self) -> None:
        started = {j.name for j in self.jobs.values() if j.stat != "PEND"}
        for job in self.jobs.values():
            if job.stat in ("DONE", "EXIT"):
                continue
            if job.dying:  # by bkill's SIGINT: 128 + 2 (a pending job too, for simplicity)
                job.stat, job.exit_code = "EXIT", "130"
            elif job.killed:
                job.dying = True
            elif job.stat == "RUN" and (job.released or not job.script.block):
                self._write(job, job.script.then)
                code = job.script.exit_code
                job.stat, job.exit_code = ("EXIT", str(code)) if code else ("DONE", "-")
            elif job.stat == "PEND" and (job.after is None or job.after in started):
                job.stat, job.exec_host = "RUN", job.host
                self._write(job, job.script.first)

    def _write(self, job: SimJob, output: Output) -> None:
        if job.out is not None and job.err is not None:
            self.host.write(job.out, output.stdout)
            self.host.write(job.err, output.stderr)


def _options(words: list[str]) -> dict[str, str]:
    """bsub's options (each takes a value); a repeated -R is joined with spaces."""
    opts: dict[str, str] = {}
    for flag, value in zip(words[::2], words[1::2], strict=True):
        opts[flag] = f"{opts[flag]} {value}" if flag in opts else value
    return opts


def _lines(said: list[str]) -> bytes:
    return "".join(f"{s}\n" for s in said).encode()


def _field(job: SimJob, name: str) -> str:
    values = {
        "jobid": str(job.job_id),
        "proj_name": job.project,
        "stat": job.stat,
        "exit_code": job.exit_code,
        "exec_host": job.exec_host,
        "job_name": job.name,
    }
    return values[name]
