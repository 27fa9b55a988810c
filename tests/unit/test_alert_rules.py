"""slonkd's alerts: promtool's checks and rule tests, the PrometheusRule, the runbook.

The rules live once, in ``deploy/helm/slonk/files/prometheus-rules.yaml``; promtool (Debian's
``prometheus`` package, installed by the bootstrap) evaluates them against the series in
``tests/promtool/alerts_test.yaml``: each alert fires where someone should act and stays
silent where nobody should (an agent's fresh timestamp must not hide a silent leader).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from slonkd_sandbox.chart.helm import CHART_DIR, Helm
from tests.unit.test_chart_render import helm

__all__ = ["helm"]  # the module-scoped fixture, shared with test_chart_render

ROOT = Path(__file__).resolve().parents[2]
RULES = CHART_DIR / "files" / "prometheus-rules.yaml"
PROMTOOL_TESTS = ROOT / "tests" / "promtool" / "alerts_test.yaml"
OPERATIONS = ROOT / "docs" / "operations.md"


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: scripts/bootstrap installs Debian's prometheus package"
    return subprocess.run(
        [promtool, *args], capture_output=True, text=True, timeout=120, check=False, cwd=ROOT
    )


def _alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [r for g in groups for r in g["rules"] if "alert" in r]


def test_promtool_accepts_the_rule_file() -> None:
    """``promtool check rules``: valid PromQL, durations and templates."""
    out = _promtool("check", "rules", str(RULES))
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(_alerts())} rules found" in out.stdout


def test_every_alert_fires_where_it_should_and_only_there() -> None:
    """``promtool test rules``: every alert is tested, firing and silent cases both pass."""
    tested = set(re.findall(r"alertname: (\w+)", PROMTOOL_TESTS.read_text()))
    assert tested == {a["alert"] for a in _alerts()}
    out = _promtool("test", "rules", str(PROMTOOL_TESTS))
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_alert_names_a_runbook_section_that_exists() -> None:
    """An on-call person gets from the alert to what to do: the anchor is a real heading."""
    anchors = {
        re.sub(r"[^a-z0-9 -]", "", h.strip("# ").lower()).replace(" ", "-")
        for h in OPERATIONS.read_text().splitlines()
        if h.startswith("#")
    }
    for alert in _alerts():
        path, _, anchor = alert["annotations"]["runbook"].partition("#")
        assert path == "docs/operations.md", alert["alert"]
        assert anchor in anchors, (alert["alert"], anchor)
        assert alert["alert"] in OPERATIONS.read_text(), f"{alert['alert']} not in the runbook"


def test_the_chart_ships_the_same_rules_as_a_prometheusrule_when_asked(helm: Helm) -> None:
    """metrics.prometheusRule.enabled: a PrometheusRule with the file's groups; off by default."""

    def rules(*set_json: str) -> list[dict[str, Any]]:
        out = helm.template("rel", namespace="hpc", set_json=set_json).stdout
        return [d for d in yaml.safe_load_all(out) if d and d["kind"] == "PrometheusRule"]

    assert rules() == []
    (rule,) = rules(
        'metrics.prometheusRule={"enabled":true,"labels":{"release":"kube-prometheus-stack"}}'
    )
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["spec"] == yaml.safe_load(RULES.read_text())
