"""``slonkd sandbox``'s modes and demo: every real service at once, with slonkd running on it.

:mod:`~slonkd_sandbox.sandbox.run` (the process mode in the foreground), :mod:`.real` (the
chart on a real node), :mod:`.ctl` (``up`` and ``down``, detached), :mod:`.agents` (one agent
per worker pod), :mod:`.play`, :mod:`.demo`, :mod:`.demo_real` and :mod:`.access` (the
demo). Neighbours: :mod:`slonkd_sandbox.command` (the command line),
:mod:`slonkd_sandbox.slurm`, :mod:`slonkd_sandbox.kube` and :mod:`slonkd_sandbox.chart` (what
it starts).
"""
