"""The slonk Helm chart under the harness: helm itself, and the chart installed on a real node.

:mod:`~slonkd_sandbox.chart.helm` (the pinned helm binary), :mod:`.release` (one release on a
real node), :mod:`.images` (its images, built once per content), :mod:`.volumes` (its local
PersistentVolumes), :mod:`.logs` (its containers' logs) and :mod:`.bus` (its bus from
outside). Neighbours: :mod:`slonkd_sandbox.realnode` (the node), :mod:`slonkd_sandbox.kube`
(the control plane).
"""
