"""The coordinator's fleet metrics, scraped from /metrics around a scripted scene.

Real slurmctld, slurmd, kube-apiserver and kwok nodes (the ``fleet`` of test_coordinator):
an operator's drain, a SLURM failure the budget keeps in (the disagreement stands), a budget
reset (it ends), the operator's resume and an operator's cordon (slonkd's own drain): every
fleet family is read back from the leader's /metrics with the values the scene implies.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from slonkd.adapters.slurm.parsing_sdiag import parse_sdiag
from slonkd.core.log_events import COORDINATOR_LEADING
from slonkd_sandbox.procs import HarnessError, wait_for
from slonkd_sandbox.slurm.cluster import SCALE_SLURMD_TIMEOUT_S, SlurmCluster
from tests.e2e import coordinator_fleet
from tests.e2e.conftest import set_unschedulable
from tests.e2e.coordinator_fleet import BASE_CONFIG, PODS, Fleet

pytestmark = [pytest.mark.kube, pytest.mark.slurm]

# the coordinator's fleet: 20 worker pods on 10 kwok nodes, 20 slurmd, a coordinator
coordinator_config = coordinator_fleet.coordinator_config
fleet_slurm = coordinator_fleet.fleet_slurm
fleet = coordinator_fleet.fleet

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(f: Fleet) -> Samples:
    """Every sample of the leader's /metrics, keyed by name and sorted labels."""
    with urllib.request.urlopen(f"{f.api_url()}/metrics", timeout=10) as response:  # noqa: S310 - http://127.0.0.1
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def get(samples: Samples, name: str, **labels: str) -> float:
    """One sample (0 when the series does not exist)."""
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def owner(samples: Samples, who: str, cause: str = "") -> float:
    """Nodes whose reason ``who`` owns."""
    return get(samples, "slonkd_fleet_nodes_by_owner", owner=who, cause=cause)


def until(f: Fleet, what: str, check: Any, timeout_s: float = 30) -> Samples:
    """Scrape until ``check(samples)`` holds; the samples that satisfied it."""
    seen: list[Samples] = []

    def ok() -> bool:
        seen.append(scrape(f))
        return bool(check(seen[-1]))

    try:
        wait_for(what, ok, timeout_s=timeout_s, interval_s=0.3)
    except HarnessError:
        shown = {
            f"{name}{dict(labels)}": v
            for (name, labels), v in sorted(seen[-1].items())
            if v and name.startswith(("slonkd_fleet_", "slonkd_budget_"))
        }
        raise AssertionError(f"{what}: not in {timeout_s:.0f} s; last scrape: {shown}") from None
    return seen[-1]


