"""One configuration tree for every role: ``agent``, ``coordinator`` and ``prestop`` sections.

A field declares its environment variable and its old names on itself
(:func:`slonkd.core.config_tree.setting`); the old flat per-role files and the old
``SLONKD_*`` variables still load, each with one deprecation line naming the new key; an
unknown key is refused naming it; ``slonkd config schema`` describes the whole tree.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from slonkd.cli import agent, config_cmd, coordinator
from tests.cli import slonkd

POD = {"POD_NAME": "w-0", "POD_NAMESPACE": "ns", "NODE_NAME": "n1"}


def test_no_hand_kept_key_tables_are_left() -> None:
    """The roles' key tables are gone: the settings classes' fields are the only list."""
    for module in (agent, coordinator):
        for name in ("NOT_IN_FILE", "POLICY_KEYS", "REVALIDATION_KEYS", "ENV"):
            assert not hasattr(module, name), (module.__name__, name)


def _write(tmp_path: Path, doc: object) -> str:
    path = tmp_path / "slonkd.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_one_file_serves_every_role(tmp_path: Path) -> None:
    """The whole tree in one file: each role builds its own section, with no deprecation."""
    doc = {
        "coordinator": {"resync_s": 45, "policy": {"failure_grace_s": 30}},
        "agent": {"resync_s": 12, "policy": {"unready_grace_s": 7}},
        "prestop": {"grace_s": 60},
    }
    notes: list[str] = []
    env = {**POD, "SLONKD_CONFIG": _write(tmp_path, doc)}
    c = coordinator.load_settings(env, notes)
    a = agent.load_settings(env, notes)
    assert (c.resync_s, c.policy.failure_grace_s) == (45, 30)
    assert (a.resync_s, a.policy.unready_grace_s) == (12, 7)
    assert notes == []


def test_an_old_flat_file_loads_with_deprecation_lines_naming_the_new_keys(
    tmp_path: Path,
) -> None:
    """Today's flat coordinator file: the same settings, one line per old key and the format."""
    old = {"resync_s": 45, "failure_grace_s": 30, "revalidate_checks": ["dcgm-diag"]}
    notes: list[str] = []
    c = coordinator.load_settings({**POD, "SLONKD_CONFIG": _write(tmp_path, old)}, notes)
    assert (c.resync_s, c.policy.failure_grace_s) == (45, 30)
    assert c.policy.revalidation.required == ("dcgm-diag",)
    assert any("coordinator.policy.failure_grace_s" in n for n in notes), notes
    assert any("coordinator.policy.revalidation.required" in n for n in notes), notes
    assert any("flat" in n and '"coordinator"' in n for n in notes), notes


def test_an_old_variable_loads_with_one_line_naming_the_new_key() -> None:
    """``SLONKD_RESYNC_S`` still sets the agent's resync, and says ``agent.resync_s`` once."""
    notes: list[str] = []
    a = agent.load_settings({**POD, "SLONKD_RESYNC_S": "12"}, notes)
    assert a.resync_s == 12
    assert notes == ["SLONKD_RESYNC_S is deprecated: set agent.resync_s in the config file"]


def test_the_deprecation_line_reaches_stderr_once_and_the_role_starts(tmp_path: Path) -> None:
    """``slonkd config check`` of an old file: ok, and one stderr line per old key."""
    path = _write(tmp_path, {"failure_grace_s": 30})
    done = slonkd("config", "check", "coordinator", path)
    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr
    lines = done.stderr.strip().splitlines()
    assert len([x for x in lines if "coordinator.policy.failure_grace_s" in x]) == 1, lines
    assert all("deprecated" in x for x in lines), lines


