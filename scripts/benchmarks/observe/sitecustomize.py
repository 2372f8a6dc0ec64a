"""The bench's look inside a daemon (ours or a --base-tree's), with no change to its code: this
folder goes first on the daemon's PYTHONPATH, so Python imports this module at start-up. With
TXD_BENCH_OBSERVE=FILE set (and taken out of the environment, so the daemon's children do not
observe themselves) it records, and writes to FILE as JSON when the daemon exits:

- `status`: every Status call's time in the daemon: from the gRPC server taking the call
  (the interceptor runs) to the handler starting, and the handler's own time, in ms;
- `probe`: for each Status call carrying `txd-bench-sent: NICE MONOTONIC` (load_probe.py's),
  [nice, ms from the probe sending it to gRPC taking it, ms from then to the handler's end];
- `taken`: the time.monotonic() of every call gRPC took (any method), to see how fast the
  server takes calls while some wait;
- `gc`: every cyclic GC pause (generation, ms, its end's time.monotonic()); `heap`: the
  objects the GC tracks after each full collection;
- `lag`: the event loop's lateness, sampled every 10 ms by a timer callback, in ms, with the
  main thread's CPU time and its wait on a run queue (Linux's schedstat) over the same
  interval: lateness with the thread busy is the loop's own work; lateness with it runnable
  but waiting is the process waiting for a core; the rest is the thread blocked (the GIL held
  by another thread, a page fault, a blocking call);
- `threads`: each of the daemon's threads seen (sampled every second): its name, CPU time and
  run-queue wait in ms, and how many times it was put on a core: which of them compete with
  the event loop for the cores, and whether a wait is a few long ones or many short ones (the
  main thread first, then the busiest).

Another python started with this folder on its PYTHONPATH and no TXD_BENCH_OBSERVE is
unaffected.
"""

from __future__ import annotations

import os

_OUT = os.environ.pop("TXD_BENCH_OBSERVE", None)

if _OUT:
    _out: str = _OUT
    import asyncio
    import atexit
    import gc
    import json
    import time
    from typing import Any

    import grpc

    LAG_EVERY = 0.010  # s
    KINDS = ("status", "probe", "taken", "gc", "heap", "lag", "threads")
    THREADS_EVERY = 100  # lag samples between two looks at the threads
    _data: dict[str, list[Any]] = {kind: [] for kind in KINDS}
    _gc_start = [0.0]

    def _on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            _gc_start[0] = time.perf_counter()
        else:
            ms = 1000 * (time.perf_counter() - _gc_start[0])
            _data["gc"].append((info["generation"], ms, time.monotonic()))
            if info["generation"] == 2:  # how many objects a full collection walks
                _data["heap"].append(len(gc.get_objects()))

    gc.callbacks.append(_on_gc)

    def _runq() -> float:
        """ms the calling thread has waited on a run queue since it started (0 off Linux)."""
        try:
            with open("/proc/thread-self/schedstat") as f:
                return int(f.read().split()[1]) / 1e6
        except (OSError, IndexError, ValueError):
            return 0.0

    # tid -> name, CPU ms, run-queue ms, times put on a core
    _threads: dict[int, tuple[str, float, float, int]] = {}

    def _sample_threads() -> None:
        tick = 1000 / os.sysconf("SC_CLK_TCK")
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/stat") as f:
                    name, _, rest = f.read().rpartition(")")
                with open(f"/proc/self/task/{tid}/schedstat") as f:
                    sched = f.read().split()
                runq, slices = int(sched[1]) / 1e6, int(sched[2])
            except (OSError, IndexError, ValueError):
                continue
            fields = rest.split()
            cpu = (int(fields[11]) + int(fields[12])) * tick  # utime + stime
            _threads[int(tid)] = (name.partition("(")[2], cpu, runq, slices)
        main = os.getpid()  # the main thread's id: it runs the event loop; it goes first
        order = sorted(_threads, key=lambda tid: (tid != main, -_threads[tid][1]))
        _data["threads"] = [_threads[tid] for tid in order]

    def _sample_lag(loop: asyncio.AbstractEventLoop, due: float, cpu: float, runq: float) -> None:
        now, cpu_now, runq_now = time.perf_counter(), time.thread_time(), _runq()
        _data["lag"].append((1000 * (now - due), 1000 * (cpu_now - cpu), runq_now - runq))
        if len(_data["lag"]) % THREADS_EVERY == 0:
            _sample_threads()
        loop.call_later(LAG_EVERY, _sample_lag, loop, now + LAG_EVERY, cpu_now, runq_now)

    class _StatusTimer(grpc.aio.ServerInterceptor):
        def __init__(self) -> None:
            self.lag_started = False

        async def intercept_service(self, continuation: Any, details: Any) -> Any:
            taken, taken_mono = time.perf_counter(), time.monotonic()
            _data["taken"].append(taken_mono)
            if not self.lag_started:
                self.lag_started = True
                loop = asyncio.get_running_loop()
                loop.call_later(
                    LAG_EVERY, _sample_lag, loop, taken + LAG_EVERY, time.thread_time(), _runq()
                )
            handler = await continuation(details)
            if handler is None or not details.method.endswith("/Status"):
                return handler
            inner = handler.unary_unary
            sent = dict(details.invocation_metadata or ()).get("txd-bench-sent")

            async def timed(request: Any, context: Any) -> Any:
                start = time.perf_counter()
                try:
                    return await inner(request, context)
                finally:
                    end = time.perf_counter()
                    _data["status"].append((1000 * (start - taken), 1000 * (end - start)))
                    if sent:
                        nice, at = sent.split()
                        intake = 1000 * (taken_mono - float(at))
                        _data["probe"].append((int(nice), intake, 1000 * (end - taken), float(at)))

            return handler._replace(unary_unary=timed)

    _server = grpc.aio.server

    def _observed_server(*args: Any, **kwargs: Any) -> Any:
        kwargs["interceptors"] = [*(kwargs.get("interceptors") or ()), _StatusTimer()]
        return _server(*args, **kwargs)

    grpc.aio.server = _observed_server

    @atexit.register
    def _write() -> None:
        if os.path.isdir("/proc/self/task"):
            _sample_threads()
        with open(_out, "w") as f:
            json.dump(_data, f)
