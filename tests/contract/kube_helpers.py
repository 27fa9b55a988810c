"""Helpers shared by the Kubernetes contract tests: run an informer, poll, make pods, a PDB."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any, TypeVar

from slonkd.adapters.kube.informer import CacheEvent, Informer
from slonkd_sandbox.kube.cluster import KubeCluster
from slonkd_sandbox.procs import wait_for
from slonkd_sandbox.workloads import pod_disruption_budget, worker_statefulset

T = TypeVar("T")


@asynccontextmanager
async def running(informer: Informer[T], *, sync_s: float = 30.0) -> AsyncIterator[Informer[T]]:
    """Run ``informer`` in a task for the body of the block, synced before the body starts."""
    task = asyncio.create_task(informer.run())
    try:
        async with asyncio.timeout(sync_s):
            await informer.synced.wait()
        yield informer
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task


def recorder(informer: Informer[T]) -> list[CacheEvent[T]]:
    """A list that receives every later event of ``informer``."""
    events: list[CacheEvent[T]] = []
    informer.add_handler(events.append)
    return events


async def until(what: str, check: Callable[[], bool], *, timeout_s: float = 30.0) -> float:
    """Poll ``check`` on the event loop until it is true; the seconds it took."""
    begun = time.monotonic()
    while not check():
        if time.monotonic() - begun > timeout_s:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.02)
    return time.monotonic() - begun


def pending_pod(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod no node can take: it stays Pending, and a delete removes it at once."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {"app": "w"}},
        "spec": {
            "containers": [{"name": "c", "image": "slonk/none:dev"}],
            "nodeSelector": {"slonk.dev/nowhere": "true"},
            "automountServiceAccountToken": False,
        },
    }


def pods_of(kube: KubeCluster, namespace: str) -> list[dict[str, Any]]:
    """The pods of ``namespace`` as the apiserver lists them."""
    return list(kube.api.request("GET", f"/api/v1/namespaces/{namespace}/pods")["items"])


def two_workers_under_a_pdb(kube: KubeCluster, namespace: str, nodes: list[str]) -> str:
    """StatefulSet w's two pods Running on kwok ``nodes``, PDB w (minAvailable 2) seeing both.

    Returns the PDB's path.
    """
    label = {"slonk.dev/test": namespace}
    kube.add_fake_nodes(nodes, labels=label)
    sts = worker_statefulset("w", replicas=2, node_selector=label, standin=False)
    kube.api.request("POST", f"/apis/apps/v1/namespaces/{namespace}/statefulsets", sts)

    def running() -> int:
        return sum(p.get("status", {}).get("phase") == "Running" for p in pods_of(kube, namespace))

    wait_for("2 pods Running", lambda: running() == 2, timeout_s=60)
    pdbs = f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets"
    pdb = pod_disruption_budget("w", selector={"slonk.dev/pool": "w"}, min_available=2)
    kube.api.request("POST", pdbs, pdb)
    wait_for(
        "PDB observed",
        lambda: kube.api.request("GET", f"{pdbs}/w").get("status", {}).get("currentHealthy") == 2,
        timeout_s=30,
    )
    return f"{pdbs}/w"


def allow_one_disruption(kube: KubeCluster, pdb: str) -> None:
    """Lower the PDB at path ``pdb`` to minAvailable 1 and wait until it allows one eviction."""
    kube.api.request(
        "PATCH", pdb, {"spec": {"minAvailable": 1}}, content_type="application/merge-patch+json"
    )
    wait_for(
        "PDB allows one disruption",
        lambda: kube.api.request("GET", pdb)["status"].get("disruptionsAllowed") == 1,
        timeout_s=30,
    )
