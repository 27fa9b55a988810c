"""``slonkd config``: the coordinator's config file described and checked for operators.

``slonkd config schema coordinator`` prints the JSON Schema of the file ``SLONKD_CONFIG``
names: every key with its type, default and description, taken from the settings classes
themselves (:mod:`slonkd.core.config_tree`; the keys are :func:`slonkd.cli.coordinator.file_keys`).
``slonkd config check coordinator FILE`` loads FILE exactly as ``slonkd coordinator`` would
(with this environment) and prints ``ok``, or the one-line reason and exits 2.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import json
import os
import sys
import textwrap
import typing
from typing import Any

from slonkd.cli import coordinator
from slonkd.core.config_tree import schema, type_schema
from slonkd.core.decide import Policy
from slonkd.core.revalidation import RevalidationPolicy

EXIT_BAD = 2


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``config schema`` and ``config check``."""
    parser = sub.add_parser("config", help="describe or check a config file", description=__doc__)
    verbs = parser.add_subparsers(dest="verb", required=True)
    show = verbs.add_parser("schema", help="print the JSON Schema of a role's config file")
    show.add_argument("role", choices=["coordinator"])
    show.set_defaults(func=main_schema)
    check = verbs.add_parser("check", help="load a config file as the role would; exit 2 if bad")
    check.add_argument("role", choices=["coordinator"])
    check.add_argument("file")
    check.set_defaults(func=main_check)


def coordinator_schema() -> dict[str, Any]:
    """The JSON Schema of the coordinator's config file (keys, types, defaults, descriptions)."""
    from slonkd.runtime.coordinating import CoordinatorSettings

    skip = coordinator.NOT_IN_FILE | {"topology"}
    out = schema(CoordinatorSettings, describe=describe, skip=frozenset(skip))
    out.pop("required", None)  # namespace and identity come from the environment too
    props = out["properties"]
    props["topology"] = {
        "anyOf": [{"type": "object"}, {"type": "null"}],
        "default": None,
        "description": describe(CoordinatorSettings, "topology")
        + " (keys: slonkd.runtime.topology_settings)",
    }
    for keys, cls in (
        (coordinator.POLICY_KEYS, Policy),
        (coordinator.REVALIDATION_KEYS, RevalidationPolicy),
    ):
        hints = typing.get_type_hints(cls)
        defaults = {f.name: f for f in dataclasses.fields(cls)}
        for key, name in keys.items():
            prop = type_schema(hints[name], describe)
            field = defaults[name]
            default = field.default
            if isinstance(default, tuple):
                default = list(default)
            prop["default"] = default
            text = describe(cls, name)
            if text:
                prop["description"] = text
            props[key] = prop
    out["properties"] = dict(sorted(props.items()))
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **out}


def describe(cls: type[Any], name: str) -> str:
    """A settings field's attribute docstring, on one line ("" if it has none)."""
    key = f"{cls.__module__}.{cls.__qualname__}"
    if key not in _DOCS:
        _DOCS[key] = _docstrings(cls)
    return _DOCS[key].get(name, "")


_DOCS: dict[str, dict[str, str]] = {}


def _docstrings(cls: type[Any]) -> dict[str, str]:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return {}
    body = next((n.body for n in tree.body if isinstance(n, ast.ClassDef)), [])
    docs: dict[str, str] = {}
    for node, after in zip(body, [*body[1:], None], strict=True):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def main_schema(args: argparse.Namespace) -> int:
    """Print the schema."""
    print(json.dumps(coordinator_schema(), indent=2))
    return 0


def main_check(args: argparse.Namespace) -> int:
    """Load the file as the role would."""
    env = {**os.environ, "SLONKD_CONFIG": args.file}
    env.setdefault("POD_NAMESPACE", "default")  # the file is checked, not the pod's env
    try:
        coordinator.load_settings(env)
    except ValueError as exc:
        print(f"slonkd config check: {exc}", file=sys.stderr)
        return EXIT_BAD
    print("ok")
    return 0


def main(args: argparse.Namespace) -> int:
    """Run ``slonkd config``."""
    return int(args.func(args))
