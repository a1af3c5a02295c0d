"""Logging: one JSON object per line on stdout, each named by a fixed snake_case event (``job_crashed``).

Never pass payload text, titles, logins, emails, tokens or host paths as fields.
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec
import structlog

_encoder = msgspec.json.Encoder()


LEVELS = ("debug", "info", "warning", "error")


def _serialize(obj: Any, **_: Any) -> bytes:
    return _encoder.encode(obj)


def configure_logging(service: str, level: str = "info", **bound: Any) -> None:
    """Configure structlog once per process; ``bound`` fields (for example ``host``) go on every line.

    Lines are encoded straight to bytes (msgspec) and written to stdout's buffer: the receiver logs on
    its hot path, and the text round trip was a measurable part of a request.
    """
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(serializer=_serialize),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
        ),
        logger_factory=structlog.BytesLoggerFactory(),
        cache_logger_on_first_use=True,
    )
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(service=service, **bound)
    root = logging.getLogger()
    root.handlers[:] = [_LibraryBridge()]
    root.setLevel(logging.WARNING)


class _LibraryBridge(logging.Handler):
    """Library log records (aiohttp, asyncio) as our JSON lines.

    Only the record's code-authored template and the exception class go out: interpolated arguments and
    tracebacks can carry request data and host paths.
    """

    def emit(self, record: logging.LogRecord) -> None:
        try:
            fields: dict[str, Any] = {"logger": record.name, "template": str(record.msg)[:200]}
            if record.exc_info and record.exc_info[0] is not None:
                fields["error"] = record.exc_info[0].__name__
            get_logger().log(record.levelno, "library_log", **fields)
        except Exception:
            self.handleError(record)


def get_logger() -> structlog.typing.FilteringBoundLogger:
    # configure_logging sets make_filtering_bound_logger, so this is the type every logger has.
    logger: structlog.typing.FilteringBoundLogger = structlog.get_logger()
    return logger
