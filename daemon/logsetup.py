"""The daemon's log on stderr: `--log-format text` (one line per record, as txd always wrote)
or `json` (one JSON object per line, for journald, Loki, jq and the like, as dockerd's and
containerd's --log-format json).

A JSON line holds `time` (RFC 3339, with the local zone), `level`, `logger`, `msg` and, where a
record carries them (`extra={"fields": {...}}`, as the access lines do), its structured fields
beside them; `exc` holds a traceback. What goes into a record is the caller's choice: no
formatter can tell a token or an env value from other text, so the daemon never logs requests,
only what it did with them (txd.daemon.access).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from typing import Any

FORMATS = ("text", "json")
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


def configure(level: str, fmt: str) -> None:
    """Sets up the root logger on stderr; `fmt` one of FORMATS."""
    global access_level, configured
    access_level = ACCESS_LEVELS[fmt]
    configured = (level, fmt)
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
