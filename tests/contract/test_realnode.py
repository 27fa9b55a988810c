"""Contract of the real node (slonkd_sandbox.realnode.node): every test fails on a faked node.

A kwok node or the kubelet stand-in runs no container, has no container log, runs no preStop,
mounts no projected token and has no DNS; each test below needs the real thing. The network
test only ever addresses TEST-NET-2 (198.51.100.0/24, never routed anywhere) and first asks
the kernel that the node has no route to it; no test addresses a ClusterIP.
"""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slonkd_sandbox import procs
from slonkd_sandbox.kube.api import ApiError
from slonkd_sandbox.realnode import host as realnode_host
from slonkd_sandbox.realnode.node import RealNode

pytestmark = [pytest.mark.kube, pytest.mark.real]

OFF_MACHINE = "198.51.100.1"
"""TEST-NET-2: not this machine. (192.0.2.1, TEST-NET-1, is this VM's real gateway.)"""


@pytest.fixture
def ns(real_node: RealNode) -> Iterator[str]:
    """A fresh namespace on the real node's control plane, deleted afterwards."""
    name = f"rn-{secrets.token_hex(4)}"
    real_node.cluster.create_namespace(name)
    yield name
    real_node.cluster.api.request("DELETE", f"/api/v1/namespaces/{name}", ok=(200, 202, 404))


def container(node: RealNode, name: str, script: str, **extra: Any) -> dict[str, Any]:
    """A busybox container running ``script`` with ``sh -c``."""
    return {
        "name": name,
        "image": node.image,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", script],
        **extra,
    }


def pod_body(
    node: RealNode,
    name: str,
    containers: list[dict[str, Any]],
    *,
    labels: dict[str, str] | None = None,
    restart: str = "Always",
    grace_s: int = 2,
    **spec: Any,
) -> dict[str, Any]:
    """A pod bound to ``node`` (no ServiceAccount token unless asked for)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "nodeName": node.name,
            "containers": containers,
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": grace_s,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            **spec,
        },
    }


def create(node: RealNode, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST a pod."""
    result: dict[str, Any] = node.cluster.api.request("POST", f"/api/v1/namespaces/{ns}/pods", body)
    return result


def get_pod(node: RealNode, ns: str, name: str) -> dict[str, Any]:
    """GET a pod."""
    result: dict[str, Any] = node.cluster.api.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
    return result


def wait_phase(
    node: RealNode, ns: str, name: str, *phases: str, timeout_s: float = 60
) -> dict[str, Any]:
    """Wait until the pod is in one of ``phases`` (and Ready if that is Running)."""
    seen: dict[str, Any] = {}

    def reached() -> bool:
        seen.update(get_pod(node, ns, name))
        status = seen.get("status", {})
        if status.get("phase") not in phases:
            return False
        if status.get("phase") != "Running":
            return True
        return any(
            c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", [])
        )

    try:
        procs.wait_for(f"pod {name} {phases}", reached, timeout_s=timeout_s, interval_s=0.2)
    except procs.HarnessError as exc:
        raise AssertionError(f"{exc}; last status: {seen.get('status')}") from exc
    return seen


def logs(node: RealNode, ns: str, name: str, container_name: str | None = None) -> str:
    """The container's log through the apiserver's pods/log (the kubelet serves it)."""
    params = {"container": container_name} if container_name else None
    path = f"/api/v1/namespaces/{ns}/pods/{name}/log"
    return str(node.cluster.api.request("GET", path, params=params))


def wait_log(node: RealNode, ns: str, name: str, pattern: str, timeout_s: float = 30) -> str:
    """Poll pods/log until it matches ``pattern``; return the log."""
    text = ""

    def matches() -> bool:
        nonlocal text
        text = logs(node, ns, name)
        return re.search(pattern, text) is not None

    try:
        procs.wait_for(f"log of {name}", matches, timeout_s=timeout_s, interval_s=0.2)
    except procs.HarnessError as exc:
        raise AssertionError(f"{exc}; log so far: {text!r}") from exc
    return text


def wait_gone(node: RealNode, ns: str, name: str, timeout_s: float = 60) -> float:
    """Wait until the pod object is deleted; the seconds it took."""

    def gone() -> bool:
        try:
            get_pod(node, ns, name)
        except ApiError as exc:
            return exc.status == 404
        return False

    return procs.wait_for(f"pod {name} gone", gone, timeout_s=timeout_s, interval_s=0.1)


