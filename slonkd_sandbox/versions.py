"""Pinned versions of every real service the harness builds or installs.

One place for all of them: the build cache is keyed by these strings, so changing one
rebuilds exactly that tool on the next run.
"""

from __future__ import annotations

KUBERNETES = "1.36.3"
"""kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and the real node's kubelet
(one version: the kubelet must not be newer than the apiserver)."""

COREDNS = "1.15.0"
"""Cluster DNS of the real node (headless Service names resolve to pod IPs)."""

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
    # promtool, for the rule unit tests of the chart's alerts (tests/unit/test_alert_rules.py)
    "prometheus",
    # SLURM accounting: slurmdbd and its database (slonkd_sandbox.accounting)
    "slurmdbd",
    "mariadb-server",
    "mariadb-client",
    # the real node (slonkd_sandbox.realnode.node)
    "containerd",
    "runc",
    "containernetworking-plugins",
    "iptables",
    "conntrack",
    "socat",
    "busybox-static",
    # SLURM 22.05's headers and libslurm.so, which pyslurm is built against
    # (slonkd_sandbox.pyslurm_build; 24.11's come from the root, slurm.root.ensure_dev)
    "libslurm-dev",
)
"""Debian packages the harness needs (SLURM 22.05 on bookworm, mosquitto 2.0; debootstrap
builds the trixie root that runs SLURM 24.11, see ``slurm/root.py``; containerd, runc, the CNI
plugins, socat and busybox-static run the real node and its test images, see
``realnode/node.py``; libslurm-dev builds pyslurm, see ``pyslurm_build.py``)."""

PYSLURM = {
    "22.05": (
        "pyslurm-22.5.x.tar.gz",
        "987ee72d2ac4475400a4b58a983d7e769e82d408",
        "8a9e2f65d8b85988e29bc7589d498bad00f02bd7dbdc39650786c895899eca51",
    ),
    "24.11": (
        "pyslurm-24.11.x.tar.gz",
        "2adb2da8b5a1ca5d1b94d94858dd4c406f9f2f07",
        "d7ab159dcc340a09f6dceaa7fb5499407db50972cba2d94b5b243e2002c42ba8",
    ),
}
"""SLURM release -> pyslurm's source (archive name, upstream commit, sha256 of the archive).

The archives are ``git archive`` of upstream's branches 22.5.x (after v22.5.3) and 24.11.x
(v24.11.0 plus the f-string fix), looked for in ``$SLONKD_VENDOR_DIR`` first, else fetched as
``https://github.com/PySlurm/pyslurm/archive/<commit>.tar.gz`` (see ``pyslurm_build.py``).
pyslurm is GPL-2.0: an optional extra of slonkd, never part of its wheel or images."""

PYSLURM_BUILD_REQUIREMENTS = {
    "22.05": ("cython<3", "setuptools<70", "wheel"),
    "24.11": ("cython>=3.0,<3.1", "setuptools", "wheel", "packaging"),
}
"""What each release's pyslurm build venv installs from PyPI: 22.5.x's setup.py imports
distutils (gone from setuptools 70's shim) and wants Cython < 3; 24.11.x builds with Cython 3.0."""
