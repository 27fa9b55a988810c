"""A real Prometheus (Debian's ``prometheus`` package) scraping slonkd's /metrics on loopback.

Its own configuration, TSDB and log in a private directory; it listens on 127.0.0.1 only and
scrapes the static targets it is given (job name -> ``host:port`` list, path ``/metrics``)
every ``scrape_interval_s``. With ``wrap`` (e.g. :meth:`RealNode.nsexec`) it runs inside
another network namespace, listens on ``host`` there (the real node's address, which the host
reaches over its veth) and may scrape that namespace's pod addresses
(``tests/e2e/test_chart_metrics_real.py``). :meth:`Prometheus.query` and
:meth:`Prometheus.query_range` speak its HTTP API, so the dashboard's queries
(:mod:`slonkd_sandbox.dashboard`) are evaluated by the same engine Grafana would ask. Used by
the sandbox e2e test and by ``scripts/dashboard-snapshot``; the rules' own unit tests use
promtool instead (``tests/unit/test_alert_rules.py``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from slonkd_sandbox import procs
from slonkd_sandbox.procs import HarnessError

BINARY = "prometheus"
_HTTP_TIMEOUT_S = 10.0


def binary() -> Path | None:
    """Debian's prometheus, or None when it is not installed."""
    found = shutil.which(BINARY) or shutil.which(BINARY, path="/usr/bin:/usr/sbin")
    return Path(found) if found else None


@dataclass(slots=True)
class Prometheus(procs.StartStop):
    """Handle on a running Prometheus; use as a context manager or call start()/stop()."""

    root: Path
    targets: Mapping[str, Sequence[str]]
    """Scrape job name -> ``host:port`` targets (loopback only)."""
    scrape_interval_s: float = 1.0
    port: int = 0
    wrap: Sequence[str] = ()
    """argv prefix that enters another network namespace; (): this one, loopback targets."""
    host: str = "127.0.0.1"
    """The address it listens on (in ``wrap``'s namespace) and is asked at."""
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    @property
    def url(self) -> str:
        """The HTTP API's base URL."""
        return f"http://{self.host}:{self.port}"

    @property
    def log(self) -> Path:
        """Prometheus's own log."""
        return self.root / "prometheus.log"

    def _config(self) -> dict[str, Any]:
        interval = f"{max(1, round(self.scrape_interval_s * 1000))}ms"
        for job, addrs in self.targets.items():
            for addr in addrs:
                host = addr.rsplit(":", 1)[0]
                if host not in ("127.0.0.1", "localhost") and not self.wrap:
                    raise HarnessError(f"prometheus: {job} target {addr} is not on loopback")
        return {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "scrape_configs": [
                {
                    "job_name": job,
                    "metrics_path": "/metrics",
                    "static_configs": [{"targets": list(a)}],
                }
                for job, a in self.targets.items()
            ],
        }

    def start(self, *, timeout_s: float = 60.0) -> None:
        """Write the configuration, start Prometheus and wait until it is ready."""
        exe = binary()
        if exe is None:
            raise HarnessError("prometheus is not installed (scripts/bootstrap installs it)")
        self.root.mkdir(parents=True, exist_ok=True)
        config = self.root / "prometheus.yml"
        config.write_text(yaml.safe_dump(self._config()))
        if not self.port:
            self.port = procs.free_ports(1)[0]
        self._proc = procs.spawn(
            [
                *self.wrap,
                str(exe),
                f"--config.file={config}",
                f"--storage.tsdb.path={self.root / 'data'}",
                f"--web.listen-address={self.host}:{self.port}",
                "--storage.tsdb.retention.time=1d",
                "--log.level=warn",
            ],
            log=self.log,
        )
        procs.wait_for(
            "prometheus ready",
            lambda: self._get("/-/ready", raw=True) is not None,
            timeout_s=timeout_s,
            interval_s=0.2,
            alive=procs.exited(self._proc, self.log),
        )

    def stop(self) -> None:
        """Stop Prometheus (SIGTERM, then SIGKILL)."""
        if self._proc is not None:
            procs.stop(self._proc, grace_s=10.0)
            self._proc = None

    def _get(self, path: str, *, raw: bool = False, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        url = f"{self.url}{path}{query}"  # 127.0.0.1, or a real node's address on this machine
        with urllib.request.urlopen(url, timeout=_HTTP_TIMEOUT_S) as resp:  # noqa: S310
            body = resp.read()
        if raw:
            return body
        doc = json.loads(body)
        if doc.get("status") != "success":
            raise HarnessError(f"prometheus {path}: {doc.get('error', doc)}")
        return doc["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result (vector or scalar as a one-element list)."""
        data = self._get("/api/v1/query", query=expr)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return list(data["result"])

    def query_range(
        self, expr: str, *, start: float, end: float, step_s: float
    ) -> list[dict[str, Any]]:
        """A range query's matrix: one series per label set, ``values`` as [time, "value"]."""
        data = self._get(
            "/api/v1/query_range", query=expr, start=str(start), end=str(end), step=f"{step_s}s"
        )
        return list(data["result"])

    def targets_up(self) -> dict[str, str]:
        """Each scrape target's health (``up``/``down``/``unknown``) by its URL."""
        data = self._get("/api/v1/targets")
        return {t["scrapeUrl"]: t["health"] for t in data["activeTargets"]}

    def wait_scraped(self, *, timeout_s: float = 30.0) -> None:
        """Wait until every target was scraped successfully once."""
        procs.wait_for(
            "every target scraped",
            lambda: bool(self.targets_up()) and set(self.targets_up().values()) == {"up"},
            timeout_s=timeout_s,
            interval_s=0.5,
        )
        time.sleep(self.scrape_interval_s)
