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
)
"""Debian packages the harness needs (SLURM 22.05 on bookworm, mosquitto 2.0; debootstrap
builds the trixie root that runs SLURM 24.11, see ``slurm/root.py``; containerd, runc, the CNI
plugins, socat and busybox-static run the real node and its test images, see
``realnode/node.py``)."""
