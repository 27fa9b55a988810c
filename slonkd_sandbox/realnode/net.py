"""The real node's network: its own namespace, a veth pair to the host, no route out.

containerd, the kubelet and CoreDNS run in a network namespace of the node's own, joined to
the host only by a veth pair on a private /30 picked from 10.213.0.0/16. Its routing table
holds that /30 (and, once pods run, the pod bridge's /24) and an explicit ``unreachable
default``: a packet from a pod or the node to an address that is not on this machine dies
there with "no route to host" and never reaches the host's uplink. Safety nets on the host:
blackhole routes for the Service CIDR and the pod supernet, set before the namespace exists
and removed at tear-down. The apiserver listens on 127.0.0.1 only: a ``socat`` relay on the
host end of the veth forwards to it (:func:`relay_argv`).

Neighbours: :mod:`slonkd_sandbox.realnode.node` (the node, which calls these in order),
:mod:`slonkd_sandbox.realnode.host` (what else of the node lives on the host),
:mod:`slonkd_sandbox.kube.components` (the Service CIDR blackholed here).
"""

from __future__ import annotations

import os

from slonkd_sandbox.kube.components import SERVICE_CLUSTER_IP_RANGE
from slonkd_sandbox.procs import HarnessError, output

SERVICE_CIDR = SERVICE_CLUSTER_IP_RANGE
"""The harness apiserver's ``--service-cluster-ip-range`` (kube.py): blackholed on the host."""
POD_SUPERNET = "10.244.0.0/16"
"""Blackholed on the host: no pod address is ever routed off this machine."""


def add_host_routes(owned: list[str]) -> None:
    """Blackhole the Service CIDR and the pod supernet on the host; add each to ``owned``.

    A blackhole already there is another real node's safety net (it removes its own); any
    other route for those CIDRs is an error.
    """
    for cidr in (SERVICE_CIDR, POD_SUPERNET):
        existing = output(["ip", "-4", "route", "show", "exact", cidr])
        if existing.strip():
            if not existing.startswith("blackhole"):
                raise HarnessError(f"{cidr} is routed on this host ({existing.strip()})")
            continue  # another real node's safety net; it removes its own
        output(["ip", "route", "add", "blackhole", cidr])
        owned.append(cidr)


def remove_host_routes(owned: list[str]) -> None:
    """Remove the blackhole routes in ``owned`` (emptying it as it goes)."""
    while owned:
        cidr = owned.pop()
        output(["ip", "route", "del", "blackhole", cidr], check=False)


def pick_subnet() -> tuple[str, str]:
    """A free /30 of 10.213.0.0/16: (host end, node end)."""
    used = output(["ip", "-4", "-o", "addr", "show"])
    for _ in range(100):
        rnd = int.from_bytes(os.urandom(2), "big")
        base = f"10.213.{rnd >> 8}.{(rnd & 0xFF) & ~3}"
        a, b, c, d = base.split(".")
        host, node = f"{a}.{b}.{c}.{int(d) + 1}", f"{a}.{b}.{c}.{int(d) + 2}"
        if f" {host}/" not in used and f" {node}/" not in used:
            return host, node
    raise HarnessError("no free /30 in 10.213.0.0/16")


def make_network(*, netns: str, host_veth: str, peer: str, host_ip: str, node_ip: str) -> None:
    """Create ``netns`` with ``eth0`` (``node_ip``) paired to ``host_veth`` (``host_ip``).

    ``peer`` is the node end's name on the host before it moves into the namespace.
    """
    ns = netns
    output(["ip", "netns", "add", ns])
    output(["ip", "link", "add", host_veth, "type", "veth", "peer", "name", peer])
    output(["ip", "link", "set", peer, "netns", ns])
    output(["ip", "-n", ns, "link", "set", peer, "name", "eth0"])
    output(["ip", "addr", "add", f"{host_ip}/30", "dev", host_veth])
    output(["ip", "link", "set", host_veth, "up"])
    output(["ip", "-n", ns, "addr", "add", f"{node_ip}/30", "dev", "eth0"])
    output(["ip", "-n", ns, "link", "set", "lo", "up"])
    output(["ip", "-n", ns, "link", "set", "eth0", "up"])
    output(["ip", "-n", ns, "route", "add", "unreachable", "default"])
    assert_no_route_out(netns)


def assert_no_route_out(netns: str, probe: str = "198.51.100.1") -> None:
    """Fail unless ``netns`` has no route to ``probe`` (asks the kernel only)."""
    out = output(["ip", "-n", netns, "route", "get", probe], check=False)
    if out and not out.startswith("unreachable"):
        raise HarnessError(f"the node's namespace routes {probe}: {out.strip()}")
    default = output(["ip", "-n", netns, "-4", "route", "show", "default"])
    if default.strip() != "unreachable default":
        raise HarnessError(f"unexpected default route in the node's namespace: {default}")


def relay_argv(host_ip: str, port: int) -> list[str]:
    """socat on ``host_ip:port`` (the host end of the veth) forwarding to 127.0.0.1:``port``."""
    return [
        "socat",
        f"TCP-LISTEN:{port},bind={host_ip},reuseaddr,fork",
        f"TCP:127.0.0.1:{port},nodelay",
    ]


def netns_exists(netns: str) -> bool:
    """Whether ``ip netns`` lists ``netns``."""
    return netns in output(["ip", "netns", "list"]).split()


def remove_network(netns: str, host_veth: str) -> None:
    """Delete the namespace (and with it cni0 and the pods' veths) and the host's veth end."""
    if netns_exists(netns):
        output(["ip", "netns", "del", netns])
    # deleting the namespace destroys the pair; the host end may take a moment to go
    output(["ip", "link", "del", host_veth], check=False)


__all__ = [
    "POD_SUPERNET",
    "SERVICE_CIDR",
    "add_host_routes",
    "assert_no_route_out",
    "make_network",
    "netns_exists",
    "pick_subnet",
    "relay_argv",
    "remove_host_routes",
    "remove_network",
]
