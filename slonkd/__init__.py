"""slonkd: keeps SLURM and Kubernetes in agreement on every node of a GPU cluster.

Layers (enforced by import-linter): :mod:`slonkd.core` (pure decisions and models) <
:mod:`slonkd.adapters` (all I/O) < :mod:`slonkd.runtime` (queues, loops, wiring) <
:mod:`slonkd.cli` (entry points). :mod:`slonkd_sandbox` starts real services for the test
suite and the sandbox; the product never imports it.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("slonkd")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"
