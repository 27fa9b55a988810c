"""The agent's SLURM identity never reaches a job (issue 16 item 1), as the chart renders it.

SLURM has no per-node right: the agent drains its own node with SlurmUser's admin identity,
which could drain any node. The boundary is that jobs (the slurmd container, as their users)
and researchers (the login pod) reach none of the agent's identity: no shared process
namespace, no token, no agent volume, no slurm uid. What a job step can do to SLURM with its
own uid is tested against real SLURM in tests/contract/test_slurm_authority.py.
"""

from __future__ import annotations

from typing import Any

from slonkd_sandbox.chart.helm import Helm
from tests.unit.test_chart_render import helm, one, render, slurm_conf

__all__ = ["helm"]  # the module-scoped fixture, shared

SLURM_UID = 64030
AGENT_ONLY = {"slonkd-token", "kube-api-access", "agent-tmp", "agent-config"}


def _containers(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in [*pod.get("initContainers", []), *pod["containers"]]}


def test_the_agents_identity_is_slurmuser_and_stays_in_its_container(helm: Helm) -> None:
    """Agent: SlurmUser's uid, read-only, no capabilities; slurmd: none of the agent's volumes."""
    objs = render(helm)
    assert "SlurmUser=slurm" in slurm_conf(objs)
    pod = one(objs, "StatefulSet", "rel-gpu")["spec"]["template"]["spec"]
    assert not pod.get("shareProcessNamespace")
    assert pod["automountServiceAccountToken"] is False
    containers = _containers(pod)
    agent, slurmd = containers["slonkd-agent"], containers["slurmd"]
    sc = agent["securityContext"]
    assert (sc["runAsUser"], sc["runAsGroup"]) == (SLURM_UID, SLURM_UID)
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert not {m["name"] for m in slurmd["volumeMounts"]} & AGENT_ONLY
    assert slurmd.get("securityContext", {}).get("runAsUser") != SLURM_UID
    # The munge key forges any uid's credential: root-only in the slurmd container (munged
    # reads it at start), no fsGroup that would make it group-readable, never in the agent.
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["munge-key"]["secret"]["defaultMode"] == 0o400
    assert "fsGroup" not in pod.get("securityContext", {})
    assert "munge-key" not in {m["name"] for m in agent["volumeMounts"]}


def test_researchers_login_pod_holds_no_identity_of_slonkd(helm: Helm) -> None:
    """The login pod (SSH for researchers) mounts no API token and no agent volume."""
    objs = render(helm)
    pod = one(objs, "StatefulSet", "rel-login")["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert not pod.get("shareProcessNamespace")
    for container in _containers(pod).values():
        assert not {m["name"] for m in container.get("volumeMounts", [])} & AGENT_ONLY
