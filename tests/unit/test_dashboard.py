"""The chart's Grafana dashboard: valid, its PromQL valid, its metrics real, shipped when asked.

Whether each query returns data is checked against a real Prometheus scraping the sandbox
(``tests/e2e/test_sandbox.py``); here what needs no services: the document's shape, promtool's
parse of every query, that every metric a panel names is one slonkd exports, and the ConfigMap
the chart renders for Grafana's dashboard sidecar.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from slonkd_sandbox.chart.helm import Helm
from slonkd_sandbox.dashboard import DASHBOARD, METRIC_NAME, load, queries
from tests.unit.test_chart_render import helm

__all__ = ["helm"]  # the module-scoped fixture, shared with test_chart_render

ROOT = Path(__file__).resolve().parents[2]
SUFFIXES = ("_total", "_bucket", "_count", "_sum")


def test_every_panel_has_a_title_a_place_and_a_query_on_the_datasource_variable() -> None:
    """Grafana imports it: unique titles, grid inside 24 columns, targets on ${datasource}."""
    doc = load()
    assert doc["uid"] == "slonkd-fleet"
    assert [v["name"] for v in doc["templating"]["list"]] == ["datasource"]
    titles = [p["title"] for p in doc["panels"]]
    assert len(titles) == len(set(titles))
    for panel in doc["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0, panel["title"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        assert panel["targets"], panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}"
        assert panel["description"], panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip(), panel["title"]
            assert target["refId"], panel["title"]


def test_promtool_parses_every_query(tmp_path: Path) -> None:
    """Each query, as a recording rule, passes ``promtool check rules`` (valid PromQL)."""
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: scripts/bootstrap installs Debian's prometheus package"
    rules = [{"record": f"slonkd:dashboard:q{i}", "expr": q.expr} for i, q in enumerate(queries())]
    assert len(rules) >= 15
    with_rules = {"groups": [{"name": "dashboard", "rules": rules}]}
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump(with_rules))
    out = subprocess.run(
        [promtool, "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(rules)} rules found" in out.stdout


def _exported_names() -> str:
    return "\n".join(p.read_text() for p in (ROOT / "slonkd").rglob("*.py"))


def test_every_metric_a_panel_names_is_one_slonkd_exports() -> None:
    """A renamed metric would leave a panel empty: every name is in slonkd's source."""
    source = _exported_names()
    names = {m for q in queries() for m in METRIC_NAME.findall(q.expr)}
    assert names
    missing = []
    for name in sorted(names):
        if name.startswith("process_"):
            continue  # prometheus_client's process collector, registered in runtime/kit/metrics.py
        base = next((name[: -len(s)] for s in SUFFIXES if name.endswith(s)), name)
        sdiag = base.removeprefix("slonkd_slurmctld_")  # f"slonkd_slurmctld_{name}" families
        if not any(f'"{n}"' in source for n in (base, name)) and f'("{sdiag}",' not in source:
            missing.append(name)
    assert not missing, missing


def test_the_chart_ships_the_dashboard_for_grafanas_sidecar_when_asked(helm: Helm) -> None:
    """metrics.grafanaDashboard.enabled: a ConfigMap with the sidecar's label; off by default."""

    def maps(*set_json: str) -> list[dict[str, Any]]:
        out = helm.template("rel", namespace="hpc", set_json=set_json).stdout
        return [
            d
            for d in yaml.safe_load_all(out)
            if d and d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-dashboard")
        ]

    assert maps() == []
    (cm,) = maps('metrics.grafanaDashboard={"enabled":true,"annotations":{"grafana_folder":"HPC"}}')
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "HPC"}
    assert json.loads(cm["data"]["slonkd.json"]) == json.loads(DASHBOARD.read_text())
    (custom,) = maps('metrics.grafanaDashboard={"enabled":true,"label":"dash","labelValue":"yes"}')
    assert custom["metadata"]["labels"]["dash"] == "yes"


def test_the_docs_show_the_dashboard_and_name_every_panel() -> None:
    """docs/operations.md shows the rendered picture and says what each panel means."""
    text = (ROOT / "docs" / "operations.md").read_text()
    assert "images/dashboard.png" in text
    assert (ROOT / "docs" / "images" / "dashboard.png").stat().st_size > 10_000
    for panel in load()["panels"]:
        assert panel["title"] in text, panel["title"]
