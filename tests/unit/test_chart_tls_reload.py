"""The broker pod with ``tls.enabled``: a sidecar signals mosquitto when its certificate changes.

Renders the chart (pinned helm, no cluster) and reads the mosquitto Deployment: with TLS the
pod shares its process namespace and runs ``slonkd tls-reload`` next to the broker, watching
the very files mosquitto.conf names, from the same mount, as the same user, signalling the
process the broker's container runs; its arguments parse with slonkd's own parser. Without
TLS there is neither. mosquitto.conf names no ``cafile`` (mosquitto would not reload it).
"""

from __future__ import annotations

import os
import re
from typing import Any

from slonkd.cli import main as cli
from slonkd_sandbox.chart.helm import Helm
from tests.unit.test_chart_render import helm, one, render

__all__ = ["helm"]  # the module-scoped fixture, shared with test_chart_render

Obj = dict[str, Any]
TLS = ('tls={"enabled":true,"secretName":"slonk-tls"}',)


def _pod(objs: list[Obj]) -> Obj:
    pod: Obj = one(objs, "Deployment", "rel-mosquitto")["spec"]["template"]["spec"]
    return pod


def _containers(pod: Obj) -> dict[str, Obj]:
    return {c["name"]: c for c in pod["containers"]}


def test_with_tls_a_sidecar_signals_mosquitto_when_its_files_change(helm: Helm) -> None:
    """The sidecar watches mosquitto.conf's certfile and keyfile and signals its process."""
    objs = render(helm, set_json=TLS)
    pod = _pod(objs)
    assert pod["shareProcessNamespace"] is True
    containers = _containers(pod)
    broker, sidecar = containers["mosquitto"], containers["tls-reload"]
    coordinator = one(objs, "Deployment", "rel-coordinator")["spec"]["template"]["spec"]
    assert sidecar["image"] == _containers(coordinator)["coordinator"]["image"]  # slonkd's
    parser, _ = cli._parser("tls-reload")
    args = parser.parse_args(sidecar["args"])
    assert args.command == "tls-reload"
    conf = one(objs, "ConfigMap", "rel-mosquitto")["data"]["mosquitto.conf"]
    assert re.search(rf"^certfile {re.escape(args.cert)}$", conf, re.M)
    assert re.search(rf"^keyfile {re.escape(args.key)}$", conf, re.M)
    assert "cafile" not in conf
    assert args.process_name == os.path.basename(broker["command"][0])
    assert (args.signal, args.period) == ("HUP", 10.0)
    mounts = {m["name"]: m for m in broker["volumeMounts"]}
    (mount,) = sidecar["volumeMounts"]
    assert mount == mounts["tls"]
    assert mount["readOnly"] is True
    # the pod's user for both (mosquitto's): a process may signal only its own user's
    assert pod["securityContext"]["runAsUser"] == 1883
    for container in (broker, sidecar):
        assert "runAsUser" not in container.get("securityContext", {})
    sc = sidecar["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert sidecar["resources"]["limits"]["memory"]


def test_without_tls_there_is_no_sidecar(helm: Helm) -> None:
    """Plain MQTT: the broker alone, no shared process namespace."""
    pod = _pod(render(helm, set_json=('tls={"enabled":false}',)))
    assert list(_containers(pod)) == ["mosquitto"]
    assert not pod.get("shareProcessNamespace")
