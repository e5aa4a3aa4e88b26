"""Structured JSON logs: one object per line, with the record's extra fields."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def entry(self, record: logging.LogRecord) -> dict:
        entry = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return entry

    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(self.entry(record), default=str)


class ConsoleFormatter(JsonFormatter):
    """The same fields as one line of text (``--zap-encoder=console``): time,
    level, logger and message, then the extra fields as JSON; an exception's
    traceback on the lines after."""

    def format(self, record: logging.LogRecord) -> str:
        entry = self.entry(record)
        head = "\t".join(str(entry.pop(key)) for key in ("ts", "level", "logger", "msg"))
        exception = entry.pop("exception", None)
        line = f"{head}\t{json.dumps(entry, default=str)}" if entry else head
        return f"{line}\n{exception}" if exception else line


FORMATTERS = {"json": JsonFormatter, "console": ConsoleFormatter}


class _Routine(logging.Filter):
    """INFO records of a logger that says the same thing on every retry
    (the client's leader election: each renewal of the Lease, each failed
    attempt of a standby, every retry period), logged as DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.INFO:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger().isEnabledFor(logging.DEBUG)
        return True


def configure(level: str = "INFO", encoder: str = "json") -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(FORMATTERS[encoder]())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # The client logs every retry of its own at WARNING; ours say more.
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    # Leading starts and ends are the operator's own INFO and ERROR lines.
    election = logging.getLogger("leaderelection")
    election.filters[:] = [_Routine()]
