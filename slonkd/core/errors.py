"""slonkd's error types: adapters translate every library error into one of these.

- :class:`TransientError`: worth retrying (controller unreachable, timeout, 5xx, conflict).
- :class:`TerminalError`: retrying cannot help (permission denied, invalid request).
- :class:`ParseError`: input that does not have the expected shape; nothing was acted on.

Chain the original with ``raise ... from exc`` so the cause stays in the log.
"""

from __future__ import annotations


class SlonkdError(Exception):
    """Base of every error slonkd raises on purpose."""


class TransientError(SlonkdError):
    """A failure that may succeed when retried later."""


class TerminalError(SlonkdError):
    """A failure that retrying cannot fix; report it and do not retry."""


class ParseError(SlonkdError):
    """Input (command output, payload, object) that slonkd cannot read safely."""
