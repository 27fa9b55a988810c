"""The chart's ``coordinator.config`` and ``agent.config``: the sections' other keys.

The chart renders each role's section of slonkd's configuration tree (SLONKD_CONFIG) from its
curated camelCase values;
every other key of the file is open through ``<role>.config``, whose schema in
values.schema.json is generated from the settings classes (``slonkd config schema ROLE
--chart``, written by ``scripts/chart-schema``). One place in the chart for each key: a key
the chart writes itself is refused there, and every key of the file is one or the other.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from slonkd.cli import agent, config_cmd, coordinator
from slonkd_sandbox.chart.helm import CHART_DIR, Helm
from slonkd_sandbox.procs import HarnessError
from slonkd_sandbox.toolchain import ensure_tools

SCHEMA = CHART_DIR / "values.schema.json"
ALL_ON = (
    'coordinator.jobBlame={"enabled":true}',
    'coordinator.slurmTriggers={"enabled":true}',
    'workers.prestop={"enabled":true,"checkpoint":{"signal":"B:USR1"}}',
)
"""Values that make the chart write its conditional keys (job_blame, trigger_program, rollout)."""


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """The pinned helm with a private home, no cluster."""
    return Helm(binary=ensure_tools().helm, home=tmp_path_factory.mktemp("helm"))


def rendered(helm: Helm, *set_json: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The coordinator's and the first pool's agent's sections, as the chart renders them."""
    out = helm.template("rel", namespace="hpc", set_json=set_json).stdout
    maps = {
        d["metadata"]["name"]: d for d in yaml.safe_load_all(out) if d and d["kind"] == "ConfigMap"
    }
    agents = [v for k, v in maps.items() if k.endswith("-agent")]
    assert agents, sorted(maps)
    coordinator_file = json.loads(maps["rel-coordinator"]["data"]["config.json"])
    agent_file = json.loads(next(iter(agents[0]["data"].values())))
    assert (set(coordinator_file), set(agent_file)) == ({"coordinator"}, {"agent"})
    return coordinator_file["coordinator"], agent_file["agent"]


def test_the_charts_schema_of_both_config_values_is_the_generated_one() -> None:
    """values.schema.json's coordinatorConfig/agentConfig equal the settings classes' schema.

    A new settings field, a changed default or description: run ``scripts/chart-schema``.
    """
    definitions = json.loads(SCHEMA.read_text())["definitions"]
    for role in config_cmd.CHART_ROLES:
        assert definitions[f"{role}Config"] == config_cmd.chart_schema(role), (
            f"{SCHEMA.name} is stale for {role}: run scripts/chart-schema"
        )
        ref = json.loads(SCHEMA.read_text())["properties"][role]["properties"]["config"]
        assert ref == {"$ref": f"#/definitions/{role}Config"}


def test_every_key_of_each_file_has_exactly_one_place_in_the_chart(helm: Helm) -> None:
    """A key is written by the chart (from a value or the pod) or open in ``config``: never both.

    With every optional part on, the chart writes exactly the keys :data:`CHART_SETS` names
    less those the pod's environment gives (namespace, identity, names, ports). ``policy`` is
    split: the chart writes its graces and revalidation, the rest is open.
    """
    coordinator_file, agent_file = rendered(helm, *ALL_ON)
    for role, section in (("coordinator", coordinator_file), ("agent", agent_file)):
        whole = _paths(config_cmd.role_schema(role))
        open_keys = _paths(config_cmd.chart_schema(role))
        chart_sets = config_cmd.CHART_SETS[role]
        assert chart_sets <= whole, (role, chart_sets - whole)
        assert open_keys == whole - chart_sets
        keys = set(section) - {"policy"} | {f"policy.{k}" for k in section.get("policy", {})}
        written = keys - {"rollout"}  # rollout: written (prestop) and open (merged)
        from_pod = chart_sets - written
        assert written <= chart_sets, (role, written - chart_sets)
        assert from_pod <= {
            "namespace", "identity", "kubeconfig", "api_host", "pod_name", "kube_node",
            "slurm_node", "ready_file", "metrics_port", "metrics_address",
        }, (role, from_pod)  # fmt: skip


