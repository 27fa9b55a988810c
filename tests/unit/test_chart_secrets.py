"""GitOps-safe secrets: two renders of the same values are the same bytes; Secrets are made once.

No template draws a value (``lookup``, ``randBytes``, ...): each Secret the pods need comes
from its ``existingSecret`` or from the pre-install/pre-upgrade (Argo CD PreSync) Job running
``slonkd secrets ensure``, whose account may create Secrets and read only those it makes.
The command itself runs on the apiserver in tests/contract/test_kube_secrets.py, and the
chart's Job (as a kubelet would run it) in tests/contract/test_chart.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from slonkd.core.secret_spec import TLS_KEYS, parse_spec
from slonkd_sandbox.chart.helm import CHART_DIR, Helm
from tests.unit.test_chart_render import MULTI_POOL, Obj, helm, kinds, one, render

__all__ = ["helm"]  # the module-scoped fixture of test_chart_render

EVERY_FEATURE: dict[str, Any] = {
    "accounting": {"enabled": True},
    "coordinator": {"slurmTriggers": {"enabled": True}, "jobBlame": {"enabled": True}},
    "tls": {"enabled": True, "secretName": "slonk-tls"},
    "metrics": {
        "prometheusAnnotations": True,
        "prometheusRule": {"enabled": True},
        "grafanaDashboard": {"enabled": True},
    },
}
"""Every optional part on (over ci/multi-pool-values.yaml): each one's Secret is made once."""
GIVEN = (
    'munge={"existingSecret":"my-munge"}',
    'mosquitto={"admin":{"existingSecret":"my-admin"}}',
    'coordinator={"slurmTriggers":{"enabled":true,"mqttSecret":"my-nudge"}}',
    'accounting={"enabled":true,"database":{"existingSecret":"my-db"}}',
    'tls={"secretName":"my-tls"}',
)
"""Every Secret given: the chart makes none, and runs no Job."""
DRAWN = re.compile(
    r"\b(lookup|randBytes|randAlphaNum|randAscii|randNumeric|randInt|genPrivateKey|genCA"
    r"|genSelfSignedCert|genSignedCert|uuidv4|now)\b"
)
"""Template functions whose result differs between renders (or depends on the cluster)."""


