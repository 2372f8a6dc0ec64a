"""The benchmark behind `scripts/bench`: txd against the targets of issue 2, side by side with
TorchX where a peer exists.

    .venv/bin/python scripts/bench [--quick] [--out docs/performance.md] [--only NAME,...]

Starts its own daemon (`python -m txd.daemon` on a temporary socket and state dir), measures,
prints a table (figure, target, met?) and stops the daemon with SIGTERM. Areas (--only), one
module each under areas/:

  cli     `txctl run --wait utils.echo` vs `torchx run -s local_cwd utils.echo` (TorchX 0.7
          in its own venv, .torchx-venv, made by scripts/torchx-venv when missing), and
          `txctl status` wall time
  submit  local_cwd submissions/s through AsyncClient with 50 concurrent callers (state dir in
          the temp dir, and again on tmpfs /dev/shm to separate daemon cost from filesystem cost)
  logs    a finished job's 2,000,000 x 100-byte-line log read by AsyncClient.logs vs `cat`;
          one 100 MiB line on fresh daemons: `txctl logs --tail 1` (daemon peak RSS), --regex
          of a needle at its middle and of a pattern that cannot match (with --base-tree,
          the base's daemon beside, interleaved)
  latency job end (its last timestamp) -> terminal status arriving at a client blocked in Wait,
          and at a client watching (the watch door and the socket, in turns)
  rss     daemon VmRSS while it tracks 10,000 finished jobs (fresh daemon; 1,000 with --quick)
  watchmem daemon VmRSS per open Watch stream, 100 clients x 250 running jobs (25,000 streams;
          1,000 with --quick) at the watch door, beside the base commit's daemon
          (--base-tree); the same daemon at its socket (grpcio), and a bare grpc.aio server
          (grpcio's own floor)
  events  the events stream over a job store filled with 100,000 status changes (10,000 with
          --quick): replayed events/s to one subscriber (all of them) and to 100 at once (the
          newest 10,000 each); job store bytes per event;
          job end -> event at a following subscriber
  eventsize  the job store's bytes per status change of 400 real local_cwd jobs (100 with
          --quick), read with SQLite's dbstat, and per event of a pruned job
  dashboard  `txctl dashboard` in Debian's headless Chromium over a job store of 10,000 jobs:
          first contentful paint, DOMContentLoaded and the whole table on screen (read from
          the browser's timeline); a job's state change committed -> its row shown (median
          and p95, goal under 100 ms; read in the browser)
  slurm   on a real Slurm test cluster (scripts/slurm-up): submit -> RUNNING through txctl vs
          plain sbatch + squeue polled at the same interval, and squeue calls per minute with
          1, 10 and 100 clients watching
  docker  local_docker on a dockerd of its own (docker_testing.Engine): submit -> RUNNING
          through AsyncClient and txctl against `docker run -d` + `docker inspect` (goal: at
          most 1.15x through AsyncClient), with --base-tree an older commit's daemon and txctl
          beside this tree's, interleaved; die event -> Wait; engine calls while clients watch;
          runs with a 1,000-file workspace
  k8s     kubernetes on a real single-node cluster of its own (docker_testing.Engine +
          k8s_testing.Cluster): API requests per minute (txd's count and the apiserver's
          /metrics) while 1, 10 and 100 clients watch 10 and 100 jobs, next to TorchX's describe
          polling; pod end -> client in Wait notified; submit -> pods Running, `txctl run` vs
          `kubectl create -f`
  aws     aws_batch on a moto_server of its own (moto_testing.Moto; no Docker: the jobs stay
          SUBMITTED): describe_jobs calls per minute (txd's count and moto's access log) while
          1, 10 and 100 clients watch 10 and 250 jobs, next to TorchX's per-job describe polling
  load    the load test's run (tests/load/load_testing.py), bigger: 5,000 local jobs, 200
          callers, 100 followed logs (20 read slowly, 16 MiB each); every log checked by
          sha256; Status p50/p99, peak RSS and fds, jobs/s (--quick: the test's 2,000 jobs)
  tcp     one daemon serving its Unix socket and a TCP listener (TLS, a token): Status through
          a warm client and a `txctl status` process by each door, interleaved; the time to
          refuse a wrong token sharing 40 characters with a real one vs one sharing none
  socket  a fresh daemon's socket folder removed -> it answers there again (goal: 2 s; it
          checks every second), and `txctl where` wall time
  soak    only when named: --soak-minutes (10) of submissions (followed, cancelled, failed,
          each deleted after) at --soak-rate jobs/s beside 20 callers; RSS and open fds
          sampled every 10 s, their slope over the second half flagged when it grows

Side by side with an older commit: `--base-tree TREE` (a worktree of it with its own .venv, by
`scripts/setup dev` there) has submit, rss, load, docker, logs and watchmem also measure that
tree, the two sides in turn (--base-runs each in submit, rss and load), and print its figures
beside ours (sidebyside.py). E.g.
`git worktree add --detach ../base-49ae975 49ae975 && ../base-49ae975/scripts/setup dev`, then
`.venv/bin/python scripts/bench --only submit,rss --base-tree ../base-49ae975`.

The daemons, engines and servers are the test suite's harnesses (txd_testing.Daemon,
docker_testing, k8s_testing, moto_testing, load_testing), found through harnesses.DIRS.

The "others' CPU" column is the share of the machine's CPU used, while that figure was measured,
by processes other than this benchmark, its daemons, jobs and CLIs: a gauge of noise.
With --out FILE the machine and table are written between the `bench:begin/end` markers of FILE
(created when missing; text outside the markers is kept). Every loop and wait is bounded.
"""

from benchmarks.harnesses import add_to_path

add_to_path()  # before any module of the package imports a harness