@pytest.mark.parametrize("fleet_slurm", ["22.05", "24.11"], indirect=True)
@pytest.mark.parametrize(
    "coordinator_config",
    [{**BASE_CONFIG, "max_out": 2, "max_out_percent": 100, "remediate": False, "sdiag_s": 1}],
)
def test_every_fleet_family_follows_a_drain_a_failure_and_a_cordon(fleet: Fleet) -> None:
    """Nodes by state and owner, outages, disagreement, pending, budget and sdiag, end to end.

    Budget 2 a pool. The operator drains one node (out: 1), then a SLURM failure hits a node
    on another K8s node: cordoning it takes both of its pods' SLURM nodes out (2 more), past
    the budget, so the cordon stays pending: the disagreement stands and ages, and the
    breaker opens. The operator resumes the drain (an operator outage ends: observed) and
    resets the budget: the cordon is made and the disagreement is gone. Resuming the failed
    node ends a SLURM-owned outage; an operator's cordon makes slonkd's own drain
    (``k8s-cordoned``), whose outages are observed once it is uncordoned. SLURM 22.05 and
    24.11 (sdiag's output and the reasons' times are read on both).
    """
    start = until(f=fleet, what="a first pass and sdiag", check=lambda s: (
        get(s, "slonkd_fleet_nodes", state="idle") == PODS
        and get(s, "slonkd_slurmctld_server_threads") >= 1
    ))  # fmt: skip
    assert owner(start, "none") == PODS
    assert get(start, "slonkd_fleet_nodes_drain", status="none") == PODS
    assert get(start, "slonkd_fleet_disagreeing_nodes") == 0
    assert get(start, "slonkd_fleet_disagreement_oldest_seconds") == 0
    assert get(start, "slonkd_fleet_pending_actions", writer="coordinator", kind="cordon") == 0
    assert get(start, "slonkd_budget_group_nodes", group="w") == PODS
    assert get(start, "slonkd_budget_limit_nodes", group="w") == 2
    assert get(start, "slonkd_budget_out_nodes", group="w") == 0
    assert get(start, "slonkd_slurmctld_rpcs_total", rpc="REQUEST_NODE_INFO") > 0
    assert get(start, "slonkd_slurmctld_rpc_duration_seconds_total", rpc="REQUEST_NODE_INFO") > 0
    assert get(start, "slonkd_slurmctld_agent_queue_size") >= 0
    assert get(start, "slonkd_slurmctld_sdiag_failures_total") == 0
    assert ("slonkd_slurmctld_jobs", (("state", "running"),)) in start
    assert get(start, "slonkd_slurmctld_sdiag_timestamp_seconds") > time.time() - 60

    victim = "w-3"
    victim_node = next(n for n in fleet.kube_nodes if victim in fleet.pods_on(n))
    drained = next(p for n in fleet.kube_nodes if n != victim_node for p in fleet.pods_on(n))
    fleet.slurm.run("scontrol", "update", f"nodename={drained}", "state=drain", "reason=rack swap")
    until(fleet, "the operator's drain counted", lambda s: (
        owner(s, "operator") == 1
        and get(s, "slonkd_fleet_nodes_drain", status="drained") == 1
        and get(s, "slonkd_fleet_nodes_flagged", flag="drain") == 1
        and get(s, "slonkd_budget_out_nodes", group="w") == 1
        and get(s, "slonkd_fleet_disagreeing_nodes") == 0  # an operator's drain is theirs
    ))  # fmt: skip

    fleet.fail([victim])
    refused = until(fleet, "the failure counted, its cordon pending", lambda s: (
        owner(s, "slurm") == 1
        and get(s, "slonkd_fleet_nodes_flagged", flag="fail") == 1
        and get(s, "slonkd_fleet_pending_actions", writer="coordinator", kind="cordon") >= 1
        and get(s, "slonkd_fleet_disagreeing_nodes") >= 1
        and get(s, "slonkd_fleet_disagreement_oldest_seconds") > 2  # it stands, and ages
    ))  # fmt: skip
    assert victim_node not in fleet.cordoned()  # kept in by the budget
    assert get(refused, "slonkd_breaker_open") == 1
    assert get(refused, "slonkd_fleet_out_oldest_seconds", owner="operator", cause="") > 2

    fleet.slurm.run("scontrol", "update", f"nodename={drained}", "state=resume")
    back = until(fleet, "the operator's outage observed", lambda s: (
        get(s, "slonkd_fleet_out_duration_seconds_count", owner="operator", cause="") == 1
    ))  # fmt: skip
    assert get(back, "slonkd_fleet_out_duration_seconds_sum", owner="operator", cause="") > 2
    assert owner(back, "operator") == 0
    reset = fleet.slonkd("budget", "reset", "--namespace", fleet.namespace, "--by", "alice")
    assert reset.returncode == 0, reset.stderr
    agreed = until(fleet, "the cordon made, the disagreement gone", lambda s: (
        get(s, "slonkd_fleet_disagreeing_nodes") == 0
        and get(s, "slonkd_fleet_disagreement_oldest_seconds") == 0
    ))  # fmt: skip
    assert victim_node in fleet.cordoned()
    assert sum(v for (name, _), v in agreed.items() if name == "slonkd_fleet_pending_actions") == 0
    assert owner(agreed, "slurm") == 1  # SLURM's failure stays SLURM's to clear
    assert get(agreed, "slonkd_fleet_out_oldest_seconds", owner="slurm", cause="") > 2

    fleet.slurm.run("scontrol", "update", f"nodename={victim}", "state=resume")
    until(fleet, "SLURM's outage observed, the node unmarked", lambda s: (
        get(s, "slonkd_fleet_out_duration_seconds_count", owner="slurm", cause="") == 1
        and owner(s, "none") == PODS
        and get(s, "slonkd_fleet_disagreeing_nodes") == 0
    ))  # fmt: skip
    assert victim_node not in fleet.cordoned()

    cordoned = next(n for n in fleet.kube_nodes if n != victim_node and fleet.pods_on(n))
    pods = len(fleet.pods_on(cordoned))
    set_unschedulable(fleet.kube, [cordoned])  # an operator's cordon: slonkd drains
    until(fleet, "slonkd's drains counted", lambda s: (
        owner(s, "slonkd", "k8s-cordoned") == pods
    ))  # fmt: skip
    set_unschedulable(fleet.kube, [cordoned], on=False)
    ended = until(fleet, "slonkd's outages observed", lambda s: (
        get(s, "slonkd_fleet_out_duration_seconds_count", owner="slonkd", cause="k8s-cordoned")
        == pods
    ))  # fmt: skip
    assert owner(ended, "none") == PODS
    submitted = get(ended, "slonkd_slurmctld_job_events_total", event="submitted")
    fleet.slurm.run("sbatch", "-o", "/dev/null", "--wrap", "sleep 1")
    until(fleet, "the job counted by sdiag", lambda s: (
        get(s, "slonkd_slurmctld_job_events_total", event="submitted") == submitted + 1
    ))  # fmt: skip