@pytest.fixture(scope="module")
def every_feature(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A values file with every optional feature on."""
    path = tmp_path_factory.mktemp("values") / "every-feature.yaml"
    path.write_text(yaml.safe_dump(EVERY_FEATURE))
    return path


def made_once(objs: list[Obj]) -> dict[str, dict[str, Any]]:
    """The Secrets the chart's Job makes: name -> its keys and how each is made.

    A TLS Secret's three keys are made together: each maps to its entry's ``{"tls": ...}``.
    """
    jobs = kinds(objs, "Job")
    if not jobs:
        return {}
    (job,) = jobs
    (container,) = job["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert args[:2] == ["secrets", "ensure"]
    spec = json.loads(args[args.index("--spec") + 1])
    parse_spec(json.dumps(spec))  # what the command accepts
    return {
        s["name"]: s["data"] if "data" in s else {k: {"tls": s["tls"]} for k in TLS_KEYS}
        for s in spec["secrets"]
    }


def _secret_names(pod: Obj) -> set[str]:
    """Every Secret a pod template names: volumes, projected sources, env."""
    names = set()
    for vol in pod.get("volumes", []):
        if "secret" in vol:
            names.add(vol["secret"]["secretName"])
        for src in vol.get("projected", {}).get("sources", []):
            if "secret" in src:
                names.add(src["secret"]["name"])
    for c in pod.get("containers", []) + pod.get("initContainers", []):
        for env in c.get("env", []):
            ref = env.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                names.add(ref["name"])
    return names


def _pods(objs: list[Obj]) -> list[Obj]:
    return [
        o["spec"]["template"]["spec"]
        for o in objs
        if o["kind"] in ("StatefulSet", "Deployment", "DaemonSet")
    ]


def test_no_template_draws_a_value_or_asks_the_cluster() -> None:
    """No lookup, rand*, gen* or uuidv4 in any template action (comments aside)."""
    found = []
    for path in sorted((CHART_DIR / "templates").iterdir()):
        text = re.sub(r"/\*.*?\*/", "", path.read_text(), flags=re.S)
        for action in re.findall(r"\{\{.*?\}\}", text, flags=re.S):
            found += [f"{path.name}: {m}" for m in DRAWN.findall(action)]
    assert not found


@pytest.mark.parametrize("case", ["default", "every-feature", "every-secret-given"])
def test_two_renders_of_the_same_values_are_the_same_bytes(
    helm: Helm, every_feature: Path, case: str
) -> None:
    """``helm template`` twice with the same values: no difference (GitOps, Argo CD)."""
    values = {"default": (), "every-feature": (MULTI_POOL, every_feature)}.get(case, ())
    set_json = GIVEN if case == "every-secret-given" else ()
    first, second = (
        helm.template("rel", namespace="hpc", values=values, set_json=set_json).stdout
        for _ in range(2)
    )
    assert first == second
    assert "kind: Secret\n" not in first  # none rendered: made once, or given


def test_each_generated_secret_is_made_once_by_a_presync_job_the_pods_wait_for(
    helm: Helm, every_feature: Path
) -> None:
    """The Job makes exactly the Secrets the pods name and were not given; hooks in order."""
    objs = render(helm, MULTI_POOL, every_feature)
    made = made_once(objs)
    assert made == {
        "rel-munge": {"munge.key": {"randomBytes": 1024}},
        "rel-mosquitto-admin": {
            "username": {"value": "slonkd-admin"},
            "password": {"randomAlphanumeric": 32},
        },
        "rel-slurmctld-mqtt": {
            "username": {"value": "slurmctld-nudge"},
            "password": {"randomAlphanumeric": 32},
        },
        "rel-accounting-db": {"password": {"randomAlphanumeric": 32}},
    }
    named = set().union(*(_secret_names(p) for p in _pods(objs)))
    assert named - set(made) == {"slonk-tls"}  # the operator's certificate only
    assert set(made) <= named
    slurmctld = _secret_names(one(objs, "StatefulSet", "rel-slurmctld")["spec"]["template"]["spec"])
    assert "rel-munge" in slurmctld

    (job,) = kinds(objs, "Job")
    assert re.fullmatch(r"rel-secrets-[0-9a-f]{8}", job["metadata"]["name"])
    ann = job["metadata"]["annotations"]
    assert ann["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert "before-hook-creation" in ann["helm.sh/hook-delete-policy"].split(",")
    assert ann["argocd.argoproj.io/hook"] == "PreSync"
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "rel-secrets"
    (container,) = pod["containers"]
    assert container["image"] == "localhost/slonk/slonkd:dev"
    assert container["args"][2:4] == ["--namespace", "hpc"]
    for kind in ("ServiceAccount", "Role", "RoleBinding"):
        account = one(objs, kind, "rel-secrets")["metadata"]["annotations"]
        assert account["helm.sh/hook"] == ann["helm.sh/hook"]
        assert account["argocd.argoproj.io/hook"] == "PreSync"
        assert int(account["helm.sh/hook-weight"]) < int(ann["helm.sh/hook-weight"])
        assert int(account["argocd.argoproj.io/sync-wave"]) < int(
            ann["argocd.argoproj.io/sync-wave"]
        )
    rules = {
        (tuple(r["verbs"]), tuple(r.get("resourceNames", ())))
        for r in one(objs, "Role", "rel-secrets")["rules"]
        if r["resources"] == ["secrets"] and r["apiGroups"] == [""]
    }
    assert rules == {(("create",), ()), (("get", "patch"), tuple(made))}
    assert len(one(objs, "Role", "rel-secrets")["rules"]) == 2
    binding = one(objs, "RoleBinding", "rel-secrets")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "rel-secrets", "namespace": "hpc"}
    ]


def test_the_jobs_name_changes_with_what_its_pod_runs_so_kubectl_apply_never_updates_it(
    helm: Helm,
) -> None:
    """A Job's pod template is immutable: other values that reach it give another Job name."""

    def job_name(*set_json: str) -> str:
        (job,) = kinds(render(helm, set_json=set_json), "Job")
        return str(job["metadata"]["name"])

    base = job_name()
    assert job_name() == base
    assert job_name('images={"slonkd":{"repository":"r/slonkd","tag":"v2"}}') != base
    assert job_name('coordinator={"slurmTriggers":{"enabled":true}}') != base
    assert job_name('secretsJob={"nodeSelector":{"a":"b"}}') != base
    assert job_name('pools=[{"name":"x","replicas":1,"gpus":0,"cpus":1,"realMemoryMB":1}]') == base


def test_given_secrets_are_not_made_and_without_any_to_make_no_job_runs(helm: Helm) -> None:
    """Each existingSecret (mqttSecret, the database's, tls.secretName) takes its Secret off."""
    assert set(made_once(render(helm))) == {"rel-munge", "rel-mosquitto-admin", "rel-tls"}
    some = render(helm, set_json=GIVEN[:1])
    assert set(made_once(some)) == {"rel-mosquitto-admin", "rel-tls"}
    objs = render(helm, set_json=GIVEN)
    assert not kinds(objs, "Job")
    assert not [o for o in objs if o["metadata"]["name"] == "rel-secrets"]
    named = set().union(*(_secret_names(p) for p in _pods(objs)))
    assert {"my-munge", "my-admin", "my-nudge", "my-db", "my-tls"} <= named