def _paths(schema: dict[str, Any]) -> set[str]:
    """A section schema's keys, ``policy``'s as ``policy.KEY`` (the one split key).

    The old flat keys the chart still takes (deprecated, read as their new key) are left out.
    """
    props = {k: v for k, v in schema["properties"].items() if not v.get("deprecated")}
    inner = props.get("policy", {}).get("properties", {})
    return set(props) - {"policy"} | {f"policy.{k}" for k in inner}


def test_a_config_key_reaches_the_loaded_settings_merged_over_the_charts(
    helm: Helm, tmp_path: Path
) -> None:
    """``coordinator.config``/``agent.config`` keys land in the files the roles load.

    ``rollout`` merges key by key with the chart's own ``requeue_in_prestop``.
    """
    coordinator_file, agent_file = rendered(
        helm,
        *ALL_ON,
        'coordinator.config={"resync_s":45,"rollout":{"max_parallel":3},"suspect_fraction":0.2,'
        '"policy":{"remediate":false}}',
        'agent.config={"shutdown_deadline_s":20}',
    )
    assert coordinator_file["rollout"] == {"requeue_in_prestop": True, "max_parallel": 3}
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"coordinator": coordinator_file}))
    c = coordinator.load_settings({"POD_NAMESPACE": "hpc", "SLONKD_CONFIG": str(path)})
    assert c.policy.remediate is False
    assert c.policy.failure_grace_s == 120  # the chart's, kept next to the operator's
    assert c.resync_s == 45
    assert c.rollout is not None
    assert c.rollout.max_parallel == 3
    assert c.rollout.requeue_in_prestop is True
    (tmp_path / "a.json").write_text(json.dumps({"agent": agent_file}))
    a = agent.load_settings({
        "POD_NAME": "w-0", "POD_NAMESPACE": "hpc", "NODE_NAME": "n1",
        "SLONKD_CONFIG": str(tmp_path / "a.json"),
    })  # fmt: skip
    assert a.shutdown_deadline_s == 20


def test_an_old_flat_config_key_still_renders_and_loads_with_a_deprecation(
    helm: Helm, tmp_path: Path
) -> None:
    """``coordinator.config.remediate`` (before ``policy.remediate``): an upgrade keeps it."""
    coordinator_file, _ = rendered(helm, 'coordinator.config={"remediate":false}')
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"coordinator": coordinator_file}))
    notes: list[str] = []
    c = coordinator.load_settings({"POD_NAMESPACE": "hpc", "SLONKD_CONFIG": str(path)}, notes)
    assert c.policy.remediate is False
    assert notes == ["coordinator.remediate is deprecated: write coordinator.policy.remediate"]


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ('coordinator.config={"resync":45}', "resync"),  # a typo
        ('coordinator.config={"max_out":3}', "max_out"),  # the chart's: coordinator.budget.maxOut
        ('coordinator.config={"resync_s":"45"}', "resync_s"),  # a string for a number
        ('coordinator.config={"rollout":{"max_paralel":2}}', "max_paralel"),
        ('agent.config={"health":{}}', "health"),  # the chart's: agent.health.checks
        ('coordinator.config={"policy":{"failure_grace_s":5}}', "failure_grace_s"),
        ('coordinator.config={"failure_grace_s":5}', "failure_grace_s"),  # old flat key
    ],
    ids=[
        "typo",
        "chart-owned",
        "wrong-type",
        "nested-typo",
        "agent-chart-owned",
        "chart-owned-nested",
        "old-flat-key",
    ],
)
def test_the_chart_refuses_a_bad_config_key_naming_it(helm: Helm, value: str, named: str) -> None:
    """``helm template`` fails on values.schema.json, and its error names the key."""
    with pytest.raises(HarnessError) as failed:
        helm.template("rel", namespace="hpc", set_json=(value,))
    assert "values don't meet the specifications of the schema" in str(failed.value)
    assert named in str(failed.value)
