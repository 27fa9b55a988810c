"""slonkd's error types: adapters translate every library error into one of these.

- :class:`TransientError`: worth retrying (controller unreachable, timeout, 5xx, conflict).
- :class:`OutcomeUnknownError`: a transient failure of a *write* that may have been applied;
  the caller re-reads and plans again, never sends the same write blind.
- :class:`TerminalError`: retrying cannot help (permission denied, invalid request).
- :class:`ParseError`: input that does not have the expected shape; nothing was acted on.

Chain the original with ``raise ... from exc`` so the cause stays in the log.
"""

from __future__ import annotations


class SlonkdError(Exception):
    """Base of every error slonkd raises on purpose."""


class TransientError(SlonkdError):
    """A failure that may succeed when retried later."""


class OutcomeUnknownError(TransientError):
    """A write whose request left but whose answer never came: it may or may not have landed.

    Never sent again as it was: the state it was planned on may have changed since, and the
    write itself may be what changed it (a resume slurmctld applied but answered late, sent
    again after an operator's drain, clears that drain). Retrying means reading afresh and
    planning again, as a reconcile or the next pass does.
    """


class TerminalError(SlonkdError):
    """A failure that retrying cannot fix; report it and do not retry."""


class ParseError(SlonkdError):
    """Input (command output, payload, object) that slonkd cannot read safely."""
