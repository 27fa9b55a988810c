"""One configuration tree: settings classes are the keys, the types and the defaults.

The loader (:mod:`slonkd.core.config_tree`) refuses unknown keys and wrong types with the
key's path; the coordinator's file keys are derived from its settings class (no list kept by
hand: a new field is a new key), and ``slonkd config schema``/``check`` describe and check
the same file.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from slonkd.cli import agent, config_cmd, coordinator
from slonkd.core.config_tree import build, schema
from slonkd.core.plan import Policy
from slonkd.runtime.coordinating import CoordinatorSettings
from tests.cli import slonkd


@dataclass(frozen=True, slots=True, kw_only=True)
class Inner:
    """A nested settings class."""

    count: int = 1
    """How many."""
    names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.count > 9:
            raise ValueError("count must be at most 9")


@dataclass(frozen=True, slots=True, kw_only=True)
class Outer:
    """A settings class with every supported type."""

    name: str
    ratio: float = 0.5
    on: bool = False
    inner: Inner = field(default_factory=Inner)
    maybe: Inner | None = None
    path: str | None = None


def test_build_types_nests_and_defaults() -> None:
    """Ints become floats where a float is wanted; lists tuples; objects nested classes."""
    got = build(Outer, {"name": "x", "ratio": 1, "inner": {"names": ["a"]}, "maybe": {}})
    assert got == Outer(name="x", ratio=1.0, inner=Inner(names=("a",)), maybe=Inner())
    assert isinstance(got.ratio, float)
    assert build(Outer, {"name": "x", "maybe": None, "path": None}) == Outer(name="x")


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        ({"name": "x", "nmae": 1}, "unknown keys ['nmae']"),
        ({"name": 3}, "name must be a string"),
        ({"name": "x", "ratio": True}, "ratio must be a number"),
        ({"name": "x", "ratio": "1"}, "ratio must be a number"),
        ({"name": "x", "on": 1}, "on must be true or false"),
        ({"name": "x", "inner": {"count": 1.5}}, "inner.count must be a whole number"),
        ({"name": "x", "inner": {"names": "a"}}, "inner.names must be a list"),
        ({"name": "x", "inner": {"names": [1]}}, "inner.names[0] must be a string"),
        ({"name": "x", "inner": {"cnt": 1}}, "inner: unknown keys ['cnt']"),
        ({"name": "x", "inner": []}, "inner must be a JSON object"),
        ({"name": "x", "maybe": {"count": 10}}, "maybe.count must be at most 9"),
        ({"name": "x", "ratio": -1}, "ratio must be a non-negative number"),
    ],
)
def test_bad_values_name_their_key(raw: dict[str, object], said: str) -> None:
    """Every refusal is one line naming the key's path."""
    with pytest.raises(ValueError, match=r"^" + said.replace("[", r"\[").replace("]", r"\]")):
        build(Outer, raw, non_negative=True)


def test_the_coordinators_keys_are_its_settings_fields_and_the_policys_aliases() -> None:
    """A field added to CoordinatorSettings is a key of the file, with no list to update."""
    fields = {f.name for f in dataclasses.fields(CoordinatorSettings)}
    assert coordinator.file_keys() == frozenset(
        (fields - coordinator.NOT_IN_FILE)
        | set(coordinator.POLICY_KEYS)
        | set(coordinator.REVALIDATION_KEYS)
    )
    assert {"change_poll", "change_poll_s", "job_blame", "rollout"} <= coordinator.file_keys()
    policy_fields = {f.name for f in dataclasses.fields(Policy)} - {"revalidation"}
    assert set(coordinator.POLICY_KEYS.values()) == policy_fields


def test_the_schema_has_every_key_with_its_default_and_a_description() -> None:
    """``slonkd config schema coordinator``: the file's keys, typed, defaulted, described."""
    doc = config_cmd.coordinator_schema()
    props = doc["properties"]
    assert set(props) == coordinator.file_keys()
    assert doc["additionalProperties"] is False
    undescribed = [k for k, v in props.items() if not v.get("description")]
    assert undescribed == []
    assert props["max_out"] == {**props["max_out"], "type": "integer", "default": 10}
    assert props["failure_grace_s"]["default"] == Policy().failure_grace_s
    assert props["revalidate_checks"]["type"] == "array"
    assert props["rollout"]["anyOf"][0]["properties"]["max_parallel"]["default"] == 1
    assert schema(Inner)["properties"]["count"] == {"type": "integer", "default": 1}


