"""The harness's Kubernetes: a control plane on loopback, kwok's fake nodes, a kubelet stand-in.

:mod:`~slonkd_sandbox.kube.cluster` (the control plane's handle), :mod:`.components` (its
processes' command lines), :mod:`.pki` (its credentials), :mod:`.kwok` (the fake nodes),
:mod:`.api` (a small REST client) and :mod:`.kubelet` (binds fake pods to slurmds).
Neighbours: :mod:`slonkd_sandbox.slurm` (the slurmds), :mod:`slonkd_sandbox.realnode` (a
real kubelet node instead of kwok's), :mod:`slonkd_sandbox.toolchain` (the binaries).
"""
