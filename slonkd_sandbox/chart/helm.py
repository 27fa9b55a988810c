"""Helm (built by :mod:`slonkd_sandbox.toolchain`) against a harness control plane.

Runs the pinned helm binary with argv lists, a private HELM_*_HOME (so parallel sessions
never share repository caches or plugins) and, when given, the harness's admin kubeconfig.
Templates come back as text: callers parse the YAML they need.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from slonkd_sandbox.procs import HarnessError

CHART_DIR = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "slonk"
"""The slonk chart of a source checkout."""

HELM_TIMEOUT_S = 180.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Helm:
    """One helm binary, one private home, optionally one cluster."""

    binary: Path
    home: Path
    kubeconfig: Path | None = None

    def run(
        self, *args: str, check: bool = True, timeout_s: float = HELM_TIMEOUT_S
    ) -> subprocess.CompletedProcess[str]:
        """Run ``helm ARGS``; raises with helm's stderr when ``check`` and it fails."""
        env = {
            **os.environ,
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_CACHE_HOME": str(self.home / "cache"),
            "HELM_DATA_HOME": str(self.home / "data"),
        }
        argv = [str(self.binary), *args]
        if self.kubeconfig is not None:
            argv.append(f"--kubeconfig={self.kubeconfig}")
        proc = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
        )
        if check and proc.returncode != 0:
            raise HarnessError(f"helm {' '.join(args[:2])} failed: {proc.stderr[-2000:]}")
        return proc

    def template(
        self,
        release: str,
        *,
        namespace: str = "default",
        values: Sequence[Path] = (),
        set_json: Sequence[str] = (),
        chart: Path = CHART_DIR,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        """``helm template`` of the chart; stdout is the rendered YAML stream."""
        return self.run(
            "template",
            release,
            str(chart),
            f"--namespace={namespace}",
            *value_args(values, set_json),
            check=check,
        )


def value_args(values: Sequence[Path] = (), set_json: Sequence[str] = ()) -> list[str]:
    """``--values`` and ``--set-json`` arguments, for template, install and upgrade."""
    return [f"--values={v}" for v in values] + [f"--set-json={s}" for s in set_json]


__all__ = ["CHART_DIR", "Helm", "value_args"]
