"""A settings field declares its own sources: its variable, its old names, or none at all.

:func:`slonkd.core.config_tree.setting` on the field; :mod:`slonkd.core.config_sources`
reads the variables (typed by the field) and moves old flat keys to their nested place, one
deprecation line each; :func:`slonkd.core.config_tree.build` and ``schema`` leave the
wiring (``in_file=False``) out of the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from slonkd.core.config_sources import env_tree, lift_old_keys, merge
from slonkd.core.config_tree import build, schema, setting


@dataclass(frozen=True, slots=True, kw_only=True)
class Grace:
    """A nested section with an old flat key."""

    wait_s: float = 1.0
    """How long."""
    hidden: int = field(default=0, metadata=setting(old_key="legacy_hidden"))
    """Formerly flat."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Section:
    """A role's section."""

    name: str = field(metadata=setting(env="POD_NAME"))
    """The pod."""
    port: int = field(default=1, metadata=setting(old_env=("X_PORT",)))
    """A port."""
    on: bool = field(default=False, metadata=setting(env="X_ON"))
    """A switch."""
    grace: Grace = field(default_factory=Grace)
    """Nested."""
    wiring: object = field(default=None, metadata=setting(in_file=False))
    """Built by the command."""


def test_a_field_declares_its_variable_and_the_file_wins() -> None:
    """``env_tree`` reads each declared variable, typed; ``merge`` lays the file over it."""
    tree, notes = env_tree(Section, {"POD_NAME": "w-1", "X_ON": "true", "X_PORT": "7"}, path="r")
    assert tree == {"name": "w-1", "on": True, "port": 7}
    assert notes == ["X_PORT is deprecated: set r.port in the config file"]
    got = build(Section, merge(tree, {"port": 8}), given={"wiring": "w"})
    assert (got.name, got.port, got.on, got.wiring) == ("w-1", 8, True, "w")
    with pytest.raises(ValueError, match=r"^X_PORT must be a whole number"):
        env_tree(Section, {"X_PORT": "seven"}, path="r")


def test_an_old_flat_key_moves_to_its_nested_place_with_one_line() -> None:
    """``legacy_hidden`` is ``grace.hidden`` now: it loads, and one line names the new key."""
    raw, notes = lift_old_keys(Section, {"legacy_hidden": 3}, path="r", old_prefix="")
    assert raw == {"grace": {"hidden": 3}}
    assert notes == ["legacy_hidden is deprecated: write r.grace.hidden"]
    with pytest.raises(ValueError, match="legacy_hidden"):
        lift_old_keys(
            Section, {"legacy_hidden": 3, "grace": {"hidden": 4}}, path="r", old_prefix=""
        )


def test_wiring_is_no_key_of_the_file_and_no_key_of_the_schema() -> None:
    """A field marked ``in_file=False`` is refused in the file and absent from the schema."""
    with pytest.raises(ValueError, match=r"unknown keys \['wiring'\]"):
        build(Section, {"name": "x", "wiring": 1})
    props = schema(Section)["properties"]
    assert "wiring" not in props
    assert props["name"]["x-env"] == "POD_NAME"
    assert props["port"]["x-deprecated-env"] == ["X_PORT"]
