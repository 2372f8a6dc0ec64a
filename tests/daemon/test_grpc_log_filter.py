"""The daemon's filter on grpcio's logger: a client leaving a stream is one INFO line of txd's,
any other error stays an ERROR with its traceback."""

from __future__ import annotations

import logging
import sys

import pytest
from txd.daemon.main import _client_left


class ExecuteBatchError(Exception):  # named as grpcio's (cygrpc) exception is
    pass


def _record(exc: BaseException) -> logging.LogRecord:
    try:
        raise exc
    except BaseException:
        info = sys.exc_info()
    return logging.LogRecord(
        "grpc._cython.cygrpc",
        logging.ERROR,
        __file__,
        1,
        "%s raised in core by servicer method %s",
        ("ExecuteBatchError", "[/txd.v1.Runner/Logs]"),
        info,
    )


def test_a_client_leaving_a_stream_is_one_info_line(caplog: pytest.LogCaptureFixture) -> None:
    record = _record(ExecuteBatchError("Failed execute_batch"))
    with caplog.at_level(logging.INFO, logger="txd"):
        assert not _client_left(record)  # grpcio's record is dropped
    # txd's logger, whose INFO lines pass the log's filter (a library's would not).
    assert [(r.name, r.levelno, r.exc_info, r.getMessage()) for r in caplog.records] == [
        (
            "txd.daemon.main",
            logging.INFO,
            None,
            "a client left a stream while it was written to ([/txd.v1.Runner/Logs])",
        )
    ]


def test_other_errors_keep_their_level_and_traceback() -> None:
    record = _record(RuntimeError("boom"))
    assert _client_left(record)
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None and record.exc_info[0] is RuntimeError
