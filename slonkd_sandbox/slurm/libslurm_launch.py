"""``slonkd`` with its SLURM library children under another release's loader (the harness's).

``python -m slonkd_sandbox.slurm.libslurm_launch ROLE ...`` is
``python -m slonkd.cli.main ROLE ...`` after
:data:`slonkd.adapters.slurm.slurm_child.CHILD_PREFIX` (shared by the libslurm and pyslurm
children) is set from :data:`~slonkd_sandbox.slurm.chroot.CHILD_PREFIX_ENV`: a process that
:meth:`~slonkd_sandbox.slurm.chroot.ChrootSlurmCluster.libslurm_argv` started on a release
root's loader starts its children the same way, so the root's library loads in all. Used
by bench/coordinator.py for 24.11's change poll; a release's own image needs none of it.
Neighbours: :mod:`slonkd_sandbox.daemon` (runs it as a :class:`~slonkd_sandbox.daemon.Daemon`'s
module), :mod:`slonkd.adapters.slurm.slurm_child` (the children's start).
"""

from __future__ import annotations

import json
import os
import sys

from slonkd.adapters.slurm import slurm_child
from slonkd.cli.main import main
from slonkd_sandbox.slurm.chroot import CHILD_PREFIX_ENV

if __name__ == "__main__":
    prefix = os.environ.get(CHILD_PREFIX_ENV)
    if prefix:
        slurm_child.CHILD_PREFIX = tuple(json.loads(prefix))
    raise SystemExit(main(sys.argv[1:]))
