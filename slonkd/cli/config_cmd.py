"""``slonkd config``: the coordinator's and the agent's config files, described and checked.

``slonkd config schema ROLE`` prints the JSON Schema of the file ``SLONKD_CONFIG`` names for
``slonkd coordinator`` or ``slonkd agent``: every key with its type, default and description,
taken from the settings classes themselves (:mod:`slonkd.core.config_tree`; the keys are
:func:`slonkd.cli.coordinator.file_keys` and :func:`slonkd.cli.agent.file_keys`), and as
``x-env`` the environment variable that sets a key the file does not (the role's ``ENV``).
``slonkd config check ROLE FILE`` loads FILE exactly as the role would (with this
environment) and prints ``ok``, or the one-line reason and exits 2.

``slonkd config schema ROLE --chart`` prints the part of it the Helm chart leaves to its
``coordinator.config``/``agent.config`` value: every key but those the chart writes itself
(:data:`CHART_SETS`). The chart's values.schema.json carries it (``scripts/chart-schema``
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

from slonkd.cli import agent, coordinator
from slonkd.core.config_tree import schema
from slonkd.core.plan import Policy
from slonkd.core.revalidation import RevalidationPolicy

EXIT_BAD = 2
ROLES = ("coordinator", "agent")

CHART_SETS: dict[str, frozenset[str]] = {
    "coordinator": frozenset({
        # from the pod: its namespace and name, the in-cluster client, the Service's port
        "namespace", "identity", "kubeconfig", "api_host",
        # from the chart's curated values (camelCase, e.g. coordinator.budget.maxOut)
        "cluster", "pod_selector", "lease_name", "lease_duration_s", "renew_deadline_s",
        "retry_period_s", "failure_grace_s", "state_name", "api_port", "audit_path",
        "audit_max_bytes", "audit_keep", "max_out", "max_out_percent", "mass_percent",
        "dry_run", "fleet_metrics", "sdiag_s", "revalidate", "revalidate_timeout_s",
        "revalidate_recheck_s", "revalidate_checks", "topology", "trigger_program", "job_blame",
    }),
    "agent": frozenset({
        # from the pod (the downward API and the chart's wiring)
        "pod_name", "namespace", "kube_node", "slurm_node", "kubeconfig", "ready_file",
        "metrics_port", "metrics_address",
        # from the chart's values (clusterName, agent.health, a pool's health)
        "cluster", "health", "hysteresis",
    }),
}  # fmt: skip
"""Keys the chart writes into a role's file itself: one place in the chart for each key.

Every other key of the file is the chart's ``<role>.config`` (snake_case, merged over what
the chart renders: ``rollout`` keeps the chart's ``requeue_in_prestop`` next to an
operator's ``max_parallel``)."""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``config schema`` and ``config check``."""
    parser = sub.add_parser("config", help="describe or check a config file", description=__doc__)
    verbs = parser.add_subparsers(dest="verb", required=True)
    show = verbs.add_parser("schema", help="print the JSON Schema of a role's config file")
    show.add_argument("role", choices=ROLES)
    show.add_argument(
        "--chart",
        action="store_true",
        help="only the keys the Helm chart leaves to its <role>.config value",
    )
    show.set_defaults(func=main_schema)
    check = verbs.add_parser("check", help="load a config file as the role would; exit 2 if bad")
    check.add_argument("role", choices=ROLES)
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
        + " (keys: slonkd.runtime.coordinating.topology_settings)",
    }
    _aliases(props, coordinator.POLICY_KEYS, Policy)
    _aliases(props, coordinator.REVALIDATION_KEYS, RevalidationPolicy)
    _env(props, coordinator.ENV)
    out["properties"] = dict(sorted(props.items()))
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **out}


def agent_schema() -> dict[str, Any]:
    """The JSON Schema of the agent's config file (keys, types, defaults, descriptions)."""
    from slonkd.runtime.agent.sidecar import AgentSettings

    out = schema(AgentSettings, describe=describe, skip=agent.NOT_IN_FILE)
    out.pop("required", None)  # the pod's names come from the downward API
    _aliases(out["properties"], {k: k for k in agent.POLICY_KEYS}, Policy)
    _env(out["properties"], agent.ENV)
    out["properties"] = dict(sorted(out["properties"].items()))
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **out}


def chart_schema(role: str) -> dict[str, Any]:
    """The schema of the chart's ``<role>.config`` value: the file's keys the chart leaves open."""
    doc = coordinator_schema() if role == "coordinator" else agent_schema()
    doc.pop("$schema")
    doc["properties"] = {k: v for k, v in doc["properties"].items() if k not in CHART_SETS[role]}
    return doc


def _env(props: dict[str, Any], table: dict[str, str]) -> None:
    """Name each key's environment variable (``x-env``; the file's value wins over it)."""
    for key, var in table.items():
        props[key]["x-env"] = var


def _aliases(props: dict[str, Any], keys: dict[str, str], cls: type[Any]) -> None:
    """The file's flat keys of ``cls``'s fields, typed, defaulted and described as those."""
    one = schema(cls, describe=describe)["properties"]
    for key, name in keys.items():
        props[key] = one[name]


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
        doc = chart_schema(args.role)
    else:
        doc = coordinator_schema() if args.role == "coordinator" else agent_schema()
    print(json.dumps(doc, indent=2))
    return 0


def main_check(args: argparse.Namespace) -> int:
    """Load the file as the role would."""
    env = {**os.environ, "SLONKD_CONFIG": args.file}
    for name, value in (("POD_NAMESPACE", "default"), ("POD_NAME", "w-0"), ("NODE_NAME", "n-0")):
        env.setdefault(name, value)  # the file is checked, not the pod's environment
    try:
        if args.role == "coordinator":
            coordinator.load_settings(env)
        else:
            agent.load_settings(env)
    except ValueError as exc:
        print(f"slonkd config check: {exc}", file=sys.stderr)
        return EXIT_BAD
    print("ok")
    return 0


def main(args: argparse.Namespace) -> int:
    """Run ``slonkd config``."""
    return int(args.func(args))
