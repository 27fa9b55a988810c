"""Settings trees: frozen dataclasses built from a JSON object, and their JSON Schema.

A settings class *is* its part of the configuration: its fields are the keys, their
annotations the types, their defaults the defaults (nowhere else). :func:`build` makes an
instance from the object a config file holds, refusing unknown keys and wrong types with the
key's path (``job_blame.min_failures must be a whole number``) before the class's own
``__post_init__`` checks the values; :func:`schema` describes the same tree as JSON Schema
for ``slonkd config schema``. Used by :mod:`slonkd.cli.coordinator` (the coordinator's file,
whose flat policy keys are aliases of nested fields) and the nested settings classes:
:class:`~slonkd.core.rollout.RolloutSettings`,
:class:`~slonkd.runtime.coordinating.settings.JobBlameSettings`.

Types understood: ``bool``, ``int`` (never a bool), ``float`` (an int is welcome), ``str``,
an enum (its values), ``tuple[T, ...]``, ``Sequence[T]`` and ``frozenset[T]`` (a JSON list),
``Mapping[K, V]`` (a JSON object; ``int`` keys written as text), another settings dataclass
(a JSON object), and ``X | None`` (``null``). Anything else is a programming error, raised
as TypeError.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")

Describe = Callable[[type[Any], str], str]
"""A field's description: ``describe(settings class, field name)``."""


def build(cls: type[T], raw: Any, *, path: str = "", non_negative: bool = False) -> T:
    """An instance of the settings dataclass ``cls`` from the JSON object ``raw``.

    ValueError (one line, naming the key's path) on an unknown key, a wrong type or a value
    the class refuses. ``non_negative``: every number in the tree must be >= 0.
    """
    if not isinstance(raw, Mapping):
        raise ValueError(f"{path or 'settings'} must be a JSON object")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"{path + ': ' if path else ''}unknown keys {unknown}")
    values = {
        key: value_of(value, hints[key], _join(path, key), non_negative=non_negative)
        for key, value in raw.items()
    }
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:
        said = str(exc)
        named = not path or said.startswith((f"{path}.", f"{path}:", f"{path} "))
        raise ValueError(said if named else f"{path}.{said}") from None


def value_of(value: Any, hint: Any, path: str, *, non_negative: bool = False) -> Any:
    """``value`` as the Python value of type ``hint`` (ValueError naming ``path`` if not)."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = (a for a in args if a is not type(None))
        return value_of(value, inner, path, non_negative=non_negative)
    if hint is bool:
        if not isinstance(value, bool):
            raise ValueError(f"{path} must be true or false")
        return value
    if hint in (int, float):
        return _number(value, hint, path, non_negative=non_negative)
    if hint is str:
        if not isinstance(value, str):
            raise ValueError(f"{path} must be a string")
        return value
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        choices = [m.value for m in hint]
        if value not in choices:
            raise ValueError(f"{path} must be one of {choices}")
        return hint(value)
    item = _item_type(hint)
    if item is not None:
        if not isinstance(value, list):
            raise ValueError(f"{path} must be a list")
        items = [
            value_of(v, item, f"{path}[{i}]", non_negative=non_negative)
            for i, v in enumerate(value)
        ]
        return frozenset(items) if typing.get_origin(hint) is frozenset else tuple(items)
    if typing.get_origin(hint) in (collections.abc.Mapping, dict):
        return _mapping(value, args, path, non_negative=non_negative)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return build(hint, value, path=path, non_negative=non_negative)
    raise TypeError(f"{path}: settings of type {hint!r} are not supported")


def _item_type(hint: Any) -> Any:
    """The item type of a list-like settings type (None: not one)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return args[0]
    if origin in (collections.abc.Sequence, frozenset) and len(args) == 1:
        return args[0]
    return None


def _mapping(value: Any, args: tuple[Any, ...], path: str, *, non_negative: bool) -> dict[Any, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{path} must be a JSON object")
    key_type, value_type = args
    out: dict[Any, Any] = {}
    for raw_key, raw in value.items():
        key: Any = raw_key
        if key_type is int:
            try:
                key = int(str(raw_key))
            except ValueError:
                raise ValueError(f"{path} keys must be whole numbers") from None
        out[key] = value_of(raw, value_type, f"{path}.{raw_key}", non_negative=non_negative)
    return out


def _number(value: Any, hint: type, path: str, *, non_negative: bool) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{path} must be a number")
    if hint is int and not isinstance(value, int):
        raise ValueError(f"{path} must be a whole number")
    if non_negative and not value >= 0:
        raise ValueError(f"{path} must be a non-negative number")
    return value if hint is int else float(value)


def schema(
    cls: type[Any], *, describe: Describe | None = None, skip: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """JSON Schema of the settings dataclass ``cls``, the fields in ``skip`` left out.

    Defaults come from the class; ``describe`` gives each field's description.
    """
    hints = typing.get_type_hints(cls)
    props: dict[str, Any] = {}
    required: list[str] = []
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        prop = type_schema(hints[f.name], describe)
        default = _default(f)
        if default is dataclasses.MISSING:
            required.append(f.name)
        else:
            prop["default"] = default
        text = describe(cls, f.name) if describe is not None else ""
        if text:
            prop["description"] = text
        props[f.name] = prop
    out: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        out["required"] = required
    return out


def type_schema(hint: Any, describe: Describe | None = None) -> dict[str, Any]:
    """The JSON Schema of one settings type (see the module docstring for the types)."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        (inner,) = (a for a in args if a is not type(None))
        return {"anyOf": [type_schema(inner, describe), {"type": "null"}]}
    simple = {bool: "boolean", int: "integer", float: "number", str: "string"}
    if hint in simple:
        return {"type": simple[hint]}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"enum": [m.value for m in hint]}
    item = _item_type(hint)
    if item is not None:
        return {"type": "array", "items": type_schema(item, describe)}
    if typing.get_origin(hint) in (collections.abc.Mapping, dict):
        return {"type": "object", "additionalProperties": type_schema(args[1], describe)}
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return schema(hint, describe=describe)
    raise TypeError(f"settings of type {hint!r} are not supported")


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return _jsonable(f.default)
    if f.default_factory is not dataclasses.MISSING:
        return _jsonable(f.default_factory())
    return dataclasses.MISSING


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if isinstance(value, frozenset):
        return sorted(_jsonable(v) for v in value)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, enum.Enum):
        return value.value
    return value


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


__all__ = ["Describe", "build", "schema", "type_schema", "value_of"]
