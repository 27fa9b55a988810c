"""Settings trees: frozen dataclasses built from a JSON object, and their JSON Schema.

A settings class *is* its part of the configuration: its fields are the keys, their
annotations the types, their defaults the defaults (nowhere else). :func:`build` makes an
instance from the object a config file holds, refusing unknown keys and wrong types with the
key's path (``job_blame.min_failures must be a whole number``) before the class's own
``__post_init__`` checks the values; :func:`schema` describes the same tree as JSON Schema
for ``slonkd config schema``. Used by every role's loader (:mod:`slonkd.cli.agent`,
:mod:`slonkd.cli.coordinator`, :mod:`slonkd.cli.prestop`: each builds its section of the
tree) and the nested settings classes: :class:`~slonkd.core.rollout.RolloutSettings`,
:class:`~slonkd.runtime.coordinating.settings.JobBlameSettings`.

A field says where else its value may come from on itself, in its metadata
(:func:`setting`): the environment variable that sets it, the old variables and the old flat
key that still do (with a deprecation line), or that it is no key of the file at all (wiring
the command builds: the MQTT client, the SLURM runner). :mod:`slonkd.core.config_sources`
reads those; the root of every role's sections is :mod:`slonkd.runtime.config_root`.

Types understood: ``bool``, ``int`` (never a bool), ``float`` (an int is welcome), ``str``,
an enum (its values), ``tuple[T, ...]``, ``Sequence[T]`` and ``frozenset[T]`` (a JSON list),
``Mapping[K, V]`` (a JSON object; ``int`` keys written as text), another settings dataclass
(a JSON object), a class with a ``parse(text)`` classmethod (a JSON string, its ``str()``
the default's text, e.g. :class:`~slonkd.core.checkpoint.SignalSpec`), and ``X | None``
(``null``). Anything else is a programming error, raised as TypeError.
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

_KEY = "slonkd.setting"


@dataclasses.dataclass(frozen=True, slots=True)
class Setting:
    """Where a settings field's value may come from besides the file (see :func:`setting`)."""

    env: str = ""
    """The environment variable that sets it when the file does not (e.g. ``POD_NAME``)."""
    old_env: tuple[str, ...] = ()
    """Old variables that still set it (before ``env``), each with a deprecation line."""
    old_key: str = ""
    """Its old flat key in the role's section (e.g. ``failure_grace_s`` for
    ``policy.failure_grace_s``): still read, with a deprecation line."""
    in_file: bool = True
    """False: no key of the file (the command builds it from the environment)."""
    only: frozenset[str] | None = None
    """For a nested settings class: only these of its fields are keys here."""


def setting(
    *,
    env: str = "",
    old_env: tuple[str, ...] = (),
    old_key: str = "",
    in_file: bool = True,
    only: frozenset[str] | None = None,
) -> Mapping[str, Any]:
    """A field's metadata: ``field(default=..., metadata=setting(env="POD_NAME"))``."""
    return types.MappingProxyType({_KEY: Setting(env, old_env, old_key, in_file, only)})


def of(f: dataclasses.Field[Any]) -> Setting:
    """The field's :class:`Setting` (the plain one when it declares none)."""
    found = f.metadata.get(_KEY)
    return found if isinstance(found, Setting) else Setting()


def file_fields(cls: type[Any], only: frozenset[str] | None = None) -> list[dataclasses.Field[Any]]:
    """The fields of ``cls`` that are keys of the file (all but wiring, within ``only``)."""
    return [
        f for f in dataclasses.fields(cls) if of(f).in_file and (only is None or f.name in only)
    ]


Describe = Callable[[type[Any], str], str]
"""A field's description: ``describe(settings class, field name)``."""


def build(
    cls: type[T],
    raw: Any,
    *,
    path: str = "",
    non_negative: bool = False,
    given: Mapping[str, Any] | None = None,
    only: frozenset[str] | None = None,
) -> T:
    """An instance of the settings dataclass ``cls`` from the JSON object ``raw``.

    ValueError (one line, naming the key's path) on an unknown key, a wrong type or a value
    the class refuses. ``non_negative``: every number in the tree must be >= 0. ``given``:
    fields the caller built (wiring, or a key with its own format), passed as they are;
    ``only``: the fields that are keys here (the others keep their defaults).
    """
    if not isinstance(raw, Mapping):
        raise ValueError(f"{path or 'settings'} must be a JSON object")
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in file_fields(cls, only)}
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise ValueError(f"{path + ': ' if path else ''}unknown keys {unknown}")
    values = {
        key: value_of(
            value,
            hints[key],
            _join(path, key),
            non_negative=non_negative,
            only=of(known[key]).only,
        )
        for key, value in raw.items()
    }
    try:
        return cls(**values, **(given or {}))
    except (TypeError, ValueError) as exc:
        said = str(exc)
        named = not path or said.startswith((f"{path}.", f"{path}:", f"{path} "))
        raise ValueError(said if named else f"{path}.{said}") from None


