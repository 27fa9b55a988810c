"""``slonkd config``: the configuration tree of every role, described and checked.

``slonkd config schema`` (or ``all``) prints the JSON Schema of the file ``SLONKD_CONFIG``
names: the root (:class:`~slonkd.runtime.config_root.SlonkdConfig`) with a section per role,
``agent``, ``coordinator`` and ``prestop``; ``slonkd config schema ROLE`` prints one
section. Every key has its type, default and description, taken from the settings classes
themselves (:mod:`slonkd.core.config_tree`), and as ``x-env`` the environment variable that
sets it when the file does not (``x-deprecated-env``: old variables that still do).
``slonkd config check ROLE FILE`` (or ``all``) loads FILE exactly as the role would (with
this environment) and prints ``ok``, or the one-line reason and exits 2; deprecated keys
and variables are named on stderr, one line each.

``slonkd config schema ROLE --chart`` prints the part of a section the Helm chart leaves to
its ``coordinator.config``/``agent.config`` value: every key but those the chart writes
itself (:data:`CHART_SETS`). The chart's values.schema.json carries it (``scripts/chart-schema``
writes it there; tests/unit/test_chart_config.py fails when it is stale).
"""

from __future__ import annotations

import argparse
import ast
import inspect
import json
import os
import sys
import textwrap
from typing import Any

from slonkd.cli import agent, coordinator, prestop
from slonkd.cli.config import ROOT_KEYS, deprecations
from slonkd.core.config_sources import old_keys
from slonkd.core.config_tree import schema

EXIT_BAD = 2
SCHEMA = "https://json-schema.org/draft/2020-12/schema"
CHART_ROLES = ("coordinator", "agent")
"""The roles whose section the chart renders (prestop takes its flags from the chart)."""

CHART_SETS: dict[str, frozenset[str]] = {
    "coordinator": frozenset({
        # from the pod: its namespace and name, the in-cluster client, the Service's port
        "namespace", "identity", "kubeconfig", "api_host",
        # from the chart's curated values (camelCase, e.g. coordinator.budget.maxOut)
        "cluster", "pod_selector", "lease_name", "lease_duration_s", "renew_deadline_s",
        "retry_period_s", "policy.failure_grace_s", "policy.revalidation", "state_name",
        "api_port", "metrics_port", "audit_path",
        "audit_max_bytes", "audit_keep", "max_out", "max_out_percent", "mass_percent",
        "dry_run", "fleet_metrics", "sdiag_s", "topology", "trigger_program", "job_blame",
        "quarantine_alert_s", "pool_modes",  # pool_modes: each of pools[].mode
    }),
    "agent": frozenset({
        # from the pod (the downward API and the chart's wiring)
        "pod_name", "namespace", "kube_node", "slurm_node", "kubeconfig", "ready_file",
        "metrics_port", "metrics_address",
        # from the chart's values (clusterName, agent.health, a pool's health)
        "cluster", "health", "hysteresis",
    }),
}  # fmt: skip
"""Keys the chart writes into a role's section itself: one place in the chart for each key
(``policy.failure_grace_s``: a nested key, the rest of ``policy`` is open).

Every other key of the section is the chart's ``<role>.config`` (snake_case, merged over what
the chart renders: ``rollout`` keeps the chart's ``requeue_in_prestop`` next to an
operator's ``max_parallel``, ``policy`` its graces next to an operator's ``remediate``)."""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``config schema`` and ``config check``."""
    parser = sub.add_parser("config", help="describe or check a config file", description=__doc__)
    verbs = parser.add_subparsers(dest="verb", required=True)
    show = verbs.add_parser("schema", help="print the JSON Schema of the tree or of one section")
    show.add_argument("role", nargs="?", default="all", choices=(*ROOT_KEYS, "all"))
    show.add_argument(
        "--chart",
        action="store_true",
        help="only the keys the Helm chart leaves to its <role>.config value",
    )
    show.set_defaults(func=main_schema)
    check = verbs.add_parser("check", help="load a config file as the role would; exit 2 if bad")
    check.add_argument("role", choices=(*ROOT_KEYS, "all"))
    check.add_argument("file")
    check.set_defaults(func=main_check)


def role_schema(role: str) -> dict[str, Any]:
    """The JSON Schema of ``role``'s section (keys, types, defaults, descriptions, variables)."""
    from slonkd.runtime.config_root import section_class

    cls = section_class(role)
    out = schema(cls, describe=describe)
    out.pop("required", None)  # the pod's names come from the environment too
    props = out["properties"]
    if role == "coordinator":
        props["topology"] = {
            "anyOf": [{"type": "object"}, {"type": "null"}],
            "default": None,
            "description": describe(cls, "topology")
            + " (keys: slonkd.runtime.coordinating.topology_settings)",
        }
    out["properties"] = dict(sorted(props.items()))
    return {"$schema": SCHEMA, **out}