WINDOW_S = 30.0
AT_REST = {**BASE_CONFIG, "resync_s": 30, "sdiag_s": 5}
"""Production timings (a resync every 30 s, the poll every 0.7 s); sdiag 12 times its default."""


def rpcs_at_rest(slurm: SlurmCluster) -> dict[str, int]:
    """slurmctld's RPC counts by type over :data:`WINDOW_S`, nothing else talking to it."""
    slurm.run("sdiag", "--reset")
    time.sleep(WINDOW_S)
    return {rpc: stat.count for rpc, stat in parse_sdiag(slurm.run("sdiag").stdout).rpcs.items()}


@pytest.mark.parametrize("fleet_slurm", [("22.05", SCALE_SLURMD_TIMEOUT_S)], indirect=True)
@pytest.mark.parametrize("coordinator_config", [AT_REST])
def test_the_fleet_metrics_cost_slurmctld_only_their_sdiag(fleet: Fleet, tmp_path: Path) -> None:
    """The same fleet at rest, exporter on then off: every RPC count but sdiag's is the same.

    Measured by slurmctld itself (``sdiag`` over 30 s each). With the exporter on, the only
    new RPC is ``REQUEST_STATS_INFO`` (sdiag, every ``sdiag_s``); the node reads (the poll's
    and the resync's) are within noise of the exporter off: the families are counted from
    reads the pass makes anyway. The table is printed (``-s``) for the report.

    At rest means slurmctld quiet too: SLURM's default SlurmdTimeout (a ping every 100 s),
    not the harness's 10 s, whose pings and registrations move the node table every few
    seconds, and every move is a read by the poll (the partition reads differed by 6 between
    two windows on the quick timeout: 25 | 19). Both windows start 3 s after the
    coordinator leads, past its first pass's reads.
    """
    until(fleet, "the exporter exporting", lambda s: (
        get(s, "slonkd_fleet_nodes", state="idle") == PODS
        and get(s, "slonkd_slurmctld_server_threads") >= 1
    ))  # fmt: skip
    time.sleep(3)  # past its first pass, as the exporter-off window below
    on = rpcs_at_rest(fleet.slurm)
    assert fleet.first.stop(grace_s=30), fleet.first.exited()
    config = tmp_path / "coordinator-off.json"
    config.write_text(json.dumps({**AT_REST, "fleet_metrics": False}))
    fleet.coordinators.start(  # the exporter-off coordinator, on the same log
        fleet.env, config=config, log=fleet.log, until=COORDINATOR_LEADING, timeout_s=60
    )
    time.sleep(3)  # its first pass
    assert not any(name.startswith("slonkd_fleet_") for name, _ in scrape(fleet))
    off = rpcs_at_rest(fleet.slurm)
    rows = sorted(set(on) | set(off))
    print(f"\nslurmctld RPCs over {WINDOW_S:.0f} s at rest, 20 nodes: exporter off | on")
    for rpc in rows:
        print(f"  {rpc:40} {off.get(rpc, 0):6} | {on.get(rpc, 0):6}")
    new = {r for r in rows if on.get(r, 0) > 0 and off.get(r, 0) == 0}
    assert new <= {"REQUEST_STATS_INFO"}, (on, off)
    sdiags = on.get("REQUEST_STATS_INFO", 0) - off.get("REQUEST_STATS_INFO", 0)
    assert WINDOW_S / 5 - 2 <= sdiags <= WINDOW_S / 5 + 2, (on, off)
    for rpc in ("REQUEST_NODE_INFO", "REQUEST_PARTITION_INFO"):
        assert abs(on.get(rpc, 0) - off.get(rpc, 0)) <= max(3, 0.15 * off.get(rpc, 0)), (on, off)
