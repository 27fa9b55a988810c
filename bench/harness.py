"""Start-up time and memory of the harness's real services (not part of CI).

Starts, three times each: the Kubernetes control plane (etcd+apiserver ready, then all of
kcm/scheduler/kwok), SLURM with 4 slurmd (all idle), and mosquitto; measures the RSS of
every process of each service and the size of the tool cache. Prints a table, then one JSON
object as the last line.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from slonkd_sandbox.kube.cluster import KubeCluster
from slonkd_sandbox.mosquitto import Mosquitto, MqttUser
from slonkd_sandbox.slurm.cluster import SlurmCluster
from slonkd_sandbox.toolchain import cache_root, ensure_tools

RUNS = 3


def _rss_mb(marker: str) -> float:
    """Total RSS of processes whose command line contains ``marker``."""
    out = subprocess.run(
        ["ps", "-ww", "-eo", "rss,args"], capture_output=True, text=True, check=True
    )
    total_kb = 0
    for line in out.stdout.splitlines()[1:]:
        rss, _, args = line.strip().partition(" ")
        if marker in args and "ps -eo" not in args:
            total_kb += int(rss)
    return total_kb / 1024


def _du_mb(path: Path) -> float:
    out = subprocess.run(["du", "-sm", str(path)], capture_output=True, text=True, check=True)
    return float(out.stdout.split()[0])


def main() -> int:
    """Run the measurements and print the table and the JSON line."""
    t0 = time.monotonic()
    ensure_tools()
    tools_s = time.monotonic() - t0
    results: dict[str, list[float]] = {
        k: []
        for k in (
            "etcd_apiserver_ready_s",
            "kube_all_ready_s",
            "slurm_all_idle_s",
            "mosquitto_up_s",
            "kube_rss_mb",
            "slurm_rss_mb",
            "mosquitto_rss_mb",
        )
    }
    for _ in range(RUNS):
        root = Path(tempfile.mkdtemp(prefix="slonkd-bench-"))
        with KubeCluster(root / "kube") as kube:
            results["etcd_apiserver_ready_s"].append(kube.timings["etcd_apiserver_ready_s"])
            results["kube_all_ready_s"].append(kube.timings["control_plane_ready_s"])
            time.sleep(2)
            results["kube_rss_mb"].append(_rss_mb(str(root / "kube")))
        with SlurmCluster(root / "slurm") as slurm:
            results["slurm_all_idle_s"].append(slurm.started_s)
            results["slurm_rss_mb"].append(_rss_mb(str(root / "slurm")))
        broker = Mosquitto(root / "mqtt", users={"u": MqttUser(password="p")})
        with broker:
            results["mosquitto_up_s"].append(broker.started_s)
            results["mosquitto_rss_mb"].append(_rss_mb(str(root / "mqtt")))
    medians = {k: round(statistics.median(v), 3) for k, v in results.items()}
    medians["tools_warm_check_s"] = round(tools_s, 3)
    medians["tools_cache_mb"] = _du_mb(cache_root())
    print(f"{'measure':<28}{'median':>10}   runs")
    for key, values in results.items():
        print(f"{key:<28}{medians[key]:>10}   {', '.join(f'{v:.2f}' for v in values)}")
    print(f"{'tools_warm_check_s':<28}{medians['tools_warm_check_s']:>10}")
    print(f"{'tools_cache_mb':<28}{medians['tools_cache_mb']:>10}")
    print(json.dumps(medians))
    return 0


if __name__ == "__main__":
    sys.exit(main())