def root_schema() -> dict[str, Any]:
    """The JSON Schema of the whole tree: one section per role."""
    from slonkd.runtime.config_root import ROLES, SlonkdConfig

    sections = {}
    for role in ROLES:
        section = role_schema(role)
        section.pop("$schema")
        sections[role] = {**section, "description": describe(SlonkdConfig, role)}
    return {
        "$schema": SCHEMA,
        "description": SlonkdConfig.__doc__ or "",
        "type": "object",
        "properties": sections,
        "additionalProperties": False,
    }


def chart_schema(role: str) -> dict[str, Any]:
    """The schema of the chart's ``<role>.config`` value: the section's keys the chart leaves."""
    doc = role_schema(role)
    doc.pop("$schema")
    for key in CHART_SETS[role]:
        *parents, last = key.split(".")
        here = doc
        for parent in parents:
            here = here["properties"][parent]
            here.get("default", {}).pop(last, None)
        here["properties"].pop(last)
    _old_flat_keys(doc, role)
    return doc


def _old_flat_keys(doc: dict[str, Any], role: str) -> None:
    """The old flat keys of the open nested ones, deprecated (an upgrade keeps its values)."""
    from slonkd.runtime.config_root import section_class

    for old, nested in old_keys(section_class(role)).items():
        here = doc
        for part in nested:
            here = here.get("properties", {}).get(part, {})
        if here:
            new = ".".join(nested)
            doc["properties"][old] = {
                **{k: v for k, v in here.items() if k != "description"},
                "deprecated": True,
                "description": f"Deprecated: {new} (read as it, with a deprecation line).",
            }
    doc["properties"] = dict(sorted(doc["properties"].items()))


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
    if args.chart:
        if args.role not in CHART_ROLES:
            print(f"slonkd config schema: --chart: one of {CHART_ROLES}", file=sys.stderr)
            return EXIT_BAD
        doc = chart_schema(args.role)
    else:
        doc = root_schema() if args.role == "all" else role_schema(args.role)
    print(json.dumps(doc, indent=2))
    return 0


def main_check(args: argparse.Namespace) -> int:
    """Load the file as the role (or every role) would."""
    env = {**os.environ, "SLONKD_CONFIG": args.file}
    for name, value in (("POD_NAMESPACE", "default"), ("POD_NAME", "w-0"), ("NODE_NAME", "n-0")):
        env.setdefault(name, value)  # the file is checked, not the pod's environment
    notes: list[str] = []
    try:
        for role in ROOT_KEYS if args.role == "all" else (args.role,):
            if role == "coordinator":
                coordinator.load_settings(env, notes)
            elif role == "agent":
                agent.load_settings(env, notes)
            else:
                flags = prestop.flags_unset()
                prestop.settings_from(flags, env, notes)
    except ValueError as exc:
        print(f"slonkd config check: {exc}", file=sys.stderr)
        return EXIT_BAD
    deprecations("config check", notes, structured=False)
    print("ok")
    return 0


def main(args: argparse.Namespace) -> int:
    """Run ``slonkd config``."""
    return int(args.func(args))
