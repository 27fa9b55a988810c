"""An informer whose RBAC is taken away under it keeps running, says so once, and recovers.

Against the real kube-apiserver: a ServiceAccount with a Role to list and watch pods runs an
informer; its RoleBinding is deleted (every later list and watch: 403) and created again.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, MutableMapping
from contextlib import asynccontextmanager, suppress
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import structlog

from slonkd.adapters.kube.informer import Informer, InformerSettings
from slonkd.adapters.kube.kubeconfig import ApiEndpoint
from slonkd.adapters.kube.sources import pod_source
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.core.kube_objects import Pod
from slonkd.runtime.agent.sidecar import informers_ready
from slonkd_sandbox.kube.cluster import KubeCluster
from tests.contract.kube_helpers import pending_pod, until

pytestmark = pytest.mark.kube

RBAC = "/apis/rbac.authorization.k8s.io/v1"
# watches end after a second, so a revoked binding is met at the next reconnect
QUICK = InformerSettings(backoff_initial_s=0.05, backoff_max_s=0.3, watch_timeout_s=(1, 1))


def _binding(ns: str) -> dict[str, object]:
    return {
        "metadata": {"name": "pod-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}],
    }


async def _reader(kube: KubeCluster, ns: str, tmp_path: Path) -> KubeTransport:
    """A transport for ServiceAccount ``reader``, allowed to list and watch pods of ``ns``."""
    kube.api.request(
        "POST", f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": "reader"}}
    )
    kube.api.request(
        "POST",
        f"{RBAC}/namespaces/{ns}/roles",
        {
            "metadata": {"name": "pod-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}],
        },
    )
    kube.api.request("POST", f"{RBAC}/namespaces/{ns}/rolebindings", _binding(ns))
    path = tmp_path / "reader.kubeconfig"
    path.write_text(
        kube.kubeconfig_for(kube.create_token(ns, "reader"), user="reader", namespace=ns)
    )
    return await KubeTransport.from_kubeconfig(path)


@asynccontextmanager
async def _refused(
    transport: KubeTransport, namespace: str, revoke: Callable[[], object], status: str
) -> AsyncIterator[tuple[Informer[Pod], asyncio.Task[None], list[MutableMapping[str, Any]]]]:
    """A synced pod informer over ``transport``, refused (``status``) since ``revoke``, running.

    Yields it, its task and the log lines captured from its start to the end of the block;
    afterwards the task is cancelled and the transport closed.
    """
    informer = Informer(transport, pod_source(namespace, label_selector="app=w"), QUICK)
    task = asyncio.create_task(informer.run())
    try:
        with structlog.testing.capture_logs() as logs:
            async with asyncio.timeout(30):
                await informer.synced.wait()
            revoke()
            await until("a refused attempt", lambda: informer.stats.reconnects > 0 or task.done())
            assert not task.done(), task.exception()
            assert status in str(informer.refused)
            yield informer, task, logs
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
        await transport.close()


async def test_an_informer_refused_by_rbac_keeps_running_says_so_once_and_recovers(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    """A revoked RoleBinding does not end a running informer; it recovers when restored.

    It retries with capped backoff, logs one ``kube.informer_refused`` (not one per attempt)
    and reports ``refused`` (the agent's readiness is false, saying why); once the binding is
    back it lists again, logs ``kube.informer_recovered`` once and follows the server (a pod
    made meanwhile arrives).
    """
    transport = await _reader(kube, namespace, tmp_path)
    binding = f"{RBAC}/namespaces/{namespace}/rolebindings/pod-reader"
    revoke = partial(kube.api.request, "DELETE", binding)
    async with _refused(transport, namespace, revoke, "403") as (informer, task, logs):
        ready, why = informers_ready(("pod", informer))
        assert not ready
        assert why.startswith("pod informer refused: ")
        assert "403" in why
        attempts = informer.stats.reconnects
        await until("several attempts", lambda: informer.stats.reconnects >= attempts + 5)
        assert not task.done()
        kube.api.request("POST", f"/api/v1/namespaces/{namespace}/pods", pending_pod("p1"))
        lists = informer.stats.lists
        kube.api.request("POST", f"{RBAC}/namespaces/{namespace}/rolebindings", _binding(namespace))
        await until("recovered", lambda: informer.refused is None and informer.stats.lists > lists)
        await until("p1 cached", lambda: informer.get(f"{namespace}/p1") is not None)
        assert informers_ready(("pod", informer)) == (True, "ready")
        await asyncio.sleep(1.5)  # a watch or two more after the recovery: still quiet
    events = [e["event"] for e in logs]
    assert events.count("kube.informer_refused") == 1, events
    assert events.count("kube.informer_recovered") == 1, events
    assert "kube.watch_reconnecting" not in events  # no line per refused attempt
    refused = next(e for e in logs if e["event"] == "kube.informer_refused")
    assert refused["log_level"] == "error"
    assert "403" in refused["error"]


async def test_an_informer_whose_token_is_rejected_waits_for_a_good_one(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    """A rejected token (401) leaves the informer running; a fresh one brings it back.

    The token stops working when its ServiceAccount is deleted: the informer stays running
    and refused. A fresh token in the token file (as the kubelet rotates it) brings it back
    without a restart.
    """
    await (await _reader(kube, namespace, tmp_path)).close()  # SA, Role and binding
    token_file = tmp_path / "token"
    token_file.write_text(kube.create_token(namespace, "reader"))
    endpoint = ApiEndpoint(
        server=kube.server, ca_file=str(kube.ca_file), token_file=str(token_file)
    )
    transport = KubeTransport(endpoint, token_refresh_s=0.2)
    accounts = f"/api/v1/namespaces/{namespace}/serviceaccounts"
    revoke = partial(kube.api.request, "DELETE", f"{accounts}/reader")
    async with _refused(transport, namespace, revoke, "401") as (informer, _, logs):
        kube.api.request("POST", accounts, {"metadata": {"name": "reader"}})
        token_file.write_text(kube.create_token(namespace, "reader"))
        await until("recovered", lambda: informer.refused is None)
    events = [e["event"] for e in logs]
    assert events.count("kube.informer_refused") == 1, events
    assert events.count("kube.informer_recovered") == 1, events
