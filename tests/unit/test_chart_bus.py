"""Where the real-node test looks for an agent's MQTT credentials, read on the rendered chart.

``tests/e2e/test_chart_real.py`` asserts, on the live pods, that no Secret and no static MQTT
credential reaches the slonkd-agent container and that its token file is a projected
ServiceAccount token for the coordinator's audience (:mod:`slonkd_sandbox.chart.bus`). Here
the same helpers read ``helm template``'s pods: the chart passes, and each way a password
could be handed to the agent instead is caught, so the real-node assertion can fail.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from slonkd_sandbox.chart.bus import container, env_value, projected_token, secret_sources
from slonkd_sandbox.chart.helm import Helm
from slonkd_sandbox.toolchain import ensure_tools

Obj = dict[str, Any]
AGENT = "slonkd-agent"
TOKEN_FILE = "/var/run/secrets/slonk.dev/token/token"


def _pods(home: Path, set_json: tuple[str, ...] = ()) -> tuple[Obj, Obj]:
    """The chart's worker and coordinator pod templates from ``helm template rel``."""
    helm = Helm(binary=ensure_tools().helm, home=home)
    out = helm.template("rel", namespace="hpc", set_json=set_json).stdout
    pods = [
        {"metadata": {"name": o["metadata"]["name"]}, "spec": o["spec"]["template"]["spec"]}
        for o in yaml.safe_load_all(out)
        if o and o["kind"] in ("StatefulSet", "Deployment")
    ]
    workers = [
        p for p in pods if any(c["name"] == AGENT for c in p["spec"].get("initContainers", []))
    ]
    coordinators = [p for p in pods if p["metadata"]["name"] == "rel-coordinator"]
    assert len(workers) == 1
    assert len(coordinators) == 1
    return workers[0], coordinators[0]


@pytest.fixture(scope="module")
def pods(tmp_path_factory: pytest.TempPathFactory) -> tuple[Obj, Obj]:
    """The worker and coordinator pods with the real-node release's ``tls.enabled: false``."""
    return _pods(tmp_path_factory.mktemp("helm"), ('tls={"enabled": false}',))


def test_the_charts_agent_gets_no_secret_and_a_token_for_the_coordinators_audience(
    pods: tuple[Obj, Obj],
) -> None:
    """The agent container: no Secret, no static credential; its token file is the audience's."""
    worker, coordinator = pods
    audience = env_value(container(coordinator, "coordinator"), "SLONKD_TOKEN_AUDIENCE")
    assert audience == "slonkd"
    assert secret_sources(worker, AGENT) == []
    assert env_value(container(worker, AGENT), "SLONKD_TOKEN_FILE") == TOKEN_FILE
    token = projected_token(worker, AGENT, TOKEN_FILE)
    assert token is not None
    assert token["audience"] == audience
    # slurmd does mount a Secret (the munge key): the reading sees it there
    assert secret_sources(worker, "slurmd") == ["/etc/slonk/munge: Secret rel-munge"]


def test_every_way_of_handing_the_agent_a_password_is_caught(pods: tuple[Obj, Obj]) -> None:
    """A password from a Secret in env, envFrom or a mount, or a static setting, is reported."""
    worker = pods[0]

    def changed(edit: Any) -> Obj:
        pod = copy.deepcopy(worker)
        edit(container(pod, AGENT), pod)
        return pod

    ref = {"secretKeyRef": {"name": "mqtt", "key": "password"}}
    cases = {
        "env from a Secret": lambda c, _p: c["env"].append({"name": "PW", "valueFrom": ref}),
        "static password": lambda c, _p: c["env"].append(
            {"name": "SLONKD_MQTT_PASSWORD", "value": "x"}
        ),
        "envFrom a Secret": lambda c, _p: c.setdefault("envFrom", []).append(
            {"secretRef": {"name": "mqtt"}}
        ),
        "mounted Secret": lambda c, _p: c["volumeMounts"].append(
            {"name": "munge-key", "mountPath": "/etc/mqtt"}
        ),
        "projected Secret": lambda _c, p: next(
            v for v in p["spec"]["volumes"] if v["name"] == "slonkd-token"
        )["projected"]["sources"].append({"secret": {"name": "mqtt"}}),
    }
    for case, edit in cases.items():
        assert secret_sources(changed(edit), AGENT), case


def test_a_token_file_that_is_not_a_pure_projected_token_is_not_one(pods: tuple[Obj, Obj]) -> None:
    """Another file, a volume mixing in other sources, or a path in no mount: no token source."""
    worker = pods[0]
    # kube-api-access has a token too, but with a ConfigMap and the downward API beside it
    path = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    assert projected_token(worker, AGENT, path) is None
    assert projected_token(worker, AGENT, "/var/run/secrets/slonk.dev/token/other") is None
    assert projected_token(worker, AGENT, "/etc/slonkd/token") is None


def test_with_tls_the_ca_secret_reaches_the_agent_and_is_reported(tmp_path: Path) -> None:
    """tls.enabled mounts the CA's Secret into the agent: reported (the e2e's release has none)."""
    worker, _ = _pods(tmp_path, ('tls={"enabled": true, "secretName": "bus-tls"}',))
    assert secret_sources(worker, AGENT) == ["/etc/slonk/tls: Secret bus-tls"]
    default, _ = _pods(tmp_path)  # TLS by default: the Secret the secrets Job makes once
    assert secret_sources(default, AGENT) == ["/etc/slonk/tls: Secret rel-tls"]
