"""Kubernetes adapter (plain aiohttp): watches, ownership-marked changes, leader election.

- :mod:`~slonkd.adapters.kube.transport`: the one client (aiohttp; raw JSON in and out, no
  model objects), configured by :mod:`~slonkd.adapters.kube.kubeconfig` (kubeconfig or
  in-cluster ServiceAccount, TLS, tokens), errors translated by
  :mod:`~slonkd.adapters.kube.errors`.
- :mod:`~slonkd.adapters.kube.informer` and :mod:`~slonkd.adapters.kube.sources`: list +
  watch caches of nodes and worker pods (coordinator) or of one pod and node (agent), parsed
  by :mod:`~slonkd.adapters.kube.parsing` into :mod:`slonkd.core.kube_objects`.
- :mod:`~slonkd.adapters.kube.nodes`, :mod:`~slonkd.adapters.kube.pods`,
  :mod:`~slonkd.adapters.kube.events`: idempotent, ownership-marked changes.
- :mod:`~slonkd.adapters.kube.lease`: leader election with a fencing token;
  :mod:`~slonkd.adapters.kube.state`: the coordinator's fenced state in a ConfigMap;
  :mod:`~slonkd.adapters.kube.tokenreview`: who a pod-bound token belongs to.
- :mod:`~slonkd.adapters.kube.secrets`: a Secret made once (the chart's secrets Job).

The RBAC these calls need is in ``deploy/rbac/``; the secrets Job's is its own Role in the
chart (``templates/secrets.yaml``).
"""
