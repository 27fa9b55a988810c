"""The bus end to end: an agent bootstraps its MQTT client from its pod token, then obeys a recheck.

Real processes against the real services, configured as the chart configures them:
``slonkd coordinator`` (only the dynsec admin's secret: it makes its own bus client, serves
the credential issuer, leads) and a ``slonkd agent`` whose only MQTT secret is a pod-bound
token minted by TokenRequest for its worker pod. The agent fetches its own credentials,
connects to a dynsec mosquitto, learns the leader's fencing token from the retained
coordinator status, and obeys a ``recheck`` sent through ``POST /v1/nodes/{node}/recheck``
(loopback only) by republishing its status.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from slonkd_sandbox.daemon import Coordinators, coordinator_env
from slonkd_sandbox.mosquitto import Mosquitto
from slonkd_sandbox.procs import free_ports, wait_for
from tests.contract.bus_helpers import dynsec_admin
from tests.e2e.conftest import Workers

pytestmark = [pytest.mark.kube, pytest.mark.slurm, pytest.mark.mqtt]

AUDIENCE = "slonkd-bus"


def _post(url: str, token: str = "") -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(url, method="POST", data=b"", headers=headers)  # noqa: S310 - a test URL
    try:
        with urllib.request.urlopen(request, timeout=10) as r:  # noqa: S310 - a test URL
            return int(r.status), json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), json.loads(exc.read() or b"{}")


def _get_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:  # noqa: S310 - a test URL
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


def _retained_status(broker: Mosquitto, node: str) -> dict[str, Any]:
    """The retained status of ``node`` as the broker holds it now (read as the admin)."""
    return _retained(broker, f"slonk/v1/lab/nodes/{node}/status")


def _retained(broker: Mosquitto, topic: str) -> dict[str, Any]:
    """The retained message of ``topic`` as the broker holds it now (read as the admin)."""
    out = subprocess.run(
        [
            "mosquitto_sub", "-h", broker.host, "-p", str(broker.port), "-u", broker.admin_user,
            "-P", broker.admin_password, "-t", topic,
            "-C", "1", "-W", "3", "--retained-only",
        ],
        capture_output=True, text=True, timeout=10, check=False,
    )  # fmt: skip
    return dict(json.loads(out.stdout)) if out.stdout.strip() else {}


def _outward_address() -> str | None:
    """The host's non-loopback IPv4 address, if it has one (no packet is sent)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))
            address = str(s.getsockname()[0])
    except OSError:
        return None
    return None if address.startswith("127.") else address


