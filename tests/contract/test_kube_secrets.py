"""``slonkd secrets ensure`` on the real apiserver, as the chart's Job runs it, with its account.

The chart is rendered (``helm template``) into a fresh namespace: its hook ServiceAccount,
Role and RoleBinding are created, and the Job's container arguments run as that account
(a token of it in a kubeconfig), as the kubelet would run them. The first run creates the
Secrets, a second changes nothing (same resourceVersion, same data), and a Secret that
existed with other data is left as it was. The account can read no other Secret.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from slonkd_sandbox.chart.helm import Helm
from slonkd_sandbox.kube.api import ApiError, KubeApi
from slonkd_sandbox.kube.cluster import KubeCluster
from tests.cli import slonkd

pytestmark = pytest.mark.kube

Obj = dict[str, Any]
FEATURES = ('coordinator={"slurmTriggers":{"enabled":true}}', 'accounting={"enabled":true}')
MADE = ("rel-munge", "rel-mosquitto-admin", "rel-slurmctld-mqtt", "rel-accounting-db", "rel-tls")


def _render(kube: KubeCluster, tmp_path: Path, namespace: str) -> list[Obj]:
    assert kube.tools is not None
    helm = Helm(binary=kube.tools.helm, home=tmp_path / "helm")
    out = helm.template("rel", namespace=namespace, set_json=FEATURES).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def _one(objs: list[Obj], kind: str) -> Obj:
    """The Job's (one of its kind), or its account's object named rel-secrets."""
    (found,) = [
        o
        for o in objs
        if o["kind"] == kind and (kind == "Job" or o["metadata"]["name"] == "rel-secrets")
    ]
    return found


def _job_account(kube: KubeCluster, tmp_path: Path, namespace: str) -> tuple[list[str], Path]:
    """Create the Job's account from the render; its container args and a kubeconfig as it."""
    objs = _render(kube, tmp_path, namespace)
    for kind, path in (
        ("ServiceAccount", f"/api/v1/namespaces/{namespace}/serviceaccounts"),
        ("Role", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles"),
        ("RoleBinding", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings"),
    ):
        kube.api.request("POST", path, _one(objs, kind))
    (container,) = _one(objs, "Job")["spec"]["template"]["spec"]["containers"]
    token = kube.create_token(namespace, "rel-secrets")
    config = tmp_path / "job-kubeconfig"
    config.write_text(kube.kubeconfig_for(token, user="rel-secrets", namespace=namespace))
    return list(container["args"]), config


def _run(args: list[str], config: Path) -> Any:
    env = {**os.environ, "KUBECONFIG": str(config)}
    env.pop("POD_NAMESPACE", None)
    return slonkd(*args, env=env)


def _secrets(kube: KubeCluster, namespace: str) -> dict[str, tuple[str, Obj]]:
    items = kube.api.request("GET", f"/api/v1/namespaces/{namespace}/secrets")["items"]
    return {s["metadata"]["name"]: (s["metadata"]["resourceVersion"], s["data"]) for s in items}


def test_the_job_creates_once_changes_nothing_after_and_keeps_an_existing_secret(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    """Run 1 creates the absent Secrets; run 2 writes nothing; theirs keeps its data."""
    args, config = _job_account(kube, tmp_path, namespace)
    theirs = {
        "username": base64.b64encode(b"their-admin").decode(),
        "password": base64.b64encode(b"their-password").decode(),
        "extra": base64.b64encode(b"kept too").decode(),
    }
    kube.api.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/secrets",
        {"metadata": {"name": "rel-mosquitto-admin"}, "data": theirs},
    )
    before = _secrets(kube, namespace)["rel-mosquitto-admin"]

    first = _run(args, config)
    assert first.returncode == 0, first.stderr
    made = _secrets(kube, namespace)
    assert set(MADE) <= set(made)
    assert made["rel-mosquitto-admin"] == before  # kept: same resourceVersion, same data
    lines = first.stdout.splitlines()
    for name in MADE:
        outcome = "kept" if name == "rel-mosquitto-admin" else "created"
        assert f"secret {namespace}/{name}: {outcome} " in "\n".join(lines), lines
    assert len(base64.b64decode(made["rel-munge"][1]["munge.key"])) == 1024
    nudge = made["rel-slurmctld-mqtt"][1]
    assert base64.b64decode(nudge["username"]) == b"slurmctld-nudge"
    password = base64.b64decode(nudge["password"]).decode()
    assert len(password) == 32
    assert password not in first.stdout + first.stderr  # values are never printed
    obj = kube.api.request("GET", f"/api/v1/namespaces/{namespace}/secrets/rel-munge")
    assert obj["metadata"]["labels"]["slonk.dev/release"] == "rel"
    assert "app.kubernetes.io/instance" not in obj["metadata"]["labels"]
    # TLS by default: a kubernetes.io/tls Secret (the apiserver checks tls.crt and tls.key)
    tls = kube.api.request("GET", f"/api/v1/namespaces/{namespace}/secrets/rel-tls")
    assert tls["type"] == "kubernetes.io/tls"
    assert sorted(tls["data"]) == ["ca.crt", "tls.crt", "tls.key"]
    assert b"PRIVATE KEY" not in base64.b64decode(tls["data"]["ca.crt"])

    second = _run(args, config)
    assert second.returncode == 0, second.stderr
    assert _secrets(kube, namespace) == made  # nothing written: same versions, same data
    assert second.stdout.count(": kept ") == len(MADE)


def test_the_jobs_account_reads_no_other_secret_and_replaces_none(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    """The account creates Secrets and gets only its own names: no list, no other get."""
    args, config = _job_account(kube, tmp_path, namespace)
    kube.api.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/secrets",
        {"metadata": {"name": "someone-else"}, "data": {"k": base64.b64encode(b"v").decode()}},
    )
    assert _run(args, config).returncode == 0

    token = kube.create_token(namespace, "rel-secrets")
    api = KubeApi(host="127.0.0.1", port=kube.ports["apiserver"], ca_file=kube.ca_file, token=token)
    secrets = f"/api/v1/namespaces/{namespace}/secrets"
    for method, path, body in (
        ("GET", f"{secrets}/someone-else", None),
        ("GET", secrets, None),
        ("PUT", f"{secrets}/rel-munge", {"metadata": {"name": "rel-munge"}, "data": {}}),
        ("DELETE", f"{secrets}/rel-munge", None),
        ("GET", f"/api/v1/namespaces/{namespace}/configmaps", None),
    ):
        with pytest.raises(ApiError) as refused:
            api.request(method, path, body)
        assert refused.value.status == 403, (method, path)


def test_a_secret_an_older_chart_rendered_is_released_from_helm_with_its_data(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    """Helm's marks: only helm.sh/resource-policy=keep and Argo CD's Prune=false are added.

    And a kept Secret without a key the pods need fails the Job (exit 1), naming the key.
    """
    args, config = _job_account(kube, tmp_path, namespace)
    key = base64.b64encode(b"k" * 1024).decode()
    kube.api.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/secrets",
        {
            "metadata": {
                "name": "rel-munge",
                "annotations": {"meta.helm.sh/release-name": "rel"},
                "labels": {"app.kubernetes.io/managed-by": "Helm"},
            },
            "data": {"munge.key": key},
        },
    )
    kube.api.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/secrets",
        {"metadata": {"name": "rel-accounting-db"}, "data": {"user": key}},
    )
    argo = {"username": key, "password": key}  # helm template's labels, no Helm annotation
    kube.api.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/secrets",
        {
            "metadata": {
                "name": "rel-slurmctld-mqtt",
                "labels": {"app.kubernetes.io/managed-by": "Helm"},
            },
            "data": argo,
        },
    )
    done = _run(args, config)
    assert done.returncode == 1
    assert "rel-accounting-db exists without key(s) password" in done.stderr
    assert f"secret {namespace}/rel-munge: kept, released from Helm" in done.stdout
    munge = kube.api.request("GET", f"/api/v1/namespaces/{namespace}/secrets/rel-munge")
    assert munge["data"] == {"munge.key": key}
    assert munge["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert munge["metadata"]["annotations"]["argocd.argoproj.io/sync-options"] == "Prune=false"
    nudge = kube.api.request("GET", f"/api/v1/namespaces/{namespace}/secrets/rel-slurmctld-mqtt")
    assert nudge["data"] == argo
    assert nudge["metadata"]["annotations"]["argocd.argoproj.io/sync-options"] == "Prune=false"
    assert f"secret {namespace}/rel-slurmctld-mqtt: kept, released from Helm" in done.stdout
    version = munge["metadata"]["resourceVersion"]
    again = _run(args, config)
    assert f"secret {namespace}/rel-munge: kept (keys" in again.stdout
    assert (
        kube.api.request("GET", f"/api/v1/namespaces/{namespace}/secrets/rel-munge")["metadata"][
            "resourceVersion"
        ]
        == version
    )