def value_of(
    value: Any,
    hint: Any,
    path: str,
    *,
    non_negative: bool = False,
    only: frozenset[str] | None = None,
) -> Any:
    """``value`` as the Python value of type ``hint`` (ValueError naming ``path`` if not)."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = (a for a in args if a is not type(None))
        return value_of(value, inner, path, non_negative=non_negative, only=only)
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
    if is_text_type(hint):
        if not isinstance(value, str):
            raise ValueError(f"{path} must be a string")
        try:
            return hint.parse(value)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
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
        return build(hint, value, path=path, non_negative=non_negative, only=only)
    raise TypeError(f"{path}: settings of type {hint!r} are not supported")


def is_text_type(hint: Any) -> bool:
    """Whether ``hint`` is a class written as a string (it has a ``parse(text)`` classmethod)."""
    return isinstance(hint, type) and callable(getattr(hint, "parse", None))


def nested_class(hint: Any) -> type[Any] | None:
    """The settings dataclass of a nested section that is always there (not ``X | None``)."""
    if dataclasses.is_dataclass(hint) and isinstance(hint, type) and not is_text_type(hint):
        return hint
    return None


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
    cls: type[Any],
    *,
    describe: Describe | None = None,
    skip: frozenset[str] = frozenset(),
    only: frozenset[str] | None = None,
) -> dict[str, Any]:
    """JSON Schema of the settings dataclass ``cls``: its file's keys, those in ``skip`` left out.

    Defaults come from the class; ``describe`` gives each field's description; a key's
    variable is ``x-env``, its old variables ``x-deprecated-env``.
    """
    hints = typing.get_type_hints(cls)
    props: dict[str, Any] = {}
    required: list[str] = []
    for f in file_fields(cls, only):
        if f.name in skip:
            continue
        prop = type_schema(hints[f.name], describe, only=of(f).only)
        default = _default(f)
        if default is dataclasses.MISSING:
            required.append(f.name)
        else:
            prop["default"] = default
        text = describe(cls, f.name) if describe is not None else ""
        if text:
            prop["description"] = text
        if of(f).env:
            prop["x-env"] = of(f).env
        if of(f).old_env:
            prop["x-deprecated-env"] = list(of(f).old_env)
        props[f.name] = prop
    out: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        out["required"] = required
    return out


def type_schema(
    hint: Any, describe: Describe | None = None, *, only: frozenset[str] | None = None
) -> dict[str, Any]:
    """The JSON Schema of one settings type (see the module docstring for the types)."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        (inner,) = (a for a in args if a is not type(None))
        return {"anyOf": [type_schema(inner, describe, only=only), {"type": "null"}]}
    simple = {bool: "boolean", int: "integer", float: "number", str: "string"}
    if hint in simple:
        return {"type": simple[hint]}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"enum": [m.value for m in hint]}
    if is_text_type(hint):
        return {"type": "string"}
    item = _item_type(hint)
    if item is not None:
        return {"type": "array", "items": type_schema(item, describe)}
    if typing.get_origin(hint) in (collections.abc.Mapping, dict):
        return {"type": "object", "additionalProperties": type_schema(args[1], describe)}
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return schema(hint, describe=describe, only=only)
    raise TypeError(f"settings of type {hint!r} are not supported")


def _default(f: dataclasses.Field[Any]) -> Any:
    only = of(f).only
    if only is not None and f.default_factory is not dataclasses.MISSING:
        whole = _jsonable(f.default_factory())
        return {k: v for k, v in whole.items() if k in only}
    if f.default is not dataclasses.MISSING:
        return _jsonable(f.default)
    if f.default_factory is not dataclasses.MISSING:
        return _jsonable(f.default_factory())
    return dataclasses.MISSING


def _jsonable(value: Any) -> Any:
    if is_text_type(type(value)):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in file_fields(type(value))}
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


__all__ = [
    "Describe",
    "Setting",
    "build",
    "file_fields",
    "is_text_type",
    "nested_class",
    "of",
    "schema",
    "setting",
    "type_schema",
    "value_of",
]
