"""The daemon's log on stderr: `--log-format text` (one line per record, as txd always wrote)
or `json` (one JSON object per line, for journald, Loki, jq and the like, as dockerd's and
containerd's --log-format json).

A JSON line holds `time` (RFC 3339, with the local zone), `level`, `logger`, `msg` and, where a
record carries them (`extra={"fields": {...}}`, as the access lines do), its structured fields
beside them; `exc` holds a traceback. What goes into a record is the caller's choice: no
formatter can tell a token or an env value from other text, so the daemon never logs requests,
only what it did with them (txd.daemon.access).

Only txd's own loggers (`txd` and below) follow --log-level. Every other one (grpcio, asyncssh,
botocore, urllib3, aiohttp, kubernetes_asyncio, aiodocker, a plugin's, the next dependency's)
reaches the log at WARNING and above only, whatever --log-level says: libraries log what they
send and receive (botocore at DEBUG a SubmitJob's body, env values and all; asyncssh at INFO
each command it runs). An allow-list, so that a library added later is held back too; it is a
filter on the handler, so a library that sets its own logger's level gets no further.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from typing import Any

FORMATS = ("text", "json")
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
OWN = "txd"  # the loggers --log-level applies to: this one and those below it
LIBRARY_FLOOR = logging.WARNING  # the lowest level at which any other logger's records pass
TEXT_FORMAT = "%(asctime)s txd %(levelname)s %(name)s: %(message)s"
# The level of the access lines (txd.daemon.access), one per RPC: INFO in JSON, where a log
# pipeline filters them by their fields; DEBUG in text, where a few watching clients' List
# polls and every txctl call would bury the lines people read (--log-level debug shows them).
ACCESS_LEVELS = {"text": logging.DEBUG, "json": logging.INFO}
access_level = ACCESS_LEVELS["text"]
configured = ("info", "text")  # (level, format) as configure() last set them
# The keys a JSON line always has: a record's fields never overwrite them.
_BASE = ("time", "level", "logger", "msg")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        when = dt.datetime.fromtimestamp(record.created).astimezone()
        out: dict[str, Any] = {
            "time": when.isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            out.update((k, v) for k, v in fields.items() if k not in _BASE)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, ensure_ascii=False, default=str)


def passes(record: logging.LogRecord) -> bool:
    """Whether a record reaches the log: any of txd's, another logger's at LIBRARY_FLOOR up."""
    name = record.name
    return record.levelno >= LIBRARY_FLOOR or name == OWN or name.startswith(OWN + ".")


def configure(level: str, fmt: str) -> None:
    """Sets up the root logger on stderr: txd's loggers at `level` (one of LEVELS, any case),
    every other logger at LIBRARY_FLOOR at least; `fmt` one of FORMATS."""
    global access_level, configured
    access_level = ACCESS_LEVELS[fmt]
    configured = (level, fmt)
    levelno = logging.getLevelNamesMapping()[level.upper()]
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    handler.addFilter(passes)
    # The root's level spares libraries the cost of records the filter would drop anyway.
    logging.basicConfig(level=max(levelno, LIBRARY_FLOOR), handlers=[handler], force=True)
    logging.getLogger(OWN).setLevel(levelno)