def test_config_check_says_ok_or_names_the_key(tmp_path: Path) -> None:
    """``slonkd config check coordinator FILE``: ok (exit 0) or one line naming the key (2)."""
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"max_out": 4, "rollout": {"max_parallel": 2}, "remediate": False}))
    ok = slonkd("config", "check", "coordinator", str(good))
    assert (ok.returncode, ok.stdout.strip()) == (0, "ok"), ok.stderr
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"rollout": {"max_parallel": "two"}}))
    refused = slonkd("config", "check", "coordinator", str(bad))
    assert refused.returncode == 2
    assert "rollout.max_parallel must be a number" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    shown = slonkd("config", "schema", "coordinator")
    assert shown.returncode == 0
    assert set(json.loads(shown.stdout)["properties"]) == coordinator.file_keys()


def test_the_agents_keys_are_its_settings_fields_and_every_health_field_is_settable(
    tmp_path: Path,
) -> None:
    """The agent's file: AgentSettings' fields (health's nested thresholds too) and the graces."""
    from slonkd.runtime.agent.sidecar import AgentSettings

    fields = {f.name for f in dataclasses.fields(AgentSettings)} - agent.NOT_IN_FILE
    assert agent.file_keys() == frozenset(fields | set(agent.POLICY_KEYS))
    doc = config_cmd.agent_schema()
    assert set(doc["properties"]) == agent.file_keys()
    assert [k for k, v in doc["properties"].items() if not v.get("description")] == []
    deep = {
        "health": {
            "mounts": ["/home"],
            "gpu": {"max_temperature_c": 90},
            "xid": {"fatal": {"79": "reboot"}},
            "disk": {"fail_free_fraction": 0.05},
        },
        "hysteresis": {"fail_n": 2, "window_m": 3, "clear_k": 1},
    }
    good = tmp_path / "agent.json"
    good.write_text(json.dumps(deep))
    ok = slonkd("config", "check", "agent", str(good))
    assert (ok.returncode, ok.stdout.strip()) == (0, "ok"), ok.stderr
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"health": {"xid": {"fatal": {"79": "explode"}}}}))
    refused = slonkd("config", "check", "agent", str(bad))
    assert refused.returncode == 2
    assert "health.xid.fatal.79 must be one of" in refused.stderr, refused.stderr


@pytest.mark.parametrize("role", ["coordinator", "agent"])
def test_each_environment_variable_sets_its_key_and_the_file_wins(
    role: str, tmp_path: Path
) -> None:
    """A role's ``ENV`` table is the one map of variables to keys, shown in its schema.

    Each variable alone sets its key; the same key in the file wins over it; the schema
    names the variable as ``x-env``.
    """
    module = coordinator if role == "coordinator" else agent
    base = {"POD_NAMESPACE": "ns", "POD_NAME": "w-0", "NODE_NAME": "n1"}
    samples: dict[str, tuple[str, str, Any, Any]] = {
        "SLONKD_CLUSTER": ("cluster", "c9", "c8", "c8"),
        "SLONKD_RESYNC_S": ("resync_s", "12", 13, 13.0),
        "SLONKD_METRICS_PORT": ("metrics_port", "9470", 9471, 9471),
        "SLONKD_METRICS_ADDRESS": ("metrics_address", "127.0.0.1", "127.0.0.2", "127.0.0.2"),
        "SLONKD_READY_FILE": ("ready_file", "/run/r1", "/run/r2", "/run/r2"),
        "SLONKD_SLURM_NODE": ("slurm_node", "gpu-1", "gpu-2", "gpu-2"),
        "KUBECONFIG": ("kubeconfig", "/k1", "/k2", "/k2"),
        "POD_NAME": ("identity" if role == "coordinator" else "pod_name", "w-5", "w-6", "w-6"),
    }
    props = (config_cmd.coordinator_schema if role == "coordinator" else config_cmd.agent_schema)()[
        "properties"
    ]
    assert {k: props[k]["x-env"] for k in module.ENV} == module.ENV
    for var, key in ((v, k) for k, v in module.ENV.items()):
        if var not in samples:
            continue
        name, from_env, from_file, loaded = samples[var]
        assert name == key, (var, name, key)
        alone = module.load_settings({**base, var: from_env})
        assert str(getattr(alone, key)) == str(type(loaded)(from_env)), var
        path = tmp_path / f"{key}.json"
        path.write_text(json.dumps({key: from_file}))
        both = module.load_settings({**base, var: from_env, "SLONKD_CONFIG": str(path)})
        assert getattr(both, key) == loaded, var