@pytest.mark.parametrize(
    ("doc", "named"),
    [
        ({"coordinator": {"resync": 1}}, "resync"),
        ({"coordinatr": {"resync_s": 1}}, "coordinatr"),
        ({"coordinator": {"policy": {"remediat": True}}}, "remediat"),
    ],
)
def test_an_unknown_key_is_refused_in_one_line_naming_it(
    tmp_path: Path, doc: dict[str, object], named: str
) -> None:
    """A typo anywhere in the tree: exit 2, one stderr line naming the key."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLONKD_", "POD_"))}
    done = slonkd(
        "coordinator",
        env={**base, **POD, "SLONKD_CONFIG": _write(tmp_path, doc), "KUBECONFIG": "/none"},
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1, lines
    assert named in lines[0], lines


def test_the_agent_takes_only_the_graces_of_the_policy(tmp_path: Path) -> None:
    """``agent.policy`` has the two graces the agent uses; the coordinator's policy keys are not."""
    props = config_cmd.role_schema("agent")["properties"]["policy"]["properties"]
    assert set(props) == {"failure_grace_s", "unready_grace_s"}
    bad = {"agent": {"policy": {"remediate": False}}}
    with pytest.raises(ValueError, match="remediate"):
        agent.load_settings({**POD, "SLONKD_CONFIG": _write(tmp_path, bad)})


def test_one_schema_covers_every_role() -> None:
    """``slonkd config schema``: the root, a section per role, each the role's own schema."""
    done = slonkd("config", "schema")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert set(doc["properties"]) == {"agent", "coordinator", "prestop"}
    assert doc["additionalProperties"] is False
    for role in ("agent", "coordinator", "prestop"):
        section = {k: v for k, v in doc["properties"][role].items() if k != "description"}
        assert section == {k: v for k, v in config_cmd.role_schema(role).items() if k != "$schema"}
    assert json.loads(slonkd("config", "schema", "all").stdout) == doc
    prestop = doc["properties"]["prestop"]["properties"]
    assert {"grace_s", "checkpoint_signal", "checkpoint_window_s", "report_url"} <= set(prestop)
    coordinator_props = doc["properties"]["coordinator"]["properties"]
    assert "failure_grace_s" not in coordinator_props  # the old flat alias: policy.failure_grace_s
    assert "revalidation" in coordinator_props["policy"]["properties"]
    assert not {"slurm", "bus", "credentials", "api_tls"} & set(coordinator_props)


def test_every_field_is_in_the_file_or_marked_wiring() -> None:
    """No list of keys anywhere: a settings field is a key unless it says ``in_file=False``."""
    from slonkd.cli.config import ROOT_KEYS
    from slonkd.core.config_tree import of
    from slonkd.runtime.config_root import ROLES, section_class

    assert ROOT_KEYS == ROLES

    for role in ("agent", "coordinator", "prestop"):
        cls = section_class(role)
        props = config_cmd.role_schema(role)["properties"]
        for f in dataclasses.fields(cls):
            assert (f.name in props) == of(f).in_file, (role, f.name)


def test_prestop_reads_its_section_under_its_flags_and_leaves_an_old_flat_file_alone(
    tmp_path: Path,
) -> None:
    """Flags over ``prestop.*`` over the old variables; a flat file is the agent's, not its own."""
    from slonkd.cli import prestop

    path = _write(tmp_path, {"prestop": {"grace_s": 60, "checkpoint_signal": "B:USR1"}})
    notes: list[str] = []
    env = {"POD_NAME": "w-0", "SLONKD_CONFIG": path, "SLONKD_GRACE_S": "90"}
    s = prestop.settings_from(prestop.flags_unset(), env, notes)
    assert (s.node, s.grace_s, str(s.checkpoint_signal)) == ("w-0", 60, "B:USR1")
    assert notes == ["SLONKD_GRACE_S is deprecated: set prestop.grace_s in the config file"]
    flags = prestop.flags_unset()
    flags.grace = 45.0
    assert prestop.settings_from(flags, env).grace_s == 45
    flat = _write(tmp_path, {"resync_s": 5, "health": {"mounts": ["/home"]}})
    old = prestop.settings_from(prestop.flags_unset(), {"POD_NAME": "w-0", "SLONKD_CONFIG": flat})
    assert old.grace_s == 30


def test_a_role_logs_each_deprecation_once_as_a_warning_in_its_json_log() -> None:
    """The daemons' line is ``config.deprecated`` in their JSON log (the harness reads it too)."""
    from structlog.testing import capture_logs

    from slonkd.cli.config import deprecations
    from slonkd.core.log_events import CONFIG_DEPRECATED

    note = "SLONKD_RESYNC_S is deprecated: set agent.resync_s in the config file"
    with capture_logs() as logs:
        deprecations("agent", [note, note])
    assert logs == [
        {"event": CONFIG_DEPRECATED, "log_level": "warning", "command": "agent", "detail": note}
    ]
