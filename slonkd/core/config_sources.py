"""Where a section's values come from besides its keys: the environment and the old names.

Each settings field declares its sources on itself (:func:`slonkd.core.config_tree.setting`):
:func:`env_tree` reads the declared variables into a JSON tree shaped as the file (typed by
the fields, so ``SLONKD_RESYNC_S=12`` is the number 12); :func:`lift_old_keys` moves a
section's old flat keys (``failure_grace_s``) to their nested place
(``policy.failure_grace_s``); :func:`merge` lays the file over the environment, the file
winning key by key. Each old variable or key read gives one deprecation line naming the new
key. Neighbours: :mod:`slonkd.core.config_tree` (builds and describes the tree) and
:mod:`slonkd.cli.config` (reads the file and puts a role's section together with these).
"""

from __future__ import annotations

import enum
import math
import re
import typing
from collections.abc import Mapping
from typing import Any

from slonkd.core.config_tree import file_fields, is_text_type, nested_class, of

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def env_tree(
    cls: type[Any], env: Mapping[str, str], *, path: str, only: frozenset[str] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """The values ``env`` sets in the section ``cls`` (at ``path``), and the deprecation lines.

    An old variable wins over the field's own (it is the more specific one, as before); an
    empty variable is unset. ValueError naming the variable when its text is no such value.
    """
    hints = typing.get_type_hints(cls)
    tree: dict[str, Any] = {}
    notes: list[str] = []
    for f in file_fields(cls, only):
        key = f"{path}.{f.name}" if path else f.name
        inner = nested_class(hints[f.name])
        if inner is not None:
            sub, more = env_tree(inner, env, path=key, only=of(f).only)
            if sub:
                tree[f.name] = sub
            notes += more
            continue
        s = of(f)
        for var in (*s.old_env, s.env):
            if var and env.get(var):
                tree[f.name] = from_text(env[var], hints[f.name], var)
                if var != s.env:
                    notes.append(f"{var} is deprecated: set {key} in the config file")
                break
    return tree, notes


def from_text(text: str, hint: Any, var: str) -> Any:
    """The JSON value of a variable's ``text`` for a field of type ``hint``."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) is not None and len(args) == 1:
        hint = args[0]  # X | None: a set variable is an X
    if hint is str or is_text_type(hint):
        return text
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return text.strip()  # its value; the tree's build refuses one not among them
    if hint is bool:
        if text.strip().lower() not in _TRUE | _FALSE:
            raise ValueError(f"{var} must be true or false, not {text[:40]!r}")
        return text.strip().lower() in _TRUE
    if hint is int:
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"{var} must be a whole number, not {text[:40]!r}") from None
    if hint is float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise ValueError(f"{var} must be a number, not {text[:40]!r}")
        return value
    raise TypeError(f"{var}: a variable cannot set a setting of type {hint!r}")


def lift_old_keys(
    cls: type[Any],
    raw: Mapping[str, Any],
    *,
    path: str,
    old_prefix: str,
    renamed: dict[str, str] | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """``raw`` with the old flat keys of ``cls``'s nested fields moved to their place.

    ``path``: the section's new path (``coordinator``); ``old_prefix``: how the old key was
    written (``""`` in an old flat file). ValueError when both the old and the new key are set.
    ``renamed`` gets each moved key's new path in the section and the old key as written.
    """
    out = dict(raw)
    notes: list[str] = []
    for old, nested in old_keys(cls).items():
        if old not in out:
            continue
        value = out.pop(old)
        here = out
        for part in nested[:-1]:
            sub = here.get(part)
            if sub is None:
                sub = {}
            elif not isinstance(sub, Mapping):
                raise ValueError(f"{path}.{'.'.join(nested[:-1])} must be a JSON object")
            here[part] = dict(sub)
            here = here[part]
        new = f"{path}.{'.'.join(nested)}"
        if nested[-1] in here:
            raise ValueError(f"{old_prefix}{old} and {new} are both set: keep {new}")
        here[nested[-1]] = value
        if renamed is not None:
            renamed[".".join(nested)] = f"{old_prefix}{old}"
        notes.append(f"{old_prefix}{old} is deprecated: write {new}")
    return out, notes


def old_keys(
    cls: type[Any], at: tuple[str, ...] = (), only: frozenset[str] | None = None
) -> dict[str, tuple[str, ...]]:
    """Every old flat key under ``cls`` and the path of the field it names now."""
    hints = typing.get_type_hints(cls)
    found: dict[str, tuple[str, ...]] = {}
    for f in file_fields(cls, only):
        inner = nested_class(hints[f.name])
        if inner is not None:
            found.update(old_keys(inner, (*at, f.name), of(f).only))
        elif of(f).old_key and at:
            found[of(f).old_key] = (*at, f.name)
    return found


def say_old_names(said: str, renamed: Mapping[str, str]) -> str:
    """``said`` naming each moved key's old name too, as the file wrote it.

    E.g. ``revalidate (policy.revalidation.enabled) must be true or false``.
    """
    for new, old in renamed.items():
        said = re.sub(rf"(?<![\w.]){re.escape(new)}(?![\w])", f"{old} ({new})", said)
    return said


def merge(under: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` laid on ``under``, key by key into nested objects (``over`` wins)."""
    out = dict(under)
    for key, value in over.items():
        below = out.get(key)
        if isinstance(value, Mapping) and isinstance(below, Mapping):
            out[key] = merge(below, value)
        else:
            out[key] = value
    return out


__all__ = ["env_tree", "from_text", "lift_old_keys", "merge", "old_keys", "say_old_names"]
