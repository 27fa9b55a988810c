"""Bus benchmark: credential bootstrap latency and fenced command delivery latency.

Starts the harness's control plane and a dynsec mosquitto, runs the coordinator's HTTP API
with a real credential issuer in-process, then:

1. bootstrap: for each of ``PODS`` worker pods, mint a pod-bound token (TokenRequest) and time
   the agent's real bootstrap client from the POST to the answer (TokenReview, worker-pod
   lookup, dynsec re-key), then the first MQTT connect with the issued password;
2. refusal: the same for a garbage token (one TokenReview, 401);
3. commands: ``COMMANDS`` fenced ``recheck`` commands, each timed from ``CommandSender.send``
   until the agent's ``CommandListener`` obeyed it (QoS 1 through the broker, dynsec ACLs).

Prints a table, then one JSON object as the last line. ``python -m bench.bus``. Not part of
CI; asserts nothing.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp
import aiomqtt

from slonkd.adapters.bus.bootstrap import BootstrapSettings, fetch_credentials
from slonkd.adapters.bus.client import Bus, BusSettings
from slonkd.adapters.bus.dynsec import DynSecAdmin
from slonkd.adapters.bus.dynsec_roles import coordinator_role
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.core.command_gate import RECHECK
from slonkd.core.kube_objects import WORKER_LABELS, WORKER_SELECTOR
from slonkd.core.messages import AgentStatus, Channel, Command, node_topic
from slonkd.runtime.agent.commands import CommandListener, agent_bus
from slonkd.runtime.coordinating.api import CoordinatorAPI
from slonkd.runtime.coordinating.commands import CommandSender
from slonkd.runtime.coordinating.credentials import CredentialIssuer, CredentialSettings
from slonkd_sandbox.kube.cluster import KubeCluster
from slonkd_sandbox.mosquitto import Mosquitto

NS = "bench-bus"
PODS = 100
COMMANDS = 200
AUDIENCE = "slonkd-bus"
CLUSTER = "lab"


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _pod(name: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": dict(WORKER_LABELS)},
        "spec": {
            "containers": [{"name": "c", "image": "slonk/none:dev"}],
            "nodeSelector": {"slonk.dev/nowhere": "true"},
        },
    }


async def _bootstrap(
    kube: KubeCluster, url: str, tmp: Path, broker: Mosquitto
) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"issue_ms": [], "connect_ms": [], "refuse_ms": []}
    for i in range(PODS):
        name = f"w-{i}"
        made = kube.api.request("POST", f"/api/v1/namespaces/{NS}/pods", _pod(name))
        token = kube.create_token(
            NS, "default", bound_pod=(name, made["metadata"]["uid"]), audiences=(AUDIENCE,)
        )
        path = tmp / f"token-{i}"
        path.write_text(token)
        began = time.perf_counter()
        creds = await fetch_credentials(BootstrapSettings(url=url, token_file=str(path)))
        issued = time.perf_counter()
        async with aiomqtt.Client(
            broker.host,
            broker.port,
            username=creds.username,
            password=creds.password,
            identifier=creds.client_id,
            protocol=aiomqtt.ProtocolVersion.V5,
        ):
            connected = time.perf_counter()
        out["issue_ms"].append((issued - began) * 1000)
        out["connect_ms"].append((connected - issued) * 1000)
    async with aiohttp.ClientSession() as session:
        for _ in range(PODS):
            began = time.perf_counter()
            async with session.post(url, headers={"Authorization": "Bearer garbage"}) as r:
                await r.read()
            out["refuse_ms"].append((time.perf_counter() - began) * 1000)
    return out


async def _commands(broker: Mosquitto, admin: DynSecAdmin) -> list[float]:
    await admin.ensure_client(
        "coordinator",
        "coordinator-pw",
        coordinator_role(CLUSTER, "coordinator"),
        client_id="slonkd-coordinator-bench",
    )
    creds = await admin.issue(CLUSTER, "n1")

    def settings(user: str, password: str, cid: str) -> BusSettings:
        return BusSettings(
            host=broker.host, port=broker.port, username=user, password=password, client_id=cid
        )

    obeyed: dict[str, float] = {}
    arrived = asyncio.Event()

    async def recheck(command: Command) -> None:
        obeyed[command.id] = time.perf_counter()
        arrived.set()

    topic = node_topic(CLUSTER, "n1", Channel.STATUS)
    abus = agent_bus(
        settings(creds.username, creds.password, "slonkd-agent-n1"),
        cluster=CLUSTER,
        node="n1",
        will=(topic, AgentStatus(node="n1", online=False)),
    )
    listener = CommandListener(abus, node="n1", recheck=recheck)
    cbus = Bus(settings("coordinator", "coordinator-pw", "slonkd-coordinator-bench"))
    sender = CommandSender(cbus, cluster=CLUSTER, identity="bench", check_valid=lambda: 1)
    latencies: list[float] = []
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(t) for t in (abus.run(), listener.run(), cbus.run())]
        await abus.wait_connected(20)
        await cbus.wait_connected(20)
        for _ in range(COMMANDS):
            arrived.clear()
            began = time.perf_counter()
            command = await sender.send("n1", RECHECK, cause="bench")
            while command.id not in obeyed:
                await arrived.wait()
                arrived.clear()
            latencies.append((obeyed[command.id] - began) * 1000)
        for task in tasks:
            task.cancel()
    return latencies


async def _run(kube: KubeCluster, broker: Mosquitto, tmp: Path) -> dict[str, float]:
    kube.create_namespace(NS)
    admin = DynSecAdmin(
        host=broker.host,
        port=broker.port,
        username=broker.admin_user,
        password=broker.admin_password,
    )
    async with await KubeTransport.from_kubeconfig(kube.kubeconfig) as transport:
        issuer = CredentialIssuer(
            CredentialSettings(
                admin_host=broker.host,
                admin_port=broker.port,
                admin_user=broker.admin_user,
                admin_password=broker.admin_password,
                audiences=(AUDIENCE,),
                # every bench pod comes from 127.0.0.1 (in a cluster each has its own IP)
                source_burst=4 * PODS,
                global_burst=4 * PODS,
            ),
            transport=transport,
            admin=admin,
            namespace=NS,
            cluster=CLUSTER,
            pod_selector=WORKER_SELECTOR,
        )
        api = CoordinatorAPI(identity="bench", holder=lambda: "")
        api.credentials = issuer
        await api.start("127.0.0.1", 0)
        try:
            boot = await _bootstrap(
                kube, f"http://127.0.0.1:{api.port}/v1/credentials", tmp, broker
            )
        finally:
            await api.stop()
    commands = await _commands(broker, admin)
    result: dict[str, float] = {}
    for key, values in {**boot, "command_ms": commands}.items():
        result[f"{key}_median"] = statistics.median(values)
        result[f"{key}_p99"] = _pct(values, 0.99)
    return result


def main() -> int:
    """Run the measurements and print the table and the JSON line."""
    root = Path(tempfile.mkdtemp(prefix="bench-bus-"))
    with (
        KubeCluster(root / "kube") as kube,
        Mosquitto(root / "mqtt", dynamic_security=True) as broker,
    ):
        result = asyncio.run(_run(kube, broker, root))
    print(f"{'measure':<28}{'median ms':>12}{'p99 ms':>12}")
    for key in ("issue_ms", "connect_ms", "refuse_ms", "command_ms"):
        print(f"{key:<28}{result[f'{key}_median']:>12.1f}{result[f'{key}_p99']:>12.1f}")
    print(
        json.dumps(
            {k: round(v, 2) for k, v in result.items()} | {"pods": PODS, "commands": COMMANDS}
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
