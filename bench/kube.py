"""Kubernetes adapter benchmark: event delivery latency, initial sync time and cache memory.

Starts the harness's control plane, then:

1. delivery: an informer watches one pod by label; 300 label patches are made through the
   adapter's transport, each timed from just before the PATCH is sent until the informer's
   handler sees that label value in its cache (median, p99); measured again (200 writes)
   after each scale step, with kwok heartbeating all nodes;
2. sync: for each size (default 1,000 then 5,000) kwok nodes and as many pods bound to them
   (``nodeName`` set, so kwok runs them) are created; a fresh process then builds the
   coordinator's caches (all nodes, the worker pods) and reports the time until both are
   synced and its RSS after a full collection.

Prints a table, then one JSON object as the last line. ``python -m bench.kube [SIZES]``,
e.g. ``python -m bench.kube 1000``. Not part of CI; asserts nothing.
"""

from __future__ import annotations

import asyncio
import gc
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from slonkd.adapters.kube.errors import Call
from slonkd.adapters.kube.informer import CacheEvent, Informer
from slonkd.adapters.kube.sources import coordinator_informers, pod_source
from slonkd.adapters.kube.transport import MERGE_PATCH, KubeTransport
from slonkd.core.kube_objects import WORKER_SELECTOR, Pod
from slonkd_sandbox.fleet import FleetBuilder, FleetShape
from slonkd_sandbox.kube.cluster import KubeCluster
from slonkd_sandbox.kube.kwok import fake_node_body
from slonkd_sandbox.workloads import bound_worker_pod

NS = "bench"
WRITES = 300
SELECTOR = WORKER_SELECTOR


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _node(name: str) -> dict[str, Any]:
    return fake_node_body(
        name,
        labels={"topology.slonk.dev/block": f"b{hash(name) % 64}"},
        capacity={"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"},
    )


async def create_all(transport: KubeTransport, path: str, bodies: list[dict[str, Any]]) -> None:
    """POST each body to ``path``, 16 at a time (a bound fleet's nodes, then its pods)."""
    limit = asyncio.Semaphore(16)
    call = Call(verb="create", resource=path.rsplit("/", 1)[-1])

    async def one(body: dict[str, Any]) -> None:
        async with limit:
            await transport.request(call, "POST", path, body=body, timeout_s=60)

    await asyncio.gather(*(one(b) for b in bodies))


async def delivery(transport: KubeTransport, name: str, writes: int = WRITES) -> list[float]:
    """Seconds from each PATCH to the cache update it causes, on a fresh pod ``name``."""
    informer: Informer[Pod] = Informer(transport, pod_source(NS, label_selector=f"bench={name}"))
    waiting: dict[str, asyncio.Future[float]] = {}

    def on_event(event: CacheEvent[Pod]) -> None:
        fut = waiting.get(event.obj.labels.get("seq", ""))
        if fut is not None and not fut.done():
            fut.set_result(time.monotonic())

    informer.add_handler(on_event)
    path = f"/api/v1/namespaces/{NS}/pods"
    body = bound_worker_pod(name, "none")
    body["metadata"]["labels"] = {"bench": name}
    body["spec"].pop("nodeName")
    body["spec"]["nodeSelector"] = {"slonk.dev/nowhere": "true"}
    await create_all(transport, path, [body])
    task = asyncio.create_task(informer.run())
    try:
        await informer.synced.wait()
        await asyncio.sleep(0.5)
        call = Call(verb="patch", resource="pods", namespace=NS, name=name)
        latencies = []
        loop = asyncio.get_running_loop()
        for i in range(writes):
            waiting[str(i)] = loop.create_future()
            sent = time.monotonic()
            patch = {"metadata": {"labels": {"seq": str(i)}}}
            await transport.request(
                call, "PATCH", f"{path}/{name}", body=patch, content_type=MERGE_PATCH
            )
            seen = await asyncio.wait_for(waiting[str(i)], 30)
            del waiting[str(i)]
            latencies.append(seen - sent)
        return latencies
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def sync_child(kubeconfig: str) -> dict[str, float]:
    """In a fresh process: build the coordinator's caches, report time and memory."""
    base = _rss_mb()
    transport = await KubeTransport.from_kubeconfig(kubeconfig, timeout_s=120)
    nodes, pods = coordinator_informers(transport, NS, pod_selector=SELECTOR)
    begun = time.monotonic()
    tasks = [asyncio.create_task(nodes.run()), asyncio.create_task(pods.run())]
    await asyncio.gather(nodes.synced.wait(), pods.synced.wait())
    took = time.monotonic() - begun
    gc.collect()
    rss = _rss_mb()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await transport.close()
    return {
        "nodes": len(nodes),
        "pods": len(pods),
        "sync_s": took,
        "rss_mb": rss,
        "rss_delta_mb": rss - base,
        "peak_rss_mb": peak,
    }


