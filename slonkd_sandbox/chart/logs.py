"""A real-node release's container logs with the kubelet's CRI time stamps.

The kubelet writes every container line with an RFC 3339 nanosecond stamp; ``kubectl logs
--timestamps`` shows it. These stamps order events across containers (slurmctld's drain
against slurmd's shutdown) and time them against the harness's own clock (same machine).
Neighbours: :mod:`slonkd_sandbox.chart.release` (the release), its users
``tests/e2e/test_chart_real.py`` and ``bench/real_node.py``.
"""

from __future__ import annotations

import json
import subprocess
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from slonkd_sandbox.chart.release import Release

Stamped = list[tuple[float, str]]


def cri_time(stamp: str) -> float:
    """A CRI log line's RFC 3339 nanosecond stamp as a Unix time (microseconds kept)."""
    head, _, frac = stamp.rstrip("Z").partition(".")
    return datetime.fromisoformat(f"{head}.{(frac + '000000')[:6]}+00:00").timestamp()


def stamped(text: str) -> Stamped:
    """``kubectl logs --timestamps`` output as (time, line) pairs."""
    out = []
    for line in text.splitlines():
        stamp, _, rest = line.partition(" ")
        try:
            out.append((cri_time(stamp), rest))
        except ValueError:
            continue
    return out


def json_lines(text: str) -> list[dict[str, Any]]:
    """The lines of ``text`` that are JSON objects (slonkd's structured log)."""
    out = []
    for line in text.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            out.append(doc)
    return out


def first(lines: Stamped, *needles: str) -> float | None:
    """The time of the first line holding every needle."""
    return next((t for t, line in lines if all(n in line for n in needles)), None)


def ctl_log(release: Release, since: float) -> Stamped:
    """slurmctld's stamped log lines from ``since`` (a Unix time) on."""
    out = release.kube.kubectl(
        "logs", f"--namespace={release.ns}", release.controller, "-c", "slurmctld", "--timestamps"
    ).stdout
    return [(t, line) for t, line in stamped(out) if t >= since]


def drain_logged_at(release: Release, node: str, since: float, cause: str) -> float | None:
    """When slurmctld logged slonkd's drain reason ``slonkd:<cause>`` on ``node``."""
    return first(ctl_log(release, since), f"node {node} reason set to: slonkd:{cause}")


class LogStream:
    """``kubectl logs -f --timestamps`` of one container, written to a file.

    The apiserver streams the log from the kubelet until the container exits.
    """

    def __init__(self, release: Release, pod: str, container: str, path: Path) -> None:
        self.path = path
        self._out = path.open("w")
        self.proc = subprocess.Popen(
            [
                str(release.kube.kubectl_path),
                f"--kubeconfig={release.kube.kubeconfig}",
                f"--namespace={release.ns}",
                "logs",
                "-f",
                "--timestamps",
                pod,
                "-c",
                container,
            ],
            stdout=self._out,
            stderr=subprocess.STDOUT,
        )

    def ended(self) -> bool:
        """The container exited (the stream ended)."""
        return self.proc.poll() is not None

    def close(self) -> Stamped:
        """Stop streaming; the (time, line) pairs received."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        self._out.close()
        return stamped(self.path.read_text())
