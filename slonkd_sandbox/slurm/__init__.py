"""The harness's SLURM: real clusters of 22.05 on the host and of 24.11 in a debootstrapped root.

:mod:`~slonkd_sandbox.slurm.cluster` (the 22.05 cluster's handle), :mod:`.conf` (its
slurm.conf), :mod:`.supervisor` (PID 1 of its namespace) and :mod:`.control` (reaching it
from any process); :mod:`.root`, :mod:`.chroot` and :mod:`.chroot_supervisor` (another
release in a root); :mod:`.libslurm_launch` (slonkd under that root's loader). Neighbours:
:mod:`slonkd_sandbox.accounting` (the opt-in slurmdbd), :mod:`slonkd_sandbox.kube` (the
control plane whose pods these slurmds stand for).
"""