def _measure_sync(kubeconfig: Path) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-m", "bench.kube", "--sync-child", str(kubeconfig)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


async def scale_to(kube: KubeCluster, transport: KubeTransport, have: int, want: int) -> float:
    """Create nodes and bound pods from ``have`` up to ``want``; seconds it took."""
    begun = time.monotonic()
    shape = FleetShape(slurmds=0, declared=want)  # pods w-0 ... on kwok nodes bench-w-0 ...
    build = FleetBuilder(kube=kube, namespace=NS, shape=shape, labelled=False)
    nodes, pods = build.bound("bench-", shape.names[have:want], node_body=_node)
    await create_all(transport, "/api/v1/nodes", nodes)
    await create_all(transport, f"/api/v1/namespaces/{NS}/pods", pods)
    return time.monotonic() - begun


async def run(sizes: list[int]) -> dict[str, Any]:
    """All measurements against one control plane."""
    root = Path(tempfile.mkdtemp(prefix="slonkd-bench-kube-"))
    results: dict[str, Any] = {}
    try:
        return await _measure_all(root, sizes, results)
    finally:
        shutil.rmtree(root, ignore_errors=True)  # etcd holds hundreds of MB after 5,000


async def _measure_all(root: Path, sizes: list[int], results: dict[str, Any]) -> dict[str, Any]:
    with KubeCluster(root / "kube", node_monitor_grace_period="1h") as kube:
        kube.create_namespace(NS)
        transport = await KubeTransport.from_kubeconfig(kube.kubeconfig, timeout_s=60)
        try:
            lat = sorted(await delivery(transport, "delivery"))
            results["delivery_median_ms"] = statistics.median(lat) * 1000
            results["delivery_p99_ms"] = lat[int(len(lat) * 0.99) - 1] * 1000
            results["delivery_max_ms"] = lat[-1] * 1000
            have = 0
            for size in sizes:
                results[f"create_{size}_s"] = await scale_to(kube, transport, have, size)
                have = size
                await asyncio.sleep(5)  # let kwok mark the pods Running
                runs = [_measure_sync(kube.kubeconfig) for _ in range(2)]
                best = min(runs, key=lambda r: r["sync_s"])
                results[f"sync_{size}_s"] = best["sync_s"]
                results[f"cache_rss_{size}_mb"] = best["rss_mb"]
                results[f"cache_rss_delta_{size}_mb"] = best["rss_delta_mb"]
                results[f"peak_rss_{size}_mb"] = best["peak_rss_mb"]
                results[f"synced_objects_{size}"] = best["nodes"] + best["pods"]
                loaded = sorted(await delivery(transport, f"delivery-{size}", writes=200))
                results[f"delivery_p99_at_{size}_ms"] = loaded[int(len(loaded) * 0.99) - 1] * 1000
        finally:
            await transport.close()
    return results


def main() -> int:
    """Run, print the table and the JSON line."""
    if len(sys.argv) == 3 and sys.argv[1] == "--sync-child":
        print(json.dumps(asyncio.run(sync_child(sys.argv[2]))))
        return 0
    sizes = [int(s) for s in sys.argv[1].split(",")] if len(sys.argv) > 1 else [1000, 5000]
    results = asyncio.run(run(sizes))
    width = max(len(k) for k in results)
    for key, value in results.items():
        print(f"{key:<{width}}  {value:10.2f}")
    print(json.dumps({k: round(v, 3) for k, v in results.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
