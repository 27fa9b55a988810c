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


def test_the_coordinators_keys_are_its_settings_fields_and_the_policy_nests() -> None:
    """A field added to CoordinatorSettings is a key of its section, with no list to update.

    The policy is one nested key (``policy.revalidation`` inside it); its old flat keys are
    declared on its fields (:func:`slonkd.core.config_tree.setting`), not in a table.
    """
    from slonkd.core.config_tree import of

    fields = {f.name for f in dataclasses.fields(CoordinatorSettings) if of(f).in_file}
    keys = set(config_cmd.role_schema("coordinator")["properties"])
    assert keys == fields
    assert {"change_poll", "change_poll_s", "job_blame", "rollout", "policy"} <= keys
    assert not {"slurm", "bus", "credentials", "api_tls", "nudge_client"} & keys
    old = {of(f).old_key for f in dataclasses.fields(Policy)} - {""}
    assert old == {f.name for f in dataclasses.fields(Policy)} - {"revalidation"}


def test_the_schema_has_every_key_with_its_default_and_a_description() -> None:
    """``slonkd config schema coordinator``: the section's keys, typed, defaulted, described."""
    doc = config_cmd.role_schema("coordinator")
    props = doc["properties"]
    assert doc["additionalProperties"] is False
    undescribed = [k for k, v in props.items() if not v.get("description")]
    assert undescribed == []
    assert props["max_out"] == {**props["max_out"], "type": "integer", "default": 10}
    policy = props["policy"]["properties"]
    assert policy["failure_grace_s"]["default"] == Policy().failure_grace_s
    assert policy["revalidation"]["properties"]["required"]["type"] == "array"
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
    assert json.loads(shown.stdout) == config_cmd.role_schema("coordinator")


def test_the_agents_keys_are_its_settings_fields_and_every_health_field_is_settable(
    tmp_path: Path,
) -> None:
    """The agent's section: AgentSettings' fields (health's nested thresholds too)."""
    from slonkd.core.config_tree import of
    from slonkd.runtime.agent.settings import AgentSettings

    fields = {f.name for f in dataclasses.fields(AgentSettings) if of(f).in_file}
    doc = config_cmd.role_schema("agent")
    assert set(doc["properties"]) == fields
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
    """Each field names its variables itself, shown in its schema (``x-env``, old ones too).

    Each variable alone sets its key; the same key in the file wins over it.
    """
    from slonkd.core.config_tree import of
    from slonkd.runtime.config_root import section_class

    module = coordinator if role == "coordinator" else agent
    base = {"POD_NAMESPACE": "ns", "POD_NAME": "w-0", "NODE_NAME": "n1"}
    samples: dict[str, tuple[str, Any, Any]] = {
        "SLONKD_CLUSTER": ("c9", "c8", "c8"),
        "SLONKD_RESYNC_S": ("12", 13, 13.0),
        "SLONKD_METRICS_PORT": ("9470", 9471, 9471),
        "SLONKD_METRICS_ADDRESS": ("127.0.0.1", "127.0.0.2", "127.0.0.2"),
        "SLONKD_READY_FILE": ("/run/r1", "/run/r2", "/run/r2"),
        "SLONKD_SLURM_NODE": ("gpu-1", "gpu-2", "gpu-2"),
        "KUBECONFIG": ("/k1", "/k2", "/k2"),
        "POD_NAME": ("w-5", "w-6", "w-6"),
    }
    props = config_cmd.role_schema(role)["properties"]
    declared = {
        var: f.name
        for f in dataclasses.fields(section_class(role))
        if of(f).in_file
        for var in (of(f).env, *of(f).old_env)
        if var
    }
    for var, key in declared.items():
        assert var in (props[key].get("x-env"), *props[key].get("x-deprecated-env", ())), var
        if var not in samples:
            continue
        from_env, from_file, loaded = samples[var]
        alone = module.load_settings({**base, var: from_env})
        assert str(getattr(alone, key)) == str(type(loaded)(from_env)), var
        path = tmp_path / f"{key}.json"
        path.write_text(json.dumps({role: {key: from_file}}))
        both = module.load_settings({**base, var: from_env, "SLONKD_CONFIG": str(path)})
        assert getattr(both, key) == loaded, var
    assert "SLONKD_RESYNC_S" in declared or role == "coordinator"