def test_a_pods_container_runs_and_its_log_is_readable(real_node: RealNode, ns: str) -> None:
    """A container prints a token and its cgroup; pods/log (served by the kubelet) has both."""
    token = secrets.token_hex(8)
    script = f"echo hello-{token}; grep memory /proc/self/cgroup; sleep 3600"
    create(real_node, ns, pod_body(real_node, "hello", [container(real_node, "main", script)]))
    pod = wait_phase(real_node, ns, "hello", "Running")
    assert ipaddress.ip_address(pod["status"]["podIP"]) in ipaddress.ip_network(real_node.pod_cidr)
    text = wait_log(real_node, ns, "hello", f"hello-{token}")
    # the process really runs in a cgroup of this node's kubelet
    assert f"{real_node.cgroup_root}/kubepods" in text, text
    # and the node's pods weigh against the host's processes as a machine of their own would
    # (one default weight for them all made every drain seconds slow on a busy host)
    cpu = next(h for h in realnode_host.cgroup_hierarchies() if (h / "cpu.shares").exists())
    shares = (cpu / real_node.cgroup_root.lstrip("/") / "cpu.shares").read_text().strip()
    assert int(shares) == 1024 * (os.cpu_count() or 1), shares


def test_prestop_runs_before_sigterm_and_the_native_sidecar_stops_last(
    real_node: RealNode, ns: str
) -> None:
    """Deleting a pod: preStop runs to its end, then main gets SIGTERM, then the sidecar."""
    record = real_node.hostpath_dir / f"order-{ns}"
    record.mkdir(parents=True)
    mount = [{"name": "rec", "mountPath": "/rec"}]

    def looper(tag: str) -> str:
        return (
            f"trap 'echo {tag}-term >> /rec/log; exit 0' TERM; echo {tag}-start >> /rec/log; "
            "while true; do sleep 0.1; done"
        )

    prestop = "echo prestop-start >> /rec/log; sleep 2; echo prestop-end >> /rec/log"
    main = container(
        real_node,
        "main",
        looper("main"),
        volumeMounts=mount,
        lifecycle={"preStop": {"exec": {"command": ["sh", "-c", prestop]}}},
    )
    sidecar = container(
        real_node, "sidecar", looper("sidecar"), volumeMounts=mount, restartPolicy="Always"
    )
    body = pod_body(
        real_node,
        "ordered",
        [main],
        initContainers=[sidecar],
        volumes=[{"name": "rec", "hostPath": {"path": str(record), "type": "Directory"}}],
        grace_s=20,
    )
    create(real_node, ns, body)
    wait_phase(real_node, ns, "ordered", "Running")
    procs.wait_for(
        "main started",
        lambda: "main-start" in (record / "log").read_text(),
        timeout_s=30,
    )
    real_node.cluster.api.request(
        "DELETE",
        f"/api/v1/namespaces/{ns}/pods/ordered",
        {"gracePeriodSeconds": 20},
    )
    took = wait_gone(real_node, ns, "ordered")
    lines = (record / "log").read_text().split()
    assert lines == [
        "sidecar-start",
        "main-start",
        "prestop-start",
        "prestop-end",
        "main-term",
        "sidecar-term",
    ], lines
    assert 2 <= took < 20, took  # the preStop's 2 s, not the grace period


def test_a_headless_service_name_resolves_to_the_pod_ip_from_another_pod(
    real_node: RealNode, ns: str
) -> None:
    """CoreDNS answers <svc>.<ns>.svc.cluster.local with the target pod's IP, to another pod."""
    labels = {"app": "target"}
    target = pod_body(real_node, "target", [container(real_node, "m", "sleep 3600")], labels=labels)
    create(real_node, ns, target)
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "tgt"},
        "spec": {"clusterIP": "None", "selector": labels, "ports": [{"port": 80}]},
    }
    real_node.cluster.api.request("POST", f"/api/v1/namespaces/{ns}/services", service)
    ip = wait_phase(real_node, ns, "target", "Running")["status"]["podIP"]
    name = f"tgt.{ns}.svc.cluster.local"
    script = (
        "cat /etc/resolv.conf; "
        f"for i in $(seq 1 60); do nslookup {name} && exit 0; sleep 1; done; exit 1"
    )
    client = pod_body(real_node, "client", [container(real_node, "m", script)], restart="Never")
    create(real_node, ns, client)
    wait_phase(real_node, ns, "client", "Succeeded", "Failed", timeout_s=90)
    text = logs(real_node, ns, "client")
    assert f"nameserver {real_node.node_ip}" in text, text  # CoreDNS on the node, no ClusterIP
    answer = text.split(name, 1)[-1]
    assert re.search(rf"Address:?\s+{re.escape(ip)}\b", answer), text


