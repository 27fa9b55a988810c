"""Pinned versions of every real service the harness builds or installs.

One place for all of them: the build cache is keyed by these strings, so changing one
rebuilds exactly that tool on the next run.
"""

from __future__ import annotations

KUBERNETES = "1.36.3"
"""kube-apiserver, kube-controller-manager, kube-scheduler and kubectl."""

ETCD = "3.6.16"
KWOK = "0.8.0"
HELM = "4.3.1"

DEBIAN_PACKAGES = (
    "slurmctld",
    "slurmd",
    "slurm-client",
    "munge",
    "mosquitto",
    "mosquitto-clients",
    "openssl",
    "util-linux",
    "procps",
    "iputils-ping",
    "debootstrap",
)
"""Debian packages the harness needs (SLURM 22.05 on bookworm, mosquitto 2.0; debootstrap
builds the trixie root that runs SLURM 24.11, see ``slurm_root.py``)."""
