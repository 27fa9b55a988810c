"""Pure parts of the harness: slurm.conf rendering and the toolchain's go.mod reading."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from slonkd_sandbox import daemon, procs, toolchain
from slonkd_sandbox.slurm.cluster import SlurmCluster, SlurmLayout
from slonkd_sandbox.slurm.conf import render_slurm_conf


def test_slurm_conf_keeps_every_path_under_the_root_and_ports_distinct() -> None:
    """Each slurmd gets its own port, extra nodes are declared in one range, paths stay private."""
    cluster = SlurmCluster(
        Path("/srv/x"),
        SlurmLayout(nodes=("a-0", "a-1"), extra_nodes=3),
        ctld_port=100,
        slurmd_port=200,
    )
    conf = render_slurm_conf(cluster)
    lines = conf.splitlines()
    assert "SlurmctldPort=100" in lines
    node_lines = [line for line in lines if line.startswith("NodeName=")]
    assert node_lines[0].startswith("NodeName=a-0 ")
    assert " Port=200 " in node_lines[0]
    assert node_lines[1].startswith("NodeName=a-1 ")
    assert " Port=201 " in node_lines[1]
    assert node_lines[2].startswith("NodeName=x[1-3] ")
    assert " Port=" not in node_lines[2]
    for line in lines:
        for word in line.split():
            value = word.split("=", 1)[-1]
            if value.startswith("/") and not value.startswith("/bin/"):
                assert value.startswith("/srv/x/"), line
    assert "ReturnToService=1" in lines


def test_staging_modules_are_read_from_kubernetes_go_mod() -> None:
    """Only k8s.io requirements at exactly v0.0.0 are staging modules; pseudo-versions are not."""
    gomod = (
        "require (\n"
        "\tk8s.io/api v0.0.0\n"
        "\tk8s.io/kube-openapi v0.0.0-20250910181357-589584f1c912\n"
        "\tk8s.io/client-go v0.0.0\n"
        "\tk8s.io/utils v0.0.0-20250820121507-0af2bda4dd1d\n"
        ")\n"
    )
    assert sorted(toolchain._STAGING_RE.findall(gomod)) == ["k8s.io/api", "k8s.io/client-go"]


def test_the_harness_listens_outside_the_ephemeral_port_range(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ports for the harness's servers are never ones an outbound connection may take.

    A daemon restarted on its port (the soak's agents, coordinators, slurmctld) found it held
    by another process's connection, whose local end the kernel had picked from
    ``ip_local_port_range``: an agent failed to bind for four minutes.
    """
    low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    ports = procs.free_ports(200)
    assert len(set(ports)) == 200
    assert not [p for p in ports if low <= p <= high]
    first = procs.free_port_range(50)
    assert not [p for p in range(first, first + 50) if low <= p <= high]
    with socket.socket() as held:  # a port in use is never handed out
        held.bind(("127.0.0.1", ports[0]))
        held.listen()
        monkeypatch.setattr(procs, "listen_span", lambda: (ports[0], ports[0] + 3))
        rest = [p for p in (ports[0] + 1, ports[0] + 2) if procs._port_free(p)]
        assert sorted(procs.free_ports(len(rest))) == rest


def test_parallel_runs_listen_in_disjoint_slices_of_the_span(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """K/N gives the K-th of N slices: two test workers never pick the same free port."""
    first, stop = procs.whole_span()
    slices = []
    for k in range(3):
        monkeypatch.setenv(procs.PORT_SLICE_ENV, f"{k}/3")
        slices.append(procs.listen_span())
        ports = [*procs.free_ports(20), procs.free_port_range(10)]
        assert all(slices[k][0] <= p < slices[k][1] for p in ports)
    assert slices[0][0] == first
    assert slices[0][1] == slices[1][0]
    assert slices[1][1] == slices[2][0]
    assert slices[2][1] <= stop
    monkeypatch.delenv(procs.PORT_SLICE_ENV)
    assert procs.listen_span() == (first, stop)


@pytest.mark.parametrize("raw", ["3/3", "x/2", "1", "-1/2"])
def test_a_malformed_port_slice_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    """A slice that is not K/N with 0 <= K < N is an error naming the variable."""
    monkeypatch.setenv(procs.PORT_SLICE_ENV, raw)
    with pytest.raises(procs.HarnessError, match=procs.PORT_SLICE_ENV):
        procs.listen_span()


def test_a_test_coordinators_api_listens_on_a_free_loopback_port_unless_named(
    tmp_path: Path,
) -> None:
    """Two parallel workers' coordinators never both ask for the product's 0.0.0.0:8081.

    A mapping, a file or the environment's SLONKD_CONFIG without ``api_port`` gets
    127.0.0.1:0 (a file in place); one that names a port (or is not a JSON object) is left
    as it is.
    """
    assert daemon.loopback_api({"resync_s": 1}) == {
        "api_host": "127.0.0.1",
        "resync_s": 1,
        "api_port": 0,
    }
    named = {"api_host": "0.0.0.0", "api_port": 9000}  # noqa: S104 - a test's own choice
    assert daemon.loopback_api(named) == named
    tree = {"coordinator": {"resync_s": 1}, "agent": {}}  # the configuration tree: its section
    assert daemon.loopback_api(tree) == {
        "coordinator": {"api_host": "127.0.0.1", "resync_s": 1, "api_port": 0},
        "agent": {},
    }
    group = daemon.Coordinators(root=tmp_path)
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({"resync_s": 2}))
    # in place: a test that rewrites its file and restarts the same daemon is read again
    assert group._with_loopback_api(plain, "coordinator-0") == plain
    assert json.loads(plain.read_text()) == {"api_host": "127.0.0.1", "resync_s": 2, "api_port": 0}
    own = tmp_path / "own.json"
    own.write_text(json.dumps(named))
    assert group._with_loopback_api(own, "coordinator-0") == own
    odd = tmp_path / "odd.json"
    odd.write_text("[1]")
    assert group._with_loopback_api(odd, "coordinator-0") == odd
