"""A real-node release's bus from outside: retained messages, and where agent credentials come from.

:func:`retained` reads what the release's mosquitto retains on a topic, as the chart's own
dynsec admin (its generated Secret), from the node's network namespace to the broker pod's
address: the pods have no route out, and no ACL is changed for the read.
:func:`secret_sources` and :func:`projected_token` read a pod's spec for what could carry an
MQTT password into a container (a Secret in env, envFrom or a mounted volume; a static
``SLONKD_MQTT_*`` credential) and which projected ServiceAccount token serves a file.
Neighbours: :mod:`slonkd_sandbox.chart.release` (the release), :mod:`slonkd_sandbox.chart.logs`
(its logs); the user is ``tests/e2e/test_chart_real.py``.
"""

from __future__ import annotations

import base64
import subprocess
import tempfile
from pathlib import Path

from slonkd_sandbox.chart.release import RELEASE, Obj, Release
from slonkd_sandbox.kube.api import ApiError
from slonkd_sandbox.procs import HarnessError

STATIC_MQTT_ENV = ("SLONKD_MQTT_USER", "SLONKD_MQTT_PASSWORD", "SLONKD_MQTT_PASSWORD_FILE")
"""The agent's settings for credentials given to it rather than fetched (``slonkd.cli.agent``)."""

_SUB_TIMED_OUT = 27
"""mosquitto_sub's exit status when ``-W`` ran out: connected and subscribed, no message."""


def retained(
    release: Release, topic: str, *, wait_s: int = 5, ca_pem: bytes | None = None
) -> bytes:
    """The message the release's broker retains on ``topic`` now (b"": none within ``wait_s``).

    Read as the chart's dynsec admin (``mosquitto_ctrl dynsec init`` gives that role
    ``subscribePattern #``) with the host's ``mosquitto_sub`` entered into the node's network
    namespace. A refused or failed connection raises: it never reads as "nothing retained".
    ``ca_pem``: trust only this CA (default: the release's TLS Secret's ``ca.crt``).
    """
    secret = f"/api/v1/namespaces/{release.ns}/secrets/{RELEASE}-mosquitto-admin"
    data = release.kube.api.request("GET", secret)["data"]
    user, password = (base64.b64decode(data[key]).decode() for key in ("username", "password"))
    with tempfile.TemporaryDirectory(prefix="slonkd-bus-") as tmp:
        tls = _tls_args(release, Path(tmp), ca_pem)
        return _sub(release, topic, wait_s, [*tls, "-u", user, "-P", password])


def _tls_args(release: Release, tmp: Path, ca_pem: bytes | None) -> list[str]:
    """mosquitto_sub's TLS flags when the release's broker speaks TLS (the chart's default).

    The CA is the release's own (``ca.crt`` of its TLS Secret); the broker is dialled by its
    pod's address, which the certificate does not name (it names the Services): the chain is
    verified, the host name not (``--insecure``). [] when the release turned TLS off.
    """
    if ca_pem is None:
        path = f"/api/v1/namespaces/{release.ns}/secrets/{RELEASE}-tls"
        try:
            data = release.kube.api.request("GET", path)["data"]
        except ApiError as exc:
            if exc.status != 404:
                raise
            return []  # no TLS Secret: the release runs plain MQTT
        ca_pem = base64.b64decode(data["ca.crt"])
    ca = tmp / "ca.crt"
    ca.write_bytes(ca_pem)
    return ["--cafile", str(ca), "--insecure"]


def _sub(release: Release, topic: str, wait_s: int, auth: list[str]) -> bytes:
    broker = release.pods(**{"app.kubernetes.io/component": "mosquitto"})[0]
    port = next(
        p["containerPort"]
        for c in broker["spec"]["containers"]
        for p in c.get("ports", [])
        if p.get("name") == "mqtt"
    )
    argv = release.node.nsexec(
        "mosquitto_sub", "-h", broker["status"]["podIP"], "-p", str(port), *auth, "-t", topic,
        "-C", "1", "-W", str(wait_s), "--retained-only", "-N",
    )  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, timeout=wait_s + 30, check=False)
    if proc.returncode == _SUB_TIMED_OUT:
        return b""
    if proc.returncode != 0:
        raise HarnessError(f"mosquitto_sub {topic}: rc {proc.returncode}: {proc.stderr!r}")
    return proc.stdout


def container(pod: Obj, name: str) -> Obj:
    """Container ``name`` of ``pod``: a native sidecar (an init container) or a main one."""
    spec = pod["spec"]
    every: list[Obj] = spec.get("initContainers", []) + spec["containers"]
    found = [c for c in every if c["name"] == name]
    if len(found) != 1:
        raise HarnessError(f"{pod['metadata']['name']}: {len(found)} containers named {name}")
    return found[0]


def env_value(spec: Obj, name: str) -> str | None:
    """The literal value of env var ``name`` in container ``spec`` (None: unset or not literal)."""
    return next((e.get("value") for e in spec.get("env", []) if e["name"] == name), None)


def secret_sources(pod: Obj, name: str) -> list[str]:
    """Every way a Secret or a static MQTT credential reaches container ``name`` of ``pod``.

    Env vars from a Secret, ``envFrom`` a Secret, mounted ``secret`` volumes and Secret sources
    of mounted ``projected`` volumes; and any ``SLONKD_MQTT_USER``/``_PASSWORD``/``_PASSWORD_FILE``.
    """
    spec = container(pod, name)
    found = []
    for e in spec.get("env", []):
        if e["name"] in STATIC_MQTT_ENV:
            found.append(f"env {e['name']}")
        if "secretKeyRef" in e.get("valueFrom", {}):
            found.append(f"env {e['name']} from Secret {e['valueFrom']['secretKeyRef']}")
    found += [f"envFrom {e['secretRef']}" for e in spec.get("envFrom", []) if "secretRef" in e]
    volumes = {v["name"]: v for v in pod["spec"].get("volumes", [])}
    for mount in spec.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        if "secret" in volume:
            found.append(f"{mount['mountPath']}: Secret {volume['secret'].get('secretName')}")
        found += [
            f"{mount['mountPath']}: projected Secret {source['secret'].get('name')}"
            for source in volume.get("projected", {}).get("sources", [])
            if "secret" in source
        ]
    return found


def projected_token(pod: Obj, name: str, path: str) -> Obj | None:
    """The ``serviceAccountToken`` source that serves file ``path`` in container ``name``.

    None unless ``path`` lies in a mounted ``projected`` volume made only of
    ServiceAccount tokens, one of which is projected to that very file.
    """
    spec = container(pod, name)
    volumes = {v["name"]: v for v in pod["spec"].get("volumes", [])}
    for mount in spec.get("volumeMounts", []):
        root = mount["mountPath"].rstrip("/") + "/"
        if not path.startswith(root) or mount.get("subPath"):
            continue
        sources = volumes[mount["name"]].get("projected", {}).get("sources", [])
        if not sources or any(set(s) != {"serviceAccountToken"} for s in sources):
            return None
        return next(
            (
                s["serviceAccountToken"]
                for s in sources
                if s["serviceAccountToken"].get("path") == path[len(root) :]
            ),
            None,
        )
    return None
