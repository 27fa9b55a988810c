"""structlog configured once per process: JSON lines when not on a terminal, console on one.

Logs go to stderr so that a command's stdout (``slonkd check -o json``) stays clean.
Event names are constant dotted snake_case; values go in keys.
"""

from __future__ import annotations

import logging
import os
import sys

import structlog

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING}


def configure_logging(*, json: bool | None = None, level: int | None = None) -> None:
    """Configure structlog for this process (``json=None``: JSON unless stderr is a TTY).

    ``level=None``: ``SLONKD_LOG_LEVEL`` (debug, info, warning; info when unset or unknown).
    """
    if level is None:
        level = LEVELS.get(os.environ.get("SLONKD_LOG_LEVEL", "").lower(), logging.INFO)
    as_json = not sys.stderr.isatty() if json is None else json
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
