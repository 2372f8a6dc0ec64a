"""The daemon's metrics, kept and rendered with Prometheus's own library (prometheus_client): one
registry per daemon, read by the Metrics RPC and by the opt-in exposition (daemon.exposition).

- gRPC server metrics under go-grpc-prometheus's names and labels, so that its dashboards and
  alert rules (etcd's, Kubernetes') work as they are; counted by the access interceptor
  (daemon.access) on the socket and the TCP listener, and as the read door's process tells of
  its calls (daemon.readdoor), for the methods txd serves only.
- txd's own: jobs by scheduler and state, state transitions, backend calls and failures, stale
  statuses, log bytes lost, events committed and event subscribers; the process's (process_*).

No label takes a value per job, per handle or per user (Slurm's own warning about unbounded
endpoints): schedulers, states, operations, gRPC methods and codes are fixed sets.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import grpc
import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.registry import Collector
from txd.daemon import access
from txd.schedulers import logfiles
from txd.schedulers.errors import BackendUnavailable, ShuttingDown, TxdError
from txd.v1 import AppState

# go-grpc-prometheus's histogram buckets (Prometheus's DefBuckets), in seconds.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
RPC_LABELS = ("grpc_type", "grpc_service", "grpc_method")
OPENMETRICS = openmetrics.CONTENT_TYPE_LATEST
PROMETHEUS = CONTENT_TYPE_PLAIN_0_0_4

# The backend operations counted (txd_backend_calls_total{op}).
OPS = ("submit", "dryrun", "cancel", "delete", "list", "logs", "run_opts", "describe", "changes")


def _go_code(code: str) -> str:
    """A gRPC code as Go names it (codes.Code.String()), as go-grpc-prometheus labels it:
    NOT_FOUND -> NotFound, CANCELLED -> Canceled, OK -> OK."""
    if code == "OK":
        return "OK"
    if code == "CANCELLED":
        return "Canceled"
    return "".join(part.capitalize() for part in code.split("_"))


class Sources(Protocol):
    """What the gauges are read from at each scrape (the job service's parts)."""

    def job_counts(self) -> Iterable[tuple[str, int, int]]:
        """(scheduler, state, jobs) of the job store."""

    def stale_counts(self) -> Iterable[tuple[str, int]]:
        """(scheduler, followed jobs whose status is stale)."""

    def events_committed(self) -> int: ...

    def event_subscribers(self) -> int: ...


class Metrics(access.Observer):
    def __init__(self) -> None:
        # `_created` series would double every counter's; go-grpc-prometheus has none.
        prometheus_client.disable_created_metrics()
        self.registry = CollectorRegistry()
        r = self.registry
        self.rpc_started = Counter(
            "grpc_server_started_total",
            "Total number of RPCs started on the server.",
            RPC_LABELS,
            registry=r,
        )
        self.rpc_handled = Counter(
            "grpc_server_handled_total",
            "Total number of RPCs completed on the server, regardless of success or failure.",
            (*RPC_LABELS, "grpc_code"),
            registry=r,
        )
        self.msg_received = Counter(
            "grpc_server_msg_received_total",
            "Total number of RPC stream messages received on the server.",
            RPC_LABELS,
            registry=r,
        )
        self.msg_sent = Counter(
            "grpc_server_msg_sent_total",
            "Total number of gRPC stream messages sent by the server.",
            RPC_LABELS,
            registry=r,
        )
        # Opt-in in go-grpc-prometheus (its servers may have thousands of methods); txd has
        # about twenty, so ~250 series: always on.
        self.handling = Histogram(
            "grpc_server_handling_seconds",
            "Histogram of response latency (seconds) of gRPC that had been application-level "
            "handled by the server.",
            RPC_LABELS,
            buckets=BUCKETS,
            registry=r,
        )
        self.transitions = Counter(
            "txd_job_transitions_total",
            "Jobs entering a state, by scheduler and the state entered (SUBMITTED: recorded).",
            ("scheduler", "state"),
            registry=r,
        )
        self.backend_calls = Counter(
            "txd_backend_calls_total",
            "Operations asked of a scheduler's backend, by scheduler and operation.",
            ("scheduler", "op"),
            registry=r,
        )
        self.backend_failures = Counter(
            "txd_backend_failures_total",
            "Backend operations that failed: the backend unreachable or erring (not a "
            "caller's mistake), by scheduler and operation.",
            ("scheduler", "op"),
            registry=r,
        )
        ProcessCollector(registry=r)  # process_*: CPU, memory, open fds, start time
        self._rpcs: dict[tuple[str, str, str], _Rpc] = {}  # each method's series (KNOWN only)
        self._sources: Sources | None = None
        r.register(_Gauges(self))

    def bind(self, sources: Sources) -> None:
        self._sources = sources

    # -- the access interceptor's hooks ------------------------------------------------------

    def _rpc(self, call: access.Call) -> _Rpc:
        key = (call.kind, call.service, call.method)
        rpc = self._rpcs.get(key)
        if rpc is None:
            rpc = self._rpcs[key] = _Rpc(self, key)
        return rpc

    def started(self, call: access.Call) -> None:
        self._rpc(call).started.inc()

    def received(self, call: access.Call) -> None:
        self._rpc(call).received.inc()

    def sent(self, call: access.Call) -> None:
        self._rpc(call).sent.inc()

    def handled(self, call: access.Call, seconds: float) -> None:
        rpc = self._rpc(call)
        rpc.handled(call.code).inc()
        rpc.handling.observe(seconds)

    def answered_elsewhere(
        self, full_method: str, kind: str, door: str, calls: Iterable[tuple[str, float]]
    ) -> None:
        """Calls another process answered (the read door's): each (code name, seconds) counted
        as the access interceptor counts a call of one request and, if it succeeded, one
        response."""
        call = access.Call(full_method, kind, door)
        for code, seconds in calls:
            call.code = grpc.StatusCode[code]
            self.started(call)
            self.received(call)
            if call.code == grpc.StatusCode.OK:
                self.sent(call)
            self.handled(call, seconds)

    # -- txd's own --------------------------------------------------------------------------

    def transition(self, scheduler: str, state: int) -> None:
        self.transitions.labels(scheduler, AppState.Name(state)).inc()

    @contextlib.contextmanager
    def backend(self, scheduler: str, op: str) -> Iterator[None]:
        """Counts one backend operation, and its failure when it raises one."""
        self.backend_calls.labels(scheduler, op).inc()
        try:
            yield
        except BaseException as e:
            if failed(e):
                self.backend_failures.labels(scheduler, op).inc()
            raise

    # -- rendering --------------------------------------------------------------------------

    def render(self, fmt: str = OPENMETRICS) -> tuple[bytes, str]:
        """(the exposition, its content type) in `fmt`: OPENMETRICS or PROMETHEUS."""
        if fmt == PROMETHEUS:
            return generate_latest(self.registry), PROMETHEUS
        return openmetrics.generate_latest(self.registry), OPENMETRICS


def failed(e: BaseException) -> bool:
    """Whether `e` ending a backend operation is the backend's failure: it was unreachable or
    answered with an error (BackendUnavailable), or the scheduler raised what it never should
    (a bug); not a caller's mistake (InvalidArgument, NotFound ...), nor the daemon stopping, nor
    a cancelled call."""
    if isinstance(e, ShuttingDown):
        return False
    if isinstance(e, BackendUnavailable):
        return True
    return isinstance(e, Exception) and not isinstance(e, TxdError)


class _Rpc:
    """One method's series, looked up once (labels() costs microseconds a call)."""

    def __init__(self, metrics: Metrics, key: tuple[str, str, str]) -> None:
        self.key = key
        self.started = metrics.rpc_started.labels(*key)
        self.received = metrics.msg_received.labels(*key)
        self.sent = metrics.msg_sent.labels(*key)
        self.handling = metrics.handling.labels(*key)
        self._counter = metrics.rpc_handled
        self._handled: dict[grpc.StatusCode, Any] = {}

    def handled(self, code: grpc.StatusCode) -> Any:
        child = self._handled.get(code)
        if child is None:
            child = self._handled[code] = self._counter.labels(*self.key, _go_code(code.name))
        return child


class _Gauges(Collector):
    """What is read at each scrape rather than counted as it happens."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def describe(self) -> Iterable[Metric]:
        return []  # read at collect time only (keeps the registry from collecting at start)

    def collect(self) -> Iterator[Metric]:
        sources = self._metrics._sources
        jobs = GaugeMetricFamily(
            "txd_jobs",
            "Jobs in the job store, by scheduler and state.",
            labels=("scheduler", "state"),
        )
        stale = GaugeMetricFamily(
            "txd_status_stale_jobs",
            "Followed jobs whose status is stale (their backend has not answered since), by "
            "scheduler.",
            labels=("scheduler",),
        )
        lost = CounterMetricFamily(
            "txd_log_bytes_lost",
            "Bytes of job output that could not be written to the daemon's logs (a full disk), "
            "since the daemon started.",
            value=logfiles.LOST.bytes,
        )
        committed = CounterMetricFamily(
            "txd_events_committed",
            "Events committed to the job store (every recorded status change and deletion), "
            "since the daemon started.",
        )
        subscribers = GaugeMetricFamily(
            "txd_event_subscribers", "Open Events streams (txctl events, list --watch, dashboards)."
        )
        if sources is not None:
            for scheduler, state, count in sources.job_counts():
                jobs.add_metric((scheduler, AppState.Name(state)), count)
            for scheduler, count in sources.stale_counts():
                stale.add_metric((scheduler,), count)
            committed.add_metric((), sources.events_committed())
            subscribers.add_metric((), sources.event_subscribers())
        else:
            committed.add_metric((), 0)
            subscribers.add_metric((), 0)
        yield from (jobs, stale, lost, committed, subscribers)


class MetricsSettingsError(ValueError):
    """The daemon's [metrics] section is wrong; the message names the key."""


# The textfile's rewrite period bounds (seconds): node_exporter reads it at each scrape.
MIN_INTERVAL, MAX_INTERVAL = 1.0, 3600.0


@dataclass(frozen=True)
class MetricsSettings:
    """The daemon's `[metrics]` settings (config file, or `--set metrics.KEY=VALUE`): the opt-in
    exposition besides the Metrics RPC (daemon.exposition)."""

    textfile: str = ""  # a node_exporter textfile (*.prom), rewritten every `interval` seconds
    interval: float = 30.0
    listen: str = ""  # unix:PATH: plain HTTP GET /metrics on a Unix socket (mode 0600)

    @classmethod
    def parse(cls, section: Mapping[str, Any]) -> MetricsSettings:
        known = ("textfile", "interval", "listen")
        values: dict[str, Any] = {}
        for key, raw in section.items():
            if key not in known:
                raise MetricsSettingsError(
                    f"settings [metrics]: unknown key {key!r} (known: {', '.join(known)})"
                )
            if key == "interval":
                try:
                    value: Any = float(raw)
                except (TypeError, ValueError):
                    value = None
                if value is None or not MIN_INTERVAL <= value <= MAX_INTERVAL:
                    raise MetricsSettingsError(
                        f"settings [metrics] interval: expected seconds from {MIN_INTERVAL:g} "
                        f"to {MAX_INTERVAL:g}, got {raw!r}"
                    )
            elif not isinstance(raw, str) or not raw:
                raise MetricsSettingsError(
                    f"settings [metrics] {key}: expected a path, got {raw!r}"
                )
            else:
                value = raw
            values[key] = value
        textfile = values.get("textfile", "")
        if textfile and not textfile.endswith(".prom"):
            raise MetricsSettingsError(
                f"settings [metrics] textfile {textfile!r}: node_exporter's textfile collector "
                "reads only files named *.prom"
            )
        listen = values.get("listen", "")
        if listen and (not listen.startswith("unix:") or len(listen) == len("unix:")):
            raise MetricsSettingsError(
                f"settings [metrics] listen {listen!r}: expected unix:PATH (over TCP the "
                "metrics are the Metrics RPC on --listen, behind its TLS and token)"
            )
        if "interval" in values and not textfile:
            raise MetricsSettingsError("settings [metrics] interval: only with textfile")
        return cls(**values)

    @property
    def textfile_path(self) -> Path | None:
        return Path(self.textfile).expanduser() if self.textfile else None

    @property
    def listen_path(self) -> Path | None:
        return Path(self.listen.removeprefix("unix:")).expanduser() if self.listen else None
