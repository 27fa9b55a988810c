"""The harness's real node: containerd, runc, the kubelet and CoreDNS in a network namespace.

:mod:`~slonkd_sandbox.realnode.node` (the node's handle), :mod:`.net` (its namespace and
routes), :mod:`.host` (what it leaves on the host), :mod:`.config` (its configuration files),
:mod:`.access` (its credentials and RBAC) and :mod:`.images` (the test images it imports).
Neighbours: :mod:`slonkd_sandbox.kube` (the control plane it joins), :mod:`slonkd_sandbox.chart`
(the release installed on it).
"""
