"""Values the coordinator writes: label-safe taint values and the audit's "before" texts.

Used by the executors (:mod:`.executing`) and the remediation steps (:mod:`.remediating`).
"""

from __future__ import annotations

import re

from slonkd.core.kube_objects import Node
from slonkd.core.slurm_node import SlurmNode


def label_value(text: str) -> str:
    """``text`` as a valid label (and taint) value: ``[A-Za-z0-9._-]``, 63 chars, alnum ends."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", ".", text)[:63].strip("._-")
    return cleaned or "slonkd"


def slurm_text(node: SlurmNode | None) -> str:
    """A SLURM node's state and reason, for the audit log (``unread``: not in the read)."""
    if node is None:
        return "unread"
    return f"{node.state} reason={node.live_reason!r}"


def kube_text(node: Node) -> str:
    """A K8s node's cordon, taints and readiness, for the audit log."""
    taints = ",".join(sorted(t.key for t in node.taints))
    return f"unschedulable={node.unschedulable} taints=[{taints}] ready={node.ready}"
