"""The runtime kit every role builds on; it knows no role (an import-linter contract).

- :mod:`.workqueue`: a de-duplicating work queue of node names with per-key backoff.
- :mod:`.reconcile`: the level-triggered reconcile loop that takes keys from it.
- :mod:`.level_loop`: the loop of every whole-fleet controller: marked dirty, debounced.
- :mod:`.process`: a process's life: stop signals, the SIGUSR1 task dump, the deadline.
- :mod:`.metrics`: Prometheus metrics of one process, in a registry of its own.
- :mod:`.http_server`: the process's small HTTP server (health, ``/metrics``, routes added).
- :mod:`.logging`: structlog configured once per process.
- :mod:`.tls_files`: a server's TLS certificate loaded again in place when its files change.
- :mod:`.heap`: a bulk load with the cyclic collector off, what it made frozen until released.

Its users: :mod:`slonkd.runtime.agent`, :mod:`slonkd.runtime.coordinating` and
:mod:`slonkd.runtime.prestop`.
"""