def test_agent_bootstraps_credentials_from_its_pod_token_and_obeys_a_recheck(
    workers: Workers, session_root: Path, tmp_path: Path, coordinators: Coordinators
) -> None:
    """A pod token gets the agent connected; a recheck is obeyed once, the status republished."""
    w = workers
    broker = Mosquitto(
        Path(tempfile.mkdtemp(prefix="e2e-dynsec-", dir=session_root)), dynamic_security=True
    )
    broker.start()
    try:
        # no pod w-gone: swept at leader start
        asyncio.run(dynsec_admin(broker).issue("lab", "w-gone"))
        api_port = free_ports(1)[0]
        config = tmp_path / "coordinator.json"
        config.write_text(json.dumps({"api_host": "0.0.0.0", "api_port": api_port, "resync_s": 1}))  # noqa: S104 - the test reaches it from outside loopback too
        mqtt = {"SLONKD_MQTT_HOST": broker.host, "SLONKD_MQTT_PORT": str(broker.port)}
        env = coordinator_env(
            namespace=w.namespace,
            kubeconfig=w.kube.kubeconfig,
            slurm_conf=w.slurm.conf,
            **mqtt,
            SLONKD_AGENT_SERVICE_ACCOUNT=f"system:serviceaccount:{w.namespace}:default",
            SLONKD_MQTT_ADMIN_USERNAME=broker.admin_user,
            SLONKD_MQTT_ADMIN_PASSWORD=broker.admin_password,
            SLONKD_TOKEN_AUDIENCE=AUDIENCE,
        )
        coordinator = coordinators.start(env, config=config, timeout_s=60)  # leads, synced
        base = f"http://127.0.0.1:{api_port}"
        wait_for(  # its status answers once a first pass is done
            "the coordinator's first pass",
            lambda: _get_status(f"{base}/v1/status") == 200,
            timeout_s=60,
            alive=coordinator.exited,
        )

        pod = w.kube.api.request("GET", f"/api/v1/namespaces/{w.namespace}/pods/w-0")
        token = w.kube.create_token(
            w.namespace, "default", bound_pod=("w-0", pod["metadata"]["uid"]), audiences=(AUDIENCE,)
        )
        token_file = tmp_path / "token"
        token_file.write_text(token)
        agent = w.agents["w-0"]
        agent.stop()
        agent.env.update(
            {
                **mqtt,
                "SLONKD_COORDINATOR_URL": base,  # as the chart sets it: bootstrap from there
                "SLONKD_TOKEN_FILE": str(token_file),
            }
        )
        agent.start()
        wait_for("the agent connected", lambda: bool(agent.events("bus.connected")), timeout_s=30)
        issued = coordinator.events("bus.credentials_issued")
        assert [e["node"] for e in issued] == ["w-0"]
        wait_for(
            "the leader's token seen",
            lambda: bool(agent.events("agent.leader_seen")),
            timeout_s=30,
        )
        leader_token = agent.events("agent.leader_seen")[-1]["fencing_token"]

        sent = subprocess.run(  # the operator's command, from "inside the coordinator's pod"
            [sys.executable, "-m", "slonkd.cli.main", "recheck", "w-0", "--url", base],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert sent.returncode == 0, sent.stderr
        body = json.loads(sent.stdout)
        assert body["fencing_token"] == leader_token
        wait_for(
            "the recheck obeyed",
            lambda: any(
                e.get("command_id") == body["id"] for e in agent.events("agent.command_obeyed")
            ),
            timeout_s=30,
        )

        def republished() -> bool:
            lines = agent.events()
            at = next(i for i, e in enumerate(lines) if e.get("event") == "agent.command_obeyed")
            return any(e.get("event") == "agent.status_published" for e in lines[at:])

        wait_for("the status republished after the recheck", republished, timeout_s=30)
        assert len(agent.events("agent.command_obeyed")) == 1
        assert _post(f"{base}/v1/nodes/nobody/recheck")[0] == 404
        unknown = subprocess.run(
            [sys.executable, "-m", "slonkd.cli.main", "recheck", "nobody", "--url", base],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert unknown.returncode == 1
        assert "404" in unknown.stderr
        outward = _outward_address()
        if outward is not None:  # the endpoint is bound to loopback: any other peer gets 403
            assert _post(f"http://{outward}:{api_port}/v1/nodes/w-0/recheck")[0] == 403

        # A replayed token gets the same credentials and leaves the running agent connected.
        assert _post(f"{base}/v1/credentials", token)[0] == 200
        # Its client deleted under it: the broker drops it, it fetches credentials again,
        # reconnects, and its retained status still says online.
        asyncio.run(dynsec_admin(broker).revoke("w-0"))
        wait_for(
            "the agent reconnected",
            lambda: len(agent.events("bus.connected")) >= 2,
            timeout_s=30,
        )

        def online() -> bool:
            return bool(_retained_status(broker, "w-0").get("online"))

        wait_for("the retained status online again", online, timeout_s=30)
        assert len(agent.events("bus.bootstrap_done")) == 2
        assert len(agent.events("bus.connected")) == 2  # the replay kicked nobody
        # The leader swept the client left by a pod that was gone before it started.
        assert "agent-w-gone" not in asyncio.run(dynsec_admin(broker).clients())
        for path in (agent.log, coordinator.log):
            text = path.read_text()
            assert token not in text
            assert '"password"' not in text

        # The leader dies without a goodbye: its last will says so, retained, to every agent.
        coordinator_topic = "slonk/v1/lab/coordinator/status"
        assert _retained(broker, coordinator_topic).get("online") is True
        coordinator.kill()
        wait_for(
            "the coordinator's will (offline)",
            lambda: _retained(broker, coordinator_topic).get("online") is False,
            timeout_s=30,
        )
    finally:
        coordinators.stop()  # before its broker
        broker.stop()
