"""Names of the log events that mark a process's milestones, shared by the product and its tests.

The e2e harness starts a daemon and waits until one of these appears in its JSON log;
operators' dashboards and alerts select on the same names. A name here is an interface:
never rename one, add a new one instead.

Two families are composed from the action's kind where the coordinator writes:
``kube.<kind>`` for a K8s write (:mod:`slonkd.runtime.coordinating.executing`), dashes as
underscores (``kube.cordon``, ``kube.set_condition``), and ``slurm.nodes_<kind>`` for a bulk
SLURM write (``slurm.nodes_drain``, ``slurm.nodes_release``;
:mod:`slonkd.runtime.coordinating.recording`).
"""

from __future__ import annotations

from typing import Final

COORDINATOR_LEADING: Final = "coordinator.leading"
"""This candidate won the lease (``identity``, ``fencing_token``)."""

COORDINATOR_SYNCED: Final = "coordinator.synced"
"""The leader's node and pod caches are listed; its passes start now."""

COORDINATOR_API_LISTENING: Final = "coordinator.api_listening"
"""The leader's status API is up (``host``, ``port``, ``tls``)."""

ROLLOUT_WATCHING: Final = "rollout.watching"
"""The leader's rollout loop watches the worker StatefulSets."""

CONFIG_DEPRECATED: Final = "config.deprecated"
"""A role read a deprecated file, key or variable (``command``, ``detail``: the old name and
the new key); logged once per name at start, warning level."""

AGENT_SYNCED: Final = "agent.synced"
"""An agent's caches are listed and its node mirrored once."""

AGENT_POD_REPLACED: Final = "agent.pod_replaced"
"""An agent bound to its pod's uid saw a successor pod of its name: it leaves the node to the
successor's agent from now on (``uid``, ``successor_uid``)."""

SLURM_LIBSLURM_CHILD_EXITED: Final = "slurm.libslurm_child_exited"
"""The child process holding libslurm for the change poll ended on a question (``rc``, its
last words ``said``, ``restart_s``): exit 40 with "Name or service not known" is slurmctld's
name not resolving. The next question after ``restart_s`` starts a new child."""

SLURM_PYSLURM_CHILD_EXITED: Final = "slurm.pyslurm_child_exited"
"""The child process holding pyslurm ended on a request, or was killed past its timeout
(``op``, ``rc``, its last words ``said``, ``restart_s``). The next request after ``restart_s``
starts a new child."""

SLURM_BACKEND_CHOSEN: Final = "slurm.backend_chosen"
"""The SLURM backend a role chose at start (``backend``, ``wanted``: the ``slurm_backend``
setting, ``slurm_version``, ``why``): once per process."""

COORDINATOR_CHANGE_POLL_LOADED: Final = "coordinator.change_poll_loaded"
"""The change poll's libslurm child is ready (``library``, ``load_s``): polls ask it now."""

TLS_RELOADED: Final = "tls.reloaded"
"""A server's certificate and key changed on disk and were loaded again in place
(``cert_file``, ``key_file``, ``sha256``: the new certificate's fingerprint)."""

TLS_RELOAD_FAILED: Final = "tls.reload_failed"
"""A server's certificate or key changed but the new pair did not load (``error``): the old
certificate is kept; warning level, once per change of the files."""

BUS_PLAIN_TEXT: Final = "bus.plain_text"
"""A role connects to the broker without TLS (``role``, ``detail``: plain MQTT was chosen, no
CA file given); warning level, once at start."""

API_PLAIN_TEXT: Final = "api.plain_text"
"""The coordinator serves its API as plain HTTP, or the agent asks it for credentials over
plain HTTP (``role``, ``detail``); warning level, once at start."""

TLS_SIGNALLED: Final = "tls.signalled"
"""``slonkd tls-reload`` saw a new certificate and key that load and signalled the process
that serves them (``process``, ``pids``, ``signal``, ``sha256``); warning level when no
process of the name was found (``pids`` empty), or with ``error`` when one could not be
signalled."""
