"""The chart's Grafana dashboard, evaluated by a real Prometheus against the sandbox.

``deploy/helm/slonk/files/grafana-dashboard.json`` is what the chart ships (a ConfigMap for
Grafana's dashboard sidecar). :func:`queries` lists its panels' PromQL with Grafana's
``$__rate_interval`` replaced by a fixed window; :func:`evaluate` asks a running
:class:`~slonkd_sandbox.prometheus.Prometheus` for each (the sandbox e2e test requires
every panel to return data after the demo's scenes); :func:`render` draws the panels'
range results into one PNG for docs/operations.md (matplotlib, the ``docs`` extra).

``python -m slonkd_sandbox.dashboard --dir D`` does it all against a sandbox that
``slonkd sandbox up --dir D`` started: Prometheus on its targets, ``slonkd sandbox demo``,
then every panel's range query: the data in ``D/dashboard-data.json``, the picture in
``docs/images/dashboard.png``.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from slonkd_sandbox.chart.helm import CHART_DIR
from slonkd_sandbox.prometheus import Prometheus

DASHBOARD = CHART_DIR / "files" / "grafana-dashboard.json"
RATE_WINDOW = "30s"
"""What ``$__rate_interval`` becomes here (Grafana picks it from the scrape interval)."""
METRIC_NAME = re.compile(r"\b((?:slonkd|process)_[a-z_]+)\b")
"""A metric name in a query (slonkd's own and prometheus_client's process collector)."""
FIRST_EVENT_PANELS = frozenset({"Actions left undone at write time", "Bus messages dropped"})
"""Panels of counters that have no series until their first event (a quiet run has none):
they fall back to ``vector(0)``; a test checks their metrics are exposed instead."""
DOCS_IMAGES = CHART_DIR.parents[2] / "docs" / "images"


@dataclass(frozen=True, slots=True, kw_only=True)
class Query:
    """One panel target: where it is shown and what it asks."""

    panel: str
    ref: str
    expr: str
    legend: str

    @property
    def inner(self) -> str:
        """The query without its ``or vector(0)`` fallback: what must find real series."""
        return self.expr.removesuffix(" or vector(0)")


def load(path: Path = DASHBOARD) -> dict[str, Any]:
    """The dashboard document."""
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def queries(doc: dict[str, Any] | None = None, *, window: str = RATE_WINDOW) -> list[Query]:
    """Every panel target's query, ``$__rate_interval`` replaced by ``window``."""
    doc = load() if doc is None else doc
    return [
        Query(
            panel=panel["title"],
            ref=target["refId"],
            expr=target["expr"].replace("$__rate_interval", window),
            legend=target.get("legendFormat", ""),
        )
        for panel in doc["panels"]
        for target in panel.get("targets", [])
    ]


def sandbox_urls(state: dict[str, Any]) -> list[str]:
    """Base URLs of a running sandbox's coordinator and agents (``/metrics`` below each)."""
    return [f"http://{t}" for targets in sandbox_targets(state).values() for t in targets]


def sandbox_targets(state: dict[str, Any]) -> dict[str, list[str]]:
    """Scrape targets of a running sandbox (its ``state.json``): coordinator and agents."""
    coordinator = urlparse(state["coordinator_url"]).netloc
    agents = sorted(urlparse(u).netloc for u in state["agent_metrics"].values())
    return {"coordinator": [coordinator], "agent": agents}


def evaluate(prom: Prometheus, items: list[Query]) -> dict[Query, list[dict[str, Any]]]:
    """Each query's instant result now, without its ``vector(0)`` fallback."""
    return {q: prom.query(q.inner) for q in items}


def exposed(urls: list[str]) -> str:
    """The text of every ``/metrics`` in ``urls`` (HELP lines show families with no series)."""
    texts = []
    for url in urls:
        with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - loopback
            texts.append(resp.read().decode())
    return "\n".join(texts)


def _label(series: dict[str, Any], legend: str) -> str:
    text = legend
    for key, value in series.get("metric", {}).items():
        text = text.replace("{{" + key + "}}", str(value))
    text = re.sub(r"\{\{\w+\}\}", "", text).strip()  # a label the series lacks (empty)
    return text or json.dumps(series.get("metric", {}))


def render(doc: dict[str, Any], data: dict[str, Any], out: Path) -> None:
    """Draw every panel's range results (``data``: title -> list of series) into a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = doc["panels"]
    cols = 3
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(cols * 5.2, rows * 2.6), squeeze=False)
    start = float(data.get("_start", 0.0))
    for ax, panel in zip(axes.flat, panels, strict=False):
        ax.set_title(panel["title"], fontsize=9)
        for series in data.get(panel["title"], []):
            xs = [float(t) - start for t, _ in series["values"]]
            ys = [float(v) for _, v in series["values"]]
            label = re.sub(r"\{\{\w+\}\}", "", series["label"]).strip()
            ax.plot(xs, ys, label=label[:40], linewidth=1.2)
        ax.tick_params(labelsize=7)
        ax.set_xlabel("seconds", fontsize=7)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6, loc="upper left")
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.suptitle("slonkd dashboard: the sandbox during `slonkd sandbox demo`", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.985))
    fig.savefig(out, dpi=90)


def main(argv: list[str] | None = None) -> int:
    """Record the dashboard over one demo run of a running sandbox; write JSON and PNG."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, required=True, help="the sandbox's directory")
    parser.add_argument("--out", type=Path, default=DOCS_IMAGES, help="where dashboard.png goes")
    args = parser.parse_args(argv)
    state = json.loads((args.dir / "state.json").read_text())
    doc = load()
    with Prometheus(args.dir / "prometheus", sandbox_targets(state)) as prom:
        prom.wait_scraped()
        start = time.time()
        demo = subprocess.run(
            [sys.executable, "-m", "slonkd_sandbox", "demo", "--dir", str(args.dir)],
            timeout=1800,
            check=False,
        )
        time.sleep(5)
        end = time.time()
        data: dict[str, Any] = {"_start": start, "_end": end, "_demo_rc": demo.returncode}
        for q in queries(doc):
            series = prom.query_range(q.expr, start=start, end=end, step_s=2)
            data.setdefault(q.panel, []).extend(
                {"label": _label(s, q.legend), "values": s["values"]} for s in series
            )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.dir / "dashboard-data.json").write_text(json.dumps(data) + "\n")
    render(doc, data, args.out / "dashboard.png")
    empty = [p["title"] for p in doc["panels"] if not data.get(p["title"])]
    print(f"demo rc {demo.returncode}; panels without data: {empty or 'none'}")
    return 0 if demo.returncode == 0 and not empty else 1


if __name__ == "__main__":
    raise SystemExit(main())