def test_a_pod_bound_projected_token_reaches_the_container_and_passes_tokenreview(
    real_node: RealNode, ns: str
) -> None:
    """The kubelet mounts a projected token bound to the pod; TokenReview accepts its audience."""
    audience = "slonkd-realnode-test"
    body = pod_body(
        real_node,
        "tok",
        [
            container(
                real_node,
                "m",
                "cat /var/run/slonk/token; echo; echo END; sleep 3600",
                volumeMounts=[{"name": "t", "mountPath": "/var/run/slonk", "readOnly": True}],
            )
        ],
        volumes=[
            {
                "name": "t",
                "projected": {
                    "sources": [
                        {
                            "serviceAccountToken": {
                                "audience": audience,
                                "expirationSeconds": 3600,
                                "path": "token",
                            }
                        }
                    ]
                },
            }
        ],
    )
    uid = create(real_node, ns, body)["metadata"]["uid"]
    wait_phase(real_node, ns, "tok", "Running")
    token = wait_log(real_node, ns, "tok", "END").split()[0]

    def review(audiences: list[str]) -> dict[str, Any]:
        result: dict[str, Any] = real_node.cluster.api.request(
            "POST",
            "/apis/authentication.k8s.io/v1/tokenreviews",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": token, "audiences": audiences},
            },
        )["status"]
        return result

    status = review([audience])
    assert status["authenticated"] is True, status
    assert status["audiences"] == [audience]
    user = status["user"]
    assert user["username"] == f"system:serviceaccount:{ns}:default"
    assert user["extra"]["authentication.kubernetes.io/pod-name"] == ["tok"]
    assert user["extra"]["authentication.kubernetes.io/pod-uid"] == [uid]
    assert review(["some-other-audience"]).get("authenticated") is not True


def test_a_request_from_a_pod_to_an_address_off_this_machine_fails_locally_and_fast(
    real_node: RealNode, ns: str
) -> None:
    """No route out of the node's namespace: a pod's connect fails at once with no route to host."""
    real_node.assert_no_route_out(OFF_MACHINE)  # a kernel route lookup; sends nothing
    script = (
        "t0=$(cut -d' ' -f1 /proc/uptime); "
        # nc, not wget: Debian's busybox-static wget segfaults before connecting
        f"nc -w 5 {OFF_MACHINE} 80 </dev/null 2>&1; echo rc=$?; "
        "t1=$(cut -d' ' -f1 /proc/uptime); echo t0=$t0 t1=$t1"
    )
    body = pod_body(real_node, "egress", [container(real_node, "m", script)], restart="Never")
    create(real_node, ns, body)
    wait_phase(real_node, ns, "egress", "Succeeded", "Failed", timeout_s=60)
    text = logs(real_node, ns, "egress")
    assert "rc=0" not in text, text
    assert re.search(r"No route to host|Network is unreachable", text), text
    times = re.search(r"t0=([\d.]+) t1=([\d.]+)", text)
    assert times, text
    assert float(times[2]) - float(times[1]) < 2.0, text  # not a 5 s timeout: refused locally


def _host_state() -> dict[str, str]:
    def run(*argv: str) -> str:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False).stdout

    chains = [ln for ln in run("iptables-save").splitlines() if ln.startswith(":")]
    return {
        "routes": run("ip", "route", "show", "table", "all"),
        "links": "\n".join(sorted(re.findall(r"^\d+: (\S+?)[:@]", run("ip", "-o", "link"), re.M))),
        "netns": run("ip", "netns", "list"),
        "iptables chains": "\n".join(sorted(chains)),
    }


def test_teardown_leaves_no_process_mount_link_netns_route_or_chain(
    real_node: RealNode, session_root: Path
) -> None:
    """A second node runs a pod, stops, and leaves the host exactly as it found it."""
    before = _host_state()
    root = session_root / "rn-teardown"
    node = RealNode(root, cluster=real_node.cluster)
    try:
        node.start()
        real_node.cluster.create_namespace("teardown")
        body = pod_body(node, "p", [container(node, "m", "sleep 3600")])
        create(node, "teardown", body)
        wait_phase(node, "teardown", "p", "Running")
        during = node.leftovers()
        # the check sees a running node: processes, mounts (rootfs, shm, netns), netns, veth
        for kind in ("process", "mount", "netns", "link", "cgroup"):
            assert any(item.startswith(kind) for item in during), (kind, during)
        assert any("/rootfs" in m for m in during), during
    finally:
        node.stop()
    assert node.leftovers() == []
    marker = str(root) + "/"
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True)
    assert [ln for ln in ps.stdout.splitlines() if marker in ln] == []
    assert [
        ln for ln in Path("/proc/self/mountinfo").read_text().splitlines() if marker in ln
    ] == []
    after = _host_state()
    for key, value in before.items():
        assert after[key] == value, (key, value, after[key])
    assert not Path(f"/sys/fs/cgroup/memory/{node.cgroup_root}").exists()
