"""The checkpointing training job of the checkpoint-before-requeue e2e tests, and its metrics.

Used by the pod deletion (test_prestop), the preemption (test_priority) and the rollout
(test_rollout): one job script, one way to lay it out for slurmd, one read of the agent's
``slonkd_checkpoint_*`` samples, one check of the signal-to-requeue time they export.
"""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from slonkd_sandbox.kube.cluster import KubeCluster
from slonkd_sandbox.slurm.cluster import SlurmCluster
from tests.e2e.conftest import AgentProcess

CHECKPOINTING_JOB = """#!/bin/bash
# A training loop that checkpoints on USR1 and resumes from its checkpoint when restarted.
dir={dir}
step=$(cat "$dir/state" 2>/dev/null || echo 0)
save() {{ echo "$step" > "$dir/state.tmp" && mv "$dir/state.tmp" "$dir/state"; }}
trap 'save; echo "checkpoint $step" >> "$dir/log"' USR1
echo "start $step restart ${{SLURM_RESTART_COUNT:-0}}" >> "$dir/log"
while true; do step=$((step + 1)); sleep 0.1 & wait $!; done
"""


def checkpointing_job(tmp_path: Path) -> tuple[Path, Path]:
    """Write the job into a fresh ``job`` directory slurmd can write to: (directory, script).

    The job logs ``start <step> restart <n>`` and ``checkpoint <step>`` lines to ``log``.
    """
    work = tmp_path / "job"
    work.mkdir()
    work.chmod(0o777)  # slurmd writes the job's files here
    script = work / "train.sh"
    script.write_text(CHECKPOINTING_JOB.format(dir=work))
    script.chmod(0o755)
    return work, script


def checkpoint_metrics(metrics_url: str) -> dict[tuple[str, str | None], float]:
    """The agent's ``slonkd_checkpoint_*`` samples: (sample name, cause label) -> value."""
    with urllib.request.urlopen(metrics_url, timeout=5) as answer:  # noqa: S310 - http://127.0.0.1
        text = answer.read().decode()
    return {
        (s.name, s.labels.get("cause")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("slonkd_checkpoint_")
    }


REQUEUE_SECONDS = "slonkd_checkpoint_signal_to_requeue_seconds"


def assert_requeue_time_exported(
    agent: AgentProcess, requeued: Mapping[str, Any], cause: str
) -> dict[tuple[str, str | None], float]:
    """The requeue came 3 to 6 s after the signal, and ``agent`` exported that time once.

    ``requeued`` is the hook's ``slurm.jobs_requeued`` line (a 4 s window), ``cause`` the
    label of the export. Returns all the agent's ``slonkd_checkpoint_*`` samples.
    """
    assert 3.0 <= requeued["signal_to_requeue_s"] <= 4 + 2.0, requeued
    exported = checkpoint_metrics(f"{agent.http_url}/metrics")
    assert exported[(f"{REQUEUE_SECONDS}_count", cause)] == 1, exported
    assert exported[(f"{REQUEUE_SECONDS}_sum", cause)] == pytest.approx(
        requeued["signal_to_requeue_s"], abs=0.01
    )
    return exported


def reporting_agent(
    kube: KubeCluster,
    slurm: SlurmCluster,
    namespace: str,
    node_name: str,
    port: int,
    tmp_path: Path,
) -> AgentProcess:
    """The agent of pod w-0 serving /metrics on 127.0.0.1:``port`` (the preStop reports there)."""
    return AgentProcess(
        env={
            **os.environ,
            "POD_NAME": "w-0",
            "POD_NAMESPACE": namespace,
            "NODE_NAME": node_name,
            "KUBECONFIG": str(kube.kubeconfig),
            "SLURM_CONF": str(slurm.conf),
            "SLONKD_RESYNC_S": "2",
            "SLONKD_READY_FILE": str(tmp_path / "ready-w-0"),
            "SLONKD_METRICS_PORT": str(port),
            "SLONKD_METRICS_ADDRESS": "127.0.0.1",
        },
        log=tmp_path / "agent-w-0.log",
    )
