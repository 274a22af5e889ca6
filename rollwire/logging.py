"""configure_logging(): only CLI processes install handlers; library code only calls getLogger.

Two formats: ``text`` (one readable line) and ``json`` (one JSON object per line, for a cluster's log pipeline),
with the run, rollout and call ids a caller passed in ``extra`` as their own fields.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

FORMATS = ("text", "json")
ID_FIELDS = ("run_id", "rollout_id", "call_id", "task_id", "server", "tool", "dialect", "step")
"""``extra`` keys copied into a JSON line when a log call passes them (ids, never tokens or keys)."""


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (ISO 8601, UTC), level, logger, message, the known id fields, and the
    exception's traceback as one string when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        line: dict[str, Any] = {
            "time": f"{stamp}.{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in ID_FIELDS:
            value = record.__dict__.get(name)
            if value is not None:
                line[name] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def configure_logging(level: str = "INFO", fmt: str = "text") -> None:
    """Route every logger (uvicorn's too, when it is started with ``log_config=None``) to one stderr handler."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown log format {fmt!r}; known: {', '.join(FORMATS)}")
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("httpx", "httpx2", "httpcore", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):  # whatever uvicorn set up before: ours now
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    logging.captureWarnings(fmt == "json")  # a Python warning is a log line too, not a bare line on stderr


__all__ = ["FORMATS", "JsonFormatter", "configure_logging"]
