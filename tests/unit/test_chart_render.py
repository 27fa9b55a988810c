"""The Helm chart renders what the architecture asks for, and refuses values that break a rule.

Runs the pinned helm (``helm lint``, ``helm template``) without a cluster and reads the
rendered objects: worker pod wiring (agent sidecar, preStop, tokens), slurm.conf generated
from the pools, least-privilege RBAC, release-scoped cluster objects.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from slonkd.testing.helm import CHART_DIR, Helm
from slonkd.testing.toolchain import ensure_tools

MULTI_POOL = CHART_DIR / "ci" / "multi-pool-values.yaml"
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """The pinned helm with a private home, no cluster."""
    return Helm(binary=ensure_tools().helm, home=tmp_path_factory.mktemp("helm"))


def render(helm: Helm, *values: Path, set_json: tuple[str, ...] = (), ns: str = "hpc") -> list[Obj]:
    """``helm template rel`` as a list of objects."""
    out = helm.template("rel", namespace=ns, values=values, set_json=set_json).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def one(objs: list[Obj], kind: str, name: str) -> Obj:
    """The single object of ``kind`` named ``name``."""
    found = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def kinds(objs: list[Obj], kind: str) -> list[Obj]:
    """Every object of ``kind``."""
    return [o for o in objs if o["kind"] == kind]


def slurm_conf(objs: list[Obj]) -> str:
    """The rendered slurm.conf."""
    return str(one(objs, "ConfigMap", "rel-slurm-config")["data"]["slurm.conf"])


@pytest.mark.parametrize("values", [(), (MULTI_POOL,)], ids=["default", "multi-pool"])
def test_lint_is_clean(helm: Helm, values: tuple[Path, ...]) -> None:
    """``helm lint --strict`` passes for the default and the multi-pool values."""
    args = [f"--values={v}" for v in values]
    proc = helm.run("lint", "--strict", str(CHART_DIR), *args)
    assert "1 chart(s) linted, 0 chart(s) failed" in proc.stdout
    assert "[ERROR]" not in proc.stdout
    assert "[WARNING]" not in proc.stdout


def test_default_values_render_every_component(helm: Helm) -> None:
    """Controller, one worker pool, login, coordinator (2 replicas), mosquitto and their glue."""
    objs = render(helm)
    ctl = one(objs, "StatefulSet", "rel-slurmctld")
    assert ctl["spec"]["replicas"] == 1
    claim = ctl["spec"]["volumeClaimTemplates"][0]
    assert claim["metadata"]["name"] == "state"
    mounts = {
        m["name"]: m["mountPath"]
        for m in ctl["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    }
    assert mounts["state"] == "/var/spool/slurmctld"
    assert "StateSaveLocation=/var/spool/slurmctld" in slurm_conf(objs)
    assert one(objs, "StatefulSet", "rel-gpu")["spec"]["replicas"] == 2
    assert one(objs, "StatefulSet", "rel-login")["spec"]["replicas"] == 1
    assert one(objs, "Deployment", "rel-coordinator")["spec"]["replicas"] == 2
    mqtt = one(objs, "Deployment", "rel-mosquitto")
    assert mqtt["spec"]["strategy"]["type"] == "Recreate"
    conf = one(objs, "ConfigMap", "rel-mosquitto")["data"]["mosquitto.conf"]
    assert "persistence true" in conf
    assert "plugin /usr/lib/mosquitto_dynamic_security.so" in conf
    assert "allow_anonymous false" in conf
    assert one(objs, "PersistentVolumeClaim", "rel-mosquitto-data")
    assert {p["metadata"]["name"] for p in kinds(objs, "PodDisruptionBudget")} == {
        "rel-slurmctld",
        "rel-gpu",
        "rel-coordinator",
    }
    # topology.conf belongs to the coordinator: its ConfigMap is never rendered, only mounted
    # if it exists; the chart's only topology.conf is the seed in the SLURM config.
    assert not [o for o in objs if "topology" in o["metadata"]["name"]]
    assert [
        o["metadata"]["name"] for o in kinds(objs, "ConfigMap") if "topology.conf" in o["data"]
    ] == ["rel-slurm-config"]


def _pod(sts: Obj) -> Obj:
    return dict(sts["spec"]["template"]["spec"])


def test_worker_pod_has_agent_sidecar_prestop_and_pod_bound_token(helm: Helm) -> None:
    """Agent = init container with restartPolicy Always; preStop on slurmd; token only in agent."""
    objs = render(helm)
    sts = one(objs, "StatefulSet", "rel-gpu")
    assert sts["spec"]["updateStrategy"] == {"type": "OnDelete"}
    assert sts["spec"]["serviceName"] == "rel-slurmd"
    pod = _pod(sts)
    assert pod["terminationGracePeriodSeconds"] == 600
    assert pod["priorityClassName"] == "hpc-rel-training"
    assert pod["serviceAccountName"] == "rel-agent"
    assert pod["automountServiceAccountToken"] is False
    (agent,) = pod["initContainers"]
    assert agent["name"] == "slonkd-agent"
    assert agent["restartPolicy"] == "Always"
    assert agent["args"] == ["agent"]
    assert agent["securityContext"]["runAsNonRoot"] is True
    (slurmd,) = pod["containers"]
    assert slurmd["name"] == "slurmd"
    assert slurmd["lifecycle"]["preStop"]["exec"]["command"] == [
        "slonkd",
        "prestop",
        "--grace-seconds",
        "600",
        "--margin-seconds",
        "30",
    ]
    assert slurmd["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert "$(POD_NAME)" in slurmd["args"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    (source,) = volumes["slonkd-token"]["projected"]["sources"]
    assert source["serviceAccountToken"]["audience"] == "slonkd"
    agent_mounts = {m["name"]: m["mountPath"] for m in agent["volumeMounts"]}
    slurmd_mounts = {m["name"]: m["mountPath"] for m in slurmd["volumeMounts"]}
    assert agent_mounts["slonkd-token"] == "/var/run/secrets/slonk.dev/token"
    assert agent_mounts["kube-api-access"] == "/var/run/secrets/kubernetes.io/serviceaccount"
    assert "slonkd-token" not in slurmd_mounts
    assert "kube-api-access" not in slurmd_mounts
    assert agent_mounts["munge-run"] == slurmd_mounts["munge-run"] == "/run/munge"
    env = {e["name"]: e for e in agent["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["SLONKD_SLURM_NODE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    # kwok deletes pods at once unless labelled for the harness's kubelet stand-in.
    assert "slonk.dev/kubelet" not in sts["spec"]["template"]["metadata"]["labels"]


def test_slurm_conf_nodes_are_the_pod_names_behind_the_headless_service(helm: Helm) -> None:
    """One NodeName per worker pod, NodeAddr its headless DNS name, one partition per pool."""
    objs = render(helm, MULTI_POOL, ns="hpc")
    conf = slurm_conf(objs)
    declared = re.findall(r"^NodeName=(\S+) NodeAddr=(\S+)", conf, flags=re.M)
    pods = [
        f"{sts['metadata']['name']}-{i}"
        for sts in kinds(objs, "StatefulSet")
        if sts["spec"]["serviceName"] == "rel-slurmd"
        for i in range(sts["spec"]["replicas"])
    ]
    assert sorted(n for n, _ in declared) == sorted(pods)
    assert len(pods) == 3 + 2 + 1
    for node, addr in declared:
        assert addr == f"{node}.rel-slurmd.hpc.svc.cluster.local"
    assert (
        "SlurmctldHost=rel-slurmctld-0(rel-slurmctld-0.rel-slurmctld.hpc.svc.cluster.local)" in conf
    )
    assert "ClusterName=multi" in conf
    assert "PartitionName=h100 Nodes=rel-h100-[0-2] Default=YES" in conf
    assert "PartitionName=cpu Nodes=rel-cpu-0 Default=NO" in conf
    assert "RealMemory=1000000 Gres=gpu:h100:8 Feature=h100,nvlink" in conf
    assert "e+0" not in conf  # large numbers stay integers
    gres = one(objs, "ConfigMap", "rel-slurm-config")["data"]["gres.conf"]
    assert gres.split("\n")[:2] == [
        "NodeName=rel-h100-[0-2] Name=gpu Type=h100 File=/dev/nvidia[0-7]",
        "NodeName=rel-a100-[0-1] Name=gpu Type=a100 File=/dev/nvidia[0-3]",
    ]
    assert "rel-cpu" not in gres
    cgroup = one(objs, "ConfigMap", "rel-slurm-config")["data"]["cgroup.conf"]
    assert "ConstrainDevices=yes" in cgroup


def test_multi_pool_values_set_per_pool_grace_network_and_scrape_annotations(helm: Helm) -> None:
    """Per-pool grace overrides the default; hostNetwork pools use ClusterFirstWithHostNet."""
    objs = render(helm, MULTI_POOL)
    h100, a100, cpu = (_pod(one(objs, "StatefulSet", f"rel-{p}")) for p in ("h100", "a100", "cpu"))
    assert h100["terminationGracePeriodSeconds"] == 900
    assert a100["terminationGracePeriodSeconds"] == 1800
    assert a100["containers"][0]["lifecycle"]["preStop"]["exec"]["command"][3] == "1800"
    assert h100["hostNetwork"] is True
    assert h100["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert "hostNetwork" not in a100
    assert h100["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert "nvidia.com/gpu" not in cpu["containers"][0]["resources"].get("limits", {})
    ann = one(objs, "StatefulSet", "rel-h100")["spec"]["template"]["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true"
    home = {v["name"]: v for v in h100["volumes"]}["home"]
    assert home["nfs"] == {"server": "nfs.storage.svc.cluster.local", "path": "/export/home"}
    default_ann = one(render(helm), "StatefulSet", "rel-gpu")["spec"]["template"]["metadata"]
    assert "prometheus.io/scrape" not in default_ann.get("annotations", {})


def _rules(objs: list[Obj]) -> Iterator[tuple[str, Obj]]:
    for role in kinds(objs, "Role") + kinds(objs, "ClusterRole"):
        for rule in role["rules"]:
            yield role["metadata"]["name"], rule


def test_rbac_has_no_wildcards_and_every_rule_is_explained(helm: Helm) -> None:
    """No '*' anywhere in a rule; each rule in the template carries a comment naming its call."""
    objs = render(helm)
    assert len(list(_rules(objs))) >= 10
    for name, rule in _rules(objs):
        for field in ("verbs", "resources", "apiGroups", "resourceNames"):
            assert "*" not in rule.get(field, []), f"{name}: wildcard in {field}"
    lines = (CHART_DIR / "templates" / "rbac.yaml").read_text().splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("- apiGroups:"):
            assert lines[i - 1].strip().startswith("#"), f"rbac.yaml:{i + 1} has no comment"
    agent = one(objs, "ClusterRole", "hpc-rel-agent")["rules"]
    assert all("patch" not in r["verbs"] for r in agent), "the agent never writes a Node"
    coord = {
        (g, res): set(r["verbs"])
        for r in one(objs, "ClusterRole", "hpc-rel-coordinator")["rules"]
        for g in r["apiGroups"]
        for res in r["resources"]
    }
    assert coord[("", "nodes")] == {"get", "list", "watch", "patch"}
    assert coord[("", "nodes/status")] == {"patch"}
    assert coord[("authentication.k8s.io", "tokenreviews")] == {"create"}


def test_cluster_scoped_objects_carry_namespace_and_release(helm: Helm) -> None:
    """PriorityClasses and ClusterRoles are named <namespace>-<release>-*: no collisions."""
    a, b = render(helm, ns="team-a"), render(helm, ns="team-b")
    cluster_kinds = ("PriorityClass", "ClusterRole", "ClusterRoleBinding")

    def names(objs: list[Obj]) -> set[tuple[str, str]]:
        return {(o["kind"], o["metadata"]["name"]) for o in objs if o["kind"] in cluster_kinds}

    assert len(names(a)) == 3 + 2 + 2
    assert all(n.startswith("team-a-rel-") for _, n in names(a))
    assert not names(a) & names(b)
    values = {o["metadata"]["name"]: o["value"] for o in kinds(a, "PriorityClass")}
    assert (
        values["team-a-rel-control"] > values["team-a-rel-serving"] > values["team-a-rel-training"]
    )


def test_agent_mounts_the_dcgm_socket_dir_only_when_asked(helm: Helm) -> None:
    """agent.health.dcgmSocketDir: a read-only hostPath directory at the same path, or nothing."""
    pod = _pod(one(render(helm), "StatefulSet", "rel-gpu"))
    assert "dcgm-socket" not in {v["name"] for v in pod["volumes"]}
    objs = render(helm, set_json=('agent={"health":{"dcgmSocketDir":"/run/nvidia-dcgm"}}',))
    pod = _pod(one(objs, "StatefulSet", "rel-gpu"))
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["dcgm-socket"]["hostPath"] == {"path": "/run/nvidia-dcgm", "type": "Directory"}
    (agent,) = pod["initContainers"]
    mounts = {m["name"]: m for m in agent["volumeMounts"]}
    assert mounts["dcgm-socket"] == {
        "name": "dcgm-socket",
        "mountPath": "/run/nvidia-dcgm",
        "readOnly": True,
    }
    assert mounts["kmsg"]["mountPath"] == "/dev/kmsg"  # the other agent.health keys kept


BREAKING = {
    "no pools key": (["pools=null"], "missing property 'pools'"),
    "empty pools": (["pools=[]"], "/pools': minItems"),
    "grace not above margin": (
        ['workers={"terminationGracePeriodSeconds":30,"prestop":{"marginSeconds":30}}'],
        "terminationGracePeriodSeconds (30) must be longer than workers.prestop.marginSeconds (30)",
    ),
    "pool grace not above margin": (
        [
            'pools=[{"name":"a","replicas":1,"gpus":1,"cpus":1,"realMemoryMB":1,'
            '"terminationGracePeriodSeconds":10}]'
        ],
        "pools[a]: terminationGracePeriodSeconds (10) must be longer",
    ),
    "duplicate pool names": (
        [
            'pools=[{"name":"a","replicas":1,"gpus":1,"cpus":1,"realMemoryMB":1},'
            '{"name":"a","replicas":2,"gpus":1,"cpus":1,"realMemoryMB":1}]'
        ],
        'duplicate pool name "a"',
    ),
    "pool named like a chart object": (
        ['pools=[{"name":"login","replicas":1,"gpus":0,"cpus":1,"realMemoryMB":1}]'],
        'pool name "login" is reserved',
    ),
    "pool name not DNS": (
        ['pools=[{"name":"GPU_1","replicas":1,"gpus":0,"cpus":1,"realMemoryMB":1}]'],
        "/pools/0/name",
    ),
    "misspelt key": (
        [
            'workers={"terminationGracePeriodSecond":900,"prestop":{"marginSeconds":30},'
            '"terminationGracePeriodSeconds":900}'
        ],
        "additional properties 'terminationGracePeriodSecond' not allowed",
    ),
    "dcgm socket dir not absolute": (
        ['agent={"health":{"dcgmSocketDir":"run/nvidia-dcgm"}}'],
        "/agent/health/dcgmSocketDir",
    ),
    "serving not above training": (
        ['priorityClasses={"create":true,"control":10,"serving":5,"training":5}'],
        "need control (10) > serving (5) > training (5)",
    ),
}


@pytest.mark.parametrize("case", sorted(BREAKING))
def test_values_that_break_a_rule_fail_with_a_clear_message(helm: Helm, case: str) -> None:
    """Each broken rule fails ``helm template`` with a message naming the value to fix."""
    set_json, message = BREAKING[case]
    proc = helm.template("rel", set_json=set_json, check=False)
    assert proc.returncode != 0
    assert message in proc.stderr
    assert not proc.stdout.strip()
