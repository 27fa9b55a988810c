"""A background sampler: a thread that takes a sample every period while its block runs.

What a demo or a test must not miss between two of its own looks (a job killed and then
requeued, a node out for a moment) is sampled here. Used by the sandbox's demo
(:class:`~slonkd_sandbox.sandbox.access.JobWatch`: job states and the nodes out at once) and
the e2e revalidation tests (one node's state over time).
"""

from __future__ import annotations

import threading
from typing import Self


class Sampler:
    """Calls :meth:`sample` every ``period_s`` in a daemon thread, from ``with`` to its end."""

    period_s = 0.2

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def sample(self) -> None:
        """Take one sample; a failed look is the subclass's to skip (the next one comes)."""
        raise NotImplementedError

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.period_s)
