"""Harness services a fixture starts for its test and stops after it: :class:`Started`.

``slurm_factory`` of ``tests/conftest.py`` (SLURM 22.05 clusters on this host) and
``cluster_factory`` of ``tests/contract/conftest.py`` (24.11 clusters in their root) start
clusters when a test asks and stop each after the test, in the order they were started; the
services themselves are :class:`~slonkd_sandbox.procs.StartStop` of :mod:`slonkd_sandbox`.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from slonkd_sandbox.procs import StartStop

S = TypeVar("S", bound=StartStop)


class Started(Generic[S]):
    """The services started so far, in order, to be stopped when the test is over."""

    def __init__(self) -> None:
        self.services: list[S] = []

    def start(self, service: S) -> S:
        """Start ``service``; it is remembered first, so one whose start fails is stopped too."""
        self.services.append(service)
        service.start()
        return service

    def stop_all(self) -> None:
        """Stop every service started, in the order they were started."""
        for service in self.services:
            service.stop()
