"""The agent (``slonkd agent``), the sidecar beside each worker's slurmd, one concept per module.

- :mod:`.sidecar`: the agent itself (:class:`~.sidecar.Agent`): its pod and K8s node watched,
  its own SLURM node reconciled, the health loop and the bus around it.
- :mod:`.apply`: its one write to SLURM (a drain or release) and the record of it.
- :mod:`.commands`: its bus and which coordinator commands it obeys.
- :mod:`.health_loop`: the health checks on their periods, turned into verdicts.
- :mod:`.requeue_report`: the preStop hook's requeue times, exported by the agent.

Built on :mod:`slonkd.runtime.kit` (shared by every role); the coordinator is
:mod:`slonkd.runtime.coordinating`, the preStop hook :mod:`slonkd.runtime.prestop`.
"""
