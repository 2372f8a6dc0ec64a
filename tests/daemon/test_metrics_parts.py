"""The metrics' parts without a daemon: the [metrics] settings' checks, which backend errors
count as failures, and gRPC codes as go-grpc-prometheus names them."""

from __future__ import annotations

import grpc
import pytest
from txd.daemon.metrics import Metrics, MetricsSettings, MetricsSettingsError, _go_code, failed
from txd.schedulers.errors import BackendUnavailable, InvalidArgument, NotFound, ShuttingDown


def test_settings() -> None:
    s = MetricsSettings.parse(
        {"textfile": "~/m/txd.prom", "interval": "5", "listen": "unix:/x/m.sock"}
    )
    assert s.interval == 5.0 and s.textfile_path is not None and s.textfile_path.is_absolute()
    assert str(s.listen_path) == "/x/m.sock"
    assert MetricsSettings.parse({}) == MetricsSettings()
    bad = {
        "port": {"port": 9100},
        "*.prom": {"textfile": "/tmp/txd.txt"},
        "unix:PATH": {"listen": "127.0.0.1:9100"},
        "from 1 to 3600": {"textfile": "/t/x.prom", "interval": "0.1"},
        "only with textfile": {"interval": 10},
        "expected a path": {"textfile": 3},
    }
    for words, section in bad.items():
        with pytest.raises(MetricsSettingsError, match=words.replace("*", r"\*")):
            MetricsSettings.parse(section)


def test_what_counts_as_a_backend_failure() -> None:
    assert failed(BackendUnavailable("down"))
    assert failed(RuntimeError("a scheduler's bug"))
    assert not failed(ShuttingDown("stopping"))
    assert not failed(InvalidArgument("cfg", "bad"))
    assert not failed(NotFound("no job"))
    m = Metrics()
    for error in (BackendUnavailable("down"), InvalidArgument("cfg", "bad")):
        with pytest.raises(type(error)), m.backend("slurm", "submit"):
            raise error
    assert m.backend_calls.labels("slurm", "submit")._value.get() == 2
    assert m.backend_failures.labels("slurm", "submit")._value.get() == 1


def test_codes_as_go_names_them() -> None:
    names = {code.name: _go_code(code.name) for code in grpc.StatusCode}
    assert names["OK"] == "OK" and names["CANCELLED"] == "Canceled"
    assert names["NOT_FOUND"] == "NotFound" and names["DEADLINE_EXCEEDED"] == "DeadlineExceeded"
    assert names["UNAUTHENTICATED"] == "Unauthenticated" and names["DATA_LOSS"] == "DataLoss"
