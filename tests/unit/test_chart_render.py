"""The Helm chart renders what the architecture asks for, and refuses values that break a rule.

Runs the pinned helm (``helm lint``, ``helm template``) without a cluster and reads the
rendered objects: worker pod wiring (agent sidecar, preStop, tokens), slurm.conf generated
from the pools, least-privilege RBAC, release-scoped cluster objects.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from slonkd_sandbox.chart.helm import CHART_DIR, Helm
from slonkd_sandbox.toolchain import ensure_tools

MULTI_POOL = CHART_DIR / "ci" / "multi-pool-values.yaml"
LOCAL_IMAGES = CHART_DIR / "ci" / "local-images-values.yaml"
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


@pytest.mark.parametrize(
    "values", [(), (MULTI_POOL,), (LOCAL_IMAGES,)], ids=["default", "multi-pool", "local-images"]
)
def test_lint_is_clean(helm: Helm, values: tuple[Path, ...]) -> None:
    """``helm lint --strict`` passes for the default, multi-pool and local-images values."""
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
    assert "SLONKD_SLURM_NODE" not in env  # the SLURM node is the pod's name, the default
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    # the agent serves /healthz, /readyz and /metrics on agent.metricsPort (in its file)
    assert not {"SLONKD_METRICS_PORT", "SLONKD_CLUSTER"} & set(env)
    assert agent["ports"] == [{"name": "agent-metrics", "containerPort": 9464}]
    assert agent["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "agent-metrics"}
    # kwok deletes pods at once unless labelled for the harness's kubelet stand-in.
    assert "slonk.dev/kubelet" not in sts["spec"]["template"]["metadata"]["labels"]


def test_prestop_switch_and_failure_grace_reach_the_pods_and_the_coordinator(helm: Helm) -> None:
    """workers.prestop.enabled=false drops slurmd's preStop; failureGraceSeconds is passed on.

    The preStop is on by default; the coordinator's section carries
    coordinator.failureGraceSeconds as policy.failure_grace_s.
    """
    off = render(
        helm,
        set_json=("workers.prestop.enabled=false", "coordinator.failureGraceSeconds=10"),
    )
    (slurmd,) = _pod(one(off, "StatefulSet", "rel-gpu"))["containers"]
    assert "lifecycle" not in slurmd
    config = json.loads(one(off, "ConfigMap", "rel-coordinator")["data"]["config.json"])[
        "coordinator"
    ]
    assert config["policy"]["failure_grace_s"] == 10
    (slurmd,) = _pod(one(render(helm), "StatefulSet", "rel-gpu"))["containers"]
    assert slurmd["lifecycle"]["preStop"]["exec"]["command"][:2] == ["slonkd", "prestop"]


def test_job_blame_value_reaches_the_coordinator(helm: Helm, tmp_path: Path) -> None:
    """coordinator.jobBlame is off by default; on, its policy reaches the coordinator's settings.

    The rendered keys load as the coordinator's ``job_blame`` settings (K, M, p, the
    infrastructure exit codes and their bound in users, the poll period).
    """
    default = render(helm)
    config = json.loads(one(default, "ConfigMap", "rel-coordinator")["data"]["config.json"])[
        "coordinator"
    ]
    assert "job_blame" not in config
    on = render(
        helm,
        set_json=(
            'coordinator.jobBlame={"enabled":true,"minFailures":4,"infrastructureExitCodes":[42,43]}',
        ),
    )
    config = json.loads(one(on, "ConfigMap", "rel-coordinator")["data"]["config.json"])[
        "coordinator"
    ]
    from slonkd.cli.coordinator import load_settings

    (tmp_path / "config.json").write_text(json.dumps({"coordinator": config}))
    loaded = load_settings({"POD_NAMESPACE": "hpc", "SLONKD_CONFIG": str(tmp_path / "config.json")})
    assert loaded.job_blame is not None
    assert loaded.job_blame.min_failures == 4
    assert loaded.job_blame.window_failures == 200
    assert loaded.job_blame.max_p_value == 1e-4
    assert loaded.job_blame.infrastructure_exit_codes == (42, 43)
    assert loaded.job_blame.exit_code_min_users == 2  # one user cannot drain what they pick
    assert loaded.job_blame.poll_s == 30
    three = render(helm, set_json=('coordinator.jobBlame={"enabled":true,"exitCodeMinUsers":3}',))
    config = json.loads(one(three, "ConfigMap", "rel-coordinator")["data"]["config.json"])[
        "coordinator"
    ]
    assert config["job_blame"]["exit_code_min_users"] == 3


def test_revalidation_values_reach_the_coordinator(helm: Helm) -> None:
    """coordinator.revalidation: on by default (900 s, 30 s, no named checks); set, passed on.

    The keys are the ones ``slonkd coordinator`` reads (policy.revalidation).
    """
    config = json.loads(one(render(helm), "ConfigMap", "rel-coordinator")["data"]["config.json"])
    revalidation = config["coordinator"]["policy"]["revalidation"]
    assert revalidation == {"enabled": True, "timeout_s": 900, "recheck_s": 30, "required": []}
    custom = render(
        helm,
        set_json=(
            'coordinator.revalidation={"enabled":true,"timeoutSeconds":600,'
            '"recheckSeconds":10,"checks":["dcgm-diag"]}',
        ),
    )
    config = json.loads(one(custom, "ConfigMap", "rel-coordinator")["data"]["config.json"])[
        "coordinator"
    ]
    assert config["policy"]["revalidation"]["timeout_s"] == 600
    assert config["policy"]["revalidation"]["required"] == ["dcgm-diag"]


def test_slurm_triggers_value_reaches_coordinator_and_slurmctld(helm: Helm, tmp_path: Path) -> None:
    """coordinator.slurmTriggers is off by default; on, the leader and slurmctld get their parts.

    The leader gets trigger_program and the generated client slurmctld-nudge to make in
    dynsec; slurmctld (which runs the program) the broker's address, the cluster and that
    client, with the CA under TLS. With mqttSecret both use the operator's client instead and
    the leader makes none.
    """
    default = render(helm)
    config = json.loads(one(default, "ConfigMap", "rel-coordinator")["data"]["config.json"])[
        "coordinator"
    ]
    assert "trigger_program" not in config
    (ctld,) = _pod(one(default, "StatefulSet", "rel-slurmctld"))["containers"]
    assert not any(e["name"].startswith("SLONKD_") for e in ctld["env"])

    on = render(
        helm,
        set_json=(
            'coordinator.slurmTriggers={"enabled":true}',
            'tls={"enabled":true,"secretName":"slonk-tls"}',
        ),
    )
    config = json.loads(one(on, "ConfigMap", "rel-coordinator")["data"]["config.json"])[
        "coordinator"
    ]
    assert config["trigger_program"] == "/opt/slonkd/bin/slonkd-nudge"
    from slonkd.cli.coordinator import load_settings

    (tmp_path / "config.json").write_text(json.dumps({"coordinator": config}))
    loaded = load_settings({"POD_NAMESPACE": "hpc", "SLONKD_CONFIG": str(tmp_path / "config.json")})
    assert loaded.trigger_program == "/opt/slonkd/bin/slonkd-nudge"
    pod = _pod(one(on, "StatefulSet", "rel-slurmctld"))
    (ctld,) = pod["containers"]
    env = {e["name"]: e for e in ctld["env"]}
    assert env["SLONKD_MQTT_HOST"]["value"] == "rel-mosquitto.hpc.svc.cluster.local"
    assert env["SLONKD_MQTT_PORT"]["value"] == "8883"
    assert env["SLONKD_CLUSTER"]["value"] == "slonk"
    from tests.unit.test_chart_secrets import made_once

    assert made_once(on)["rel-slurmctld-mqtt"] == {
        "username": {"value": "slurmctld-nudge"},
        "password": {"randomAlphanumeric": 32},
    }
    for name, key in (("SLONKD_MQTT_USER", "username"), ("SLONKD_MQTT_PASSWORD", "password")):
        assert env[name]["valueFrom"]["secretKeyRef"] == {"name": "rel-slurmctld-mqtt", "key": key}
    (coord,) = _pod(one(on, "Deployment", "rel-coordinator"))["containers"]
    coord_env = {e["name"]: e for e in coord["env"]}
    for name, key in (
        ("SLONKD_NUDGE_MQTT_USER", "username"),
        ("SLONKD_NUDGE_MQTT_PASSWORD", "password"),
    ):
        assert coord_env[name]["valueFrom"]["secretKeyRef"] == {
            "name": "rel-slurmctld-mqtt",
            "key": key,
        }
    ca = env["SLONKD_MQTT_TLS_CA_FILE"]["value"]
    (mount,) = [m for m in ctld["volumeMounts"] if ca.startswith(m["mountPath"] + "/")]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == "slonk-tls"
    assert [i["key"] for i in volume["secret"]["items"]] == ["ca.crt"]

    own = render(
        helm, set_json=('coordinator.slurmTriggers={"enabled":true,"mqttSecret":"ctld-mqtt"}',)
    )
    assert "rel-slurmctld-mqtt" not in made_once(own)
    (ctld,) = _pod(one(own, "StatefulSet", "rel-slurmctld"))["containers"]
    env = {e["name"]: e for e in ctld["env"]}
    assert env["SLONKD_MQTT_USER"]["valueFrom"]["secretKeyRef"]["name"] == "ctld-mqtt"
    (coord,) = _pod(one(own, "Deployment", "rel-coordinator"))["containers"]
    assert not any(e["name"].startswith("SLONKD_NUDGE_") for e in coord["env"])
    (coord,) = _pod(one(default, "Deployment", "rel-coordinator"))["containers"]
    assert not any(e["name"].startswith("SLONKD_NUDGE_") for e in coord["env"])


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
    # a new pod is a new address behind the same name: slurmctld must not cache the old one
    assert "CommunicationParameters=NoAddrCache" in conf
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
    coord = one(objs, "Deployment", "rel-coordinator")["spec"]["template"]
    assert coord["metadata"]["annotations"]["prometheus.io/port"] == "9400"  # its metrics port
    assert [p["name"] for p in coord["spec"]["containers"][0]["ports"]] == ["api", "metrics"]
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


RBAC_DIR = CHART_DIR.parents[1] / "rbac"
# deploy/rbac's object names -> the chart's (release "rel")
RBAC_NAMES = {
    "slonkd-coordinator": "rel-coordinator",
    "slonkd-state": "rel-coordinator-state",
    "slonkd-topology": "rel-topology",
}
Grant = tuple[str, str, str, str, str, str]  # (who, where, apiGroup, resource, verb, name)


def _grants(role: Obj, who: str, own_ns: str, names: dict[str, str]) -> set[Grant]:
    """A Role's or ClusterRole's rules, one verb on one resource (and name) each.

    ``where`` is "cluster" for a ClusterRole, "own" for a Role in the release's (or, for
    deploy/rbac, the applying) namespace, else the Role's namespace.
    """
    ns = role["metadata"].get("namespace", own_ns)
    where = "cluster" if role["kind"] == "ClusterRole" else "own" if ns == own_ns else ns
    return {
        (who, where, group, res, verb, names.get(name, name))
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for res in rule["resources"]
        for verb in rule["verbs"]
        for name in rule.get("resourceNames", [""])
    }


def test_chart_rbac_grants_exactly_what_deploy_rbac_grants(helm: Helm) -> None:
    """The chart's ServiceAccounts get the rules of deploy/rbac, no more, no fewer.

    tests/contract/test_kube_rbac.py proves on the apiserver that deploy/rbac allows every
    call the coordinator and the agent make and that each of its rules is used; this ties the
    chart to it: same verbs, resources, names and namespaces (the coordinator's node Events
    Role in the node event namespace, bound to the coordinator), nothing for any other account.
    """
    from slonkd.adapters.kube.events import EventSettings

    objs = render(helm)
    wanted: set[Grant] = set()
    for who, files in (
        ("agent", ["agent"]),
        ("coordinator", ["coordinator", "coordinator-node-events"]),
    ):
        for file in files:
            for role in yaml.safe_load_all((RBAC_DIR / f"{file}.yaml").read_text()):
                wanted |= _grants(role, who, "default-ns", RBAC_NAMES)
    got: set[Grant] = set()
    for binding in kinds(objs, "RoleBinding") + kinds(objs, "ClusterRoleBinding"):
        if "helm.sh/hook" in binding["metadata"].get("annotations", {}):
            continue  # the secrets Job's own account (tests/unit/test_chart_secrets.py)
        ref = binding["roleRef"]
        role = one(objs, ref["kind"], ref["name"])
        where = binding["metadata"].get("namespace", "hpc")
        assert role["metadata"].get("namespace", "hpc") == where, binding["metadata"]["name"]
        for subject in binding["subjects"]:
            assert (subject["kind"], subject["namespace"]) == ("ServiceAccount", "hpc")
            who = subject["name"].removeprefix("rel-")
            got |= _grants(role, who, "hpc", {})
    assert got == wanted, f"chart only: {got - wanted}; deploy/rbac only: {wanted - got}"
    (node_events,) = [
        r for r in kinds(objs, "Role") if r["metadata"].get("namespace", "hpc") != "hpc"
    ]
    assert node_events["metadata"]["namespace"] == EventSettings().node_event_namespace
    assert node_events["metadata"]["name"].startswith("hpc-rel-")  # one per release


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


def test_a_checkpoint_signal_reaches_the_prestop_hook(helm: Helm) -> None:
    """workers.prestop.checkpoint: signal and window go to ``slonkd prestop``; off by default."""
    objs = render(
        helm,
        set_json=('workers.prestop.checkpoint={"signal":"B:USR1","windowSeconds":120}',),
    )
    command = _slurmd_prestop(objs)
    assert command[command.index("--checkpoint-signal") + 1] == "B:USR1"
    assert command[command.index("--checkpoint-window") + 1] == "120"
    assert "--checkpoint-signal" not in _slurmd_prestop(render(helm))


def test_a_checkpoint_signal_makes_rollouts_leave_the_requeue_to_the_prestop_hook(
    helm: Helm, tmp_path: Path
) -> None:
    """With a checkpoint signal the coordinator's rollout lets the hook signal, then requeue."""
    from slonkd.cli.coordinator import load_settings

    def rollout(objs: list[Obj]) -> Any:
        config = json.loads(one(objs, "ConfigMap", "rel-coordinator")["data"]["config.json"])[
            "coordinator"
        ]
        (tmp_path / "config.json").write_text(json.dumps({"coordinator": config}))
        env = {"POD_NAMESPACE": "hpc", "SLONKD_CONFIG": str(tmp_path / "config.json")}
        return load_settings(env).rollout

    on = render(
        helm, set_json=('workers.prestop.checkpoint={"signal":"B:USR1","windowSeconds":60}',)
    )
    assert rollout(on).requeue_in_prestop is True
    assert rollout(render(helm)).requeue_in_prestop is False
    pool_only = render(
        helm,
        set_json=(TWO_POOLS.replace('{"windowSeconds":600}', '{"signal":"B:USR1"}'),),
    )
    assert rollout(pool_only).requeue_in_prestop is True  # one pool's signal is enough
    all_off = render(
        helm,
        set_json=(
            'workers.prestop.checkpoint={"signal":"B:USR1","windowSeconds":60}',
            'pools=[{"name":"cpu","replicas":1,"gpus":0,"cpus":32,"realMemoryMB":1000,'
            '"checkpoint":{"signal":""}}]',
        ),
    )
    assert rollout(all_off).requeue_in_prestop is False  # no pool signals: the rollout requeues


def test_the_prestop_hook_reports_to_its_agent_on_loopback(helm: Helm) -> None:
    """With a checkpoint signal, the hook gets the agent's loopback report URL; without, none."""

    def report_url(objs: list[Obj]) -> str | None:
        sts = next(o for o in objs if o["kind"] == "StatefulSet" and "slurmd" in str(o["metadata"]))
        (slurmd,) = [
            c for c in sts["spec"]["template"]["spec"]["containers"] if c["name"] == "slurmd"
        ]
        command = [str(a) for a in slurmd["lifecycle"]["preStop"]["exec"]["command"]]
        return _flag(command, "--report-url") if "--report-url" in command else None

    objs = render(
        helm,
        set_json=(
            'workers.prestop.checkpoint={"signal":"B:USR1","windowSeconds":120}',
            "agent.metricsPort=9555",
        ),
    )
    assert report_url(objs) == "http://127.0.0.1:9555/v1/prestop/requeued"
    assert report_url(render(helm)) is None


TWO_POOLS = (
    'pools=[{"name":"a100","replicas":1,"gpus":8,"cpus":32,"realMemoryMB":1000,'
    '"terminationGracePeriodSeconds":900,"checkpoint":{"windowSeconds":600}},'
    '{"name":"cpu","replicas":1,"gpus":0,"cpus":32,"realMemoryMB":1000}]'
)


def _pool_prestop(objs: list[Obj], pool: str) -> list[str]:
    sts = one(objs, "StatefulSet", f"rel-{pool}")
    (slurmd,) = [c for c in sts["spec"]["template"]["spec"]["containers"] if c["name"] == "slurmd"]
    return [str(a) for a in slurmd["lifecycle"]["preStop"]["exec"]["command"]]


def _flag(command: list[str], flag: str) -> str | None:
    return command[command.index(flag) + 1] if flag in command else None


def test_a_pools_own_checkpoint_window_reaches_that_pools_hook_and_no_other(helm: Helm) -> None:
    """pools[].checkpoint overrides workers.prestop.checkpoint key by key, for that pool alone.

    A pool (one SLURM partition) with long checkpoints gets its own window and the
    release-wide signal; the other pool keeps the release-wide window.
    """
    objs = render(
        helm,
        set_json=(
            'workers.prestop.checkpoint={"signal":"B:USR1","windowSeconds":60}',
            TWO_POOLS,
        ),
    )
    a100, cpu = _pool_prestop(objs, "a100"), _pool_prestop(objs, "cpu")
    assert (_flag(a100, "--checkpoint-signal"), _flag(a100, "--checkpoint-window")) == (
        "B:USR1",
        "600",
    )
    assert (_flag(cpu, "--checkpoint-signal"), _flag(cpu, "--checkpoint-window")) == (
        "B:USR1",
        "60",
    )


def test_a_pool_may_turn_the_checkpoint_off_or_on_for_itself(helm: Helm) -> None:
    """An empty pool signal turns the release's checkpoint off there; a pool signal turns it on.

    A pool without a checkpoint gets neither the flags nor the agent's report URL.
    """

    def report_url(objs: list[Obj], pool: str) -> str | None:
        sts = one(objs, "StatefulSet", f"rel-{pool}")
        (slurmd,) = [
            c for c in sts["spec"]["template"]["spec"]["containers"] if c["name"] == "slurmd"
        ]
        command = [str(a) for a in slurmd["lifecycle"]["preStop"]["exec"]["command"]]
        return _flag(command, "--report-url") if "--report-url" in command else None

    off_here = render(
        helm,
        set_json=(
            'workers.prestop.checkpoint={"signal":"B:USR1","windowSeconds":60}',
            TWO_POOLS.replace('{"windowSeconds":600}', '{"signal":""}'),
        ),
    )
    assert "--checkpoint-signal" not in _pool_prestop(off_here, "a100")
    assert report_url(off_here, "a100") is None
    assert _flag(_pool_prestop(off_here, "cpu"), "--checkpoint-signal") == "B:USR1"
    assert report_url(off_here, "cpu") is not None

    on_here = render(
        helm,
        set_json=(
            TWO_POOLS.replace('{"windowSeconds":600}', '{"signal":"B:USR2","windowSeconds":300}'),
        ),
    )
    a100 = _pool_prestop(on_here, "a100")
    assert (_flag(a100, "--checkpoint-signal"), _flag(a100, "--checkpoint-window")) == (
        "B:USR2",
        "300",
    )
    assert report_url(on_here, "a100") is not None
    assert "--checkpoint-signal" not in _pool_prestop(on_here, "cpu")
    assert report_url(on_here, "cpu") is None


def _slurmd_prestop(objs: list[Obj]) -> list[str]:
    sts = next(o for o in objs if o["kind"] == "StatefulSet" and "slurmd" in str(o["metadata"]))
    (slurmd,) = [c for c in sts["spec"]["template"]["spec"]["containers"] if c["name"] == "slurmd"]
    return [str(a) for a in slurmd["lifecycle"]["preStop"]["exec"]["command"]]


BREAKING = {
    "no pools key": (["pools=null"], "missing property 'pools'"),
    "empty pools": (["pools=[]"], "/pools': minItems"),
    "grace not above margin": (
        ['workers={"terminationGracePeriodSeconds":30,"prestop":{"marginSeconds":30}}'],
        "terminationGracePeriodSeconds (30) must be longer than workers.prestop.marginSeconds (30)",
    ),
    "grace shorter than checkpoint window plus margin": (
        [
            'workers={"terminationGracePeriodSeconds":60,"prestop":{"marginSeconds":30,'
            '"checkpoint":{"signal":"B:USR1","windowSeconds":30}}}'
        ],
        "must be longer than workers.prestop.checkpoint.windowSeconds (30) plus",
    ),
    "pool grace shorter than its own checkpoint window plus margin": (
        [
            'workers={"terminationGracePeriodSeconds":600,"prestop":{"marginSeconds":30,'
            '"checkpoint":{"signal":"B:USR1","windowSeconds":60}}}',
            TWO_POOLS.replace('"windowSeconds":600', '"windowSeconds":870'),
        ],
        "pools[a100]: terminationGracePeriodSeconds (900) must be longer than"
        " pools[a100].checkpoint.windowSeconds (870) plus workers.prestop.marginSeconds (30)",
    ),
    "pool grace shorter than the release's checkpoint window plus margin": (
        [
            'workers={"terminationGracePeriodSeconds":600,"prestop":{"marginSeconds":30,'
            '"checkpoint":{"windowSeconds":60}}}',
            TWO_POOLS.replace(
                '900,"checkpoint":{"windowSeconds":600}', '80,"checkpoint":{"signal":"B:USR2"}'
            ),
        ],
        "pools[a100]: terminationGracePeriodSeconds (80) must be longer than"
        " workers.prestop.checkpoint.windowSeconds (60) plus workers.prestop.marginSeconds (30)",
    ),
    "pool checkpoint signal that would kill": (
        [TWO_POOLS.replace('{"windowSeconds":600}', '{"signal":"B:KILL"}')],
        "/pools/0/checkpoint/signal",
    ),
    "checkpoint signal that would kill": (
        ['workers={"prestop":{"marginSeconds":30,"checkpoint":{"signal":"B:KILL"}}}'],
        "/workers/prestop/checkpoint/signal",
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
    "health key the agent does not know": (
        ['agent={"health":{"checks":{"gpus":8}}}'],
        "at '/agent/health/checks': additional properties 'gpus' not allowed",
    ),
    "pool health key out of range": (
        [
            'pools=[{"name":"a","replicas":1,"gpus":1,"cpus":1,"realMemoryMB":1,'
            '"health":{"checks":{"nvlink_links":99}}}]'
        ],
        "at '/pools/0/health/checks/nvlink_links': maximum: got 99, want 64",
    ),
    "dcgm host the agent would refuse": (
        ['agent={"health":{"checks":{"dcgm_host":"unix://run/x"}}}'],
        "at '/agent/health/checks/dcgm_host'",
    ),
    "hysteresis fail_n above window_m": (
        ['agent={"health":{"hysteresis":{"fail_n":6}}}'],
        "pools[gpu]: health hysteresis fail_n (6) must not exceed window_m (5)",
    ),
    "unknown topology plugin": (
        ['topology={"plugin":"fat-tree"}'],
        "at '/topology/plugin': value must be one of 'none', 'tree', 'block'",
    ),
    "TopologyPlugin through slurm.config": (
        [
            'slurm={"slurmctldPort":6817,"slurmdPort":6818,"config":{"TopologyPlugin":"topology/tree"}}'
        ],
        "set the topology plugin with topology.plugin (none, tree or block)",
    ),
    "budget percent above 100": (
        ['coordinator={"budget":{"maxOutPercent":150}}'],
        "at '/coordinator/budget/maxOutPercent': maximum: got 150, want 100",
    ),
    "lease too short for client-go timing": (
        ['coordinator={"leaseDurationSeconds":2}'],
        "at '/coordinator/leaseDurationSeconds': minimum: got 2, want 5",
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


# -- wiring of the agent's and the coordinator's settings -----------------------------------

FIELD_VALUES = {
    "metadata.name": "rel-h100-0",
    "metadata.namespace": "hpc",
    "metadata.uid": "0d7e1b2c-9f1a-4c3b-8e2d-5a6b7c8d9e0f",
    "spec.nodeName": "gpu-node-a",
}


TLS_DIR = "/etc/slonk/tls/"
"""Where the pods mount the TLS Secret (the chart's slonk.tlsDir)."""


def _tls_secret_files(config_dir: Path) -> Path:
    """A TLS Secret as the secrets Job makes it (tls.enabled, the default), in ``config_dir``."""
    from datetime import UTC, datetime

    from slonkd.core.tls_material import make_tls_data

    where = config_dir / "tls"
    if not where.exists():
        where.mkdir()
        made = make_tls_data(["rel-mosquitto"], 1, now=datetime.now(UTC), label="rel-tls")
        for key, data in made.items():
            (where / key).write_bytes(data)
    return where


def _container_env(container: Obj, config_dir: Path) -> dict[str, str]:
    """The environment the kubelet would give ``container``; mounted files under ``config_dir``.

    The TLS Secret's files (``ca.crt``, ``tls.crt``, ``tls.key``) are real ones made there.
    """
    env: dict[str, str] = {}
    for item in container["env"]:
        if "value" in item:
            env[item["name"]] = str(item["value"])
        elif "fieldRef" in item["valueFrom"]:
            env[item["name"]] = FIELD_VALUES[item["valueFrom"]["fieldRef"]["fieldPath"]]
        else:  # secretKeyRef: a made-up secret value
            env[item["name"]] = f"secret-{item['valueFrom']['secretKeyRef']['key']}"
    if "SLONKD_CONFIG" in env:
        env["SLONKD_CONFIG"] = str(config_dir / Path(env["SLONKD_CONFIG"]).name)
    for name, value in env.items():
        if value.startswith(TLS_DIR):
            env[name] = str(_tls_secret_files(config_dir) / value.removeprefix(TLS_DIR))
    return env


def _mounted_config(pod: Obj, container: Obj, objs: list[Obj], tmp_path: Path) -> dict[str, str]:
    """Write the ConfigMap mounted at dirname($SLONKD_CONFIG) to ``tmp_path``; the env."""
    path = Path(next(e["value"] for e in container["env"] if e["name"] == "SLONKD_CONFIG"))
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == str(path.parent)]
    assert mount["readOnly"] is True
    volume = {v["name"]: v for v in pod["volumes"]}[mount["name"]]
    cm = one(objs, "ConfigMap", volume["configMap"]["name"])
    for key, text in cm["data"].items():
        (tmp_path / key).write_text(text)
    assert (tmp_path / path.name).exists(), f"{path.name} not in ConfigMap {cm['metadata']['name']}"
    return _container_env(container, tmp_path)


def test_schema_health_keys_are_the_agents_fields_with_the_same_types() -> None:
    """values.schema.json's health checks: each a HealthSettings field, typed as the agent does.

    The agent's own schema is generated from its settings classes (``slonkd config schema
    agent``); the chart's is stricter (patterns, ranges) and may offer fewer keys, never one
    the agent would refuse (exit 2) nor a type it would.
    """
    from slonkd.cli.config_cmd import role_schema

    schema = json.loads((CHART_DIR / "values.schema.json").read_text())
    checks = schema["definitions"]["healthChecks"]
    assert checks["additionalProperties"] is False
    agent_health = role_schema("agent")["properties"]["health"]["anyOf"][0]["properties"]
    assert set(checks["properties"]) <= set(agent_health)

    def json_type(prop: dict[str, Any]) -> str:
        inner = prop["anyOf"][0] if "anyOf" in prop else prop
        return str(inner.get("type"))

    for key, prop in checks["properties"].items():
        assert json_type(prop) == json_type(agent_health[key]), key
    hysteresis = schema["definitions"]["hysteresis"]["properties"]
    assert set(hysteresis) == set(role_schema("agent")["properties"]["hysteresis"]["properties"])


POOL_HEALTH = (
    'pools=[{"name":"h100","replicas":2,"gpus":8,"cpus":96,"realMemoryMB":1000,'
    '"health":{"checks":{"nvlink_links":18,"fabric_required":true,'
    '"nvlink_fail_growth":{"replay":50},"peers":["10.0.0.1"]},"hysteresis":{"clear_k":5}}},'
    '{"name":"cpu","replicas":1,"gpus":0,"cpus":8,"realMemoryMB":1000}]'
)
CHART_HEALTH = (
    'agent={"health":{"hostSysfs":true,"capabilities":["NET_RAW"],'
    '"dcgmSocketDir":"/run/nvidia-dcgm",'
    '"checks":{"dcgm_host":"unix:///run/nvidia-dcgm/dcgm.sock","xid_lookback_s":120,'
    '"nvlink_fail_growth":{"crc":9}}}}'
)


def test_agent_settings_render_per_pool_and_load_in_the_real_agent(
    helm: Helm, tmp_path: Path
) -> None:
    """Each pool's agent.json (chart defaults < pool overrides) loads in slonkd's agent loader."""
    from slonkd.cli.agent import load_settings

    objs = render(helm, MULTI_POOL, set_json=(POOL_HEALTH, CHART_HEALTH))
    loaded = {}
    for pool in ("h100", "cpu"):
        pod = _pod(one(objs, "StatefulSet", f"rel-{pool}"))
        (agent,) = pod["initContainers"]
        where = tmp_path / pool
        where.mkdir()
        env = _mounted_config(pod, agent, objs, where)
        notes: list[str] = []
        loaded[pool] = load_settings(env, notes)
        assert notes == []  # nothing the chart renders is deprecated
        raw = json.loads((where / "agent.json").read_text())
        assert set(raw) == {"agent"}  # the agent's section of the configuration tree
        assert set(raw["agent"]) <= {"cluster", "health", "hysteresis", "metrics_port"}
    h100, cpu = loaded["h100"], loaded["cpu"]
    assert h100.health is not None
    assert cpu.health is not None
    assert (h100.health.expected_gpus, cpu.health.expected_gpus) == (8, 0)
    assert h100.health.nvlink_links == 18
    assert cpu.health.nvlink_links == 0
    assert h100.health.fabric_required is True
    assert cpu.health.fabric_required is False
    # a pool's table replaces the chart's table whole; the chart's applies elsewhere
    assert h100.health.nvlink_fail_growth == {"replay": 50}
    assert cpu.health.nvlink_fail_growth == {"crc": 9}
    assert tuple(h100.health.peers) == ("10.0.0.1",)
    assert h100.health.dcgm_host == "unix:///run/nvidia-dcgm/dcgm.sock"
    assert h100.health.xid_lookback_s == 120
    assert h100.health.slurmd_port == 6818
    assert tuple(h100.health.mounts) == ("/home",)  # the NFS home of multi-pool-values
    assert h100.health.sysfs_root == "/host/sys"
    assert (h100.hysteresis.fail_n, h100.hysteresis.window_m, h100.hysteresis.clear_k) == (3, 5, 5)
    assert cpu.hysteresis.clear_k == 3
    assert h100.cluster == "multi"
    assert (h100.slurm_node, h100.pod_name, h100.kube_node) == ("rel-h100-0",) * 2 + ("gpu-node-a",)
    # MQTT: its own credentials from the coordinator's API (the status API's port), both over
    # TLS by default (tls.enabled)
    assert h100.bus is not None
    assert (h100.bus.host, h100.bus.port) == ("rel-mosquitto.hpc.svc.cluster.local", 8883)
    assert h100.bootstrap is not None
    assert h100.bootstrap.url == "https://rel-coordinator.hpc.svc.cluster.local:8081/v1/credentials"
    assert h100.bootstrap.token_file == "/var/run/secrets/slonk.dev/token/token"
    assert h100.metrics_port == 9464


def test_agent_pod_grants_what_docs_health_access_lists(helm: Helm) -> None:
    """GPUs seen (not requested), /dev/kmsg, host /sys, DCGM socket, home, caps, no dead probe."""
    objs = render(helm, MULTI_POOL, set_json=(CHART_HEALTH,))
    sts = one(objs, "StatefulSet", "rel-h100")
    pod = _pod(sts)
    (agent,) = pod["initContainers"]
    env = {e["name"]: e.get("value") for e in agent["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    assert "nvidia.com/gpu" not in str(agent.get("resources", {}))
    mounts = {m["name"]: m for m in agent["volumeMounts"]}
    for name, path in (
        ("kmsg", "/dev/kmsg"),
        ("host-sys", "/host/sys"),
        ("dcgm-socket", "/run/nvidia-dcgm"),
        ("home", "/home"),
        ("agent-config", "/etc/slonkd"),
    ):
        assert mounts[name]["mountPath"] == path
        assert mounts[name]["readOnly"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["host-sys"]["hostPath"] == {"path": "/sys", "type": "Directory"}
    assert volumes["agent-config"]["configMap"]["name"] == "rel-h100-agent"
    caps = agent["securityContext"]["capabilities"]
    assert caps == {"drop": ["ALL"], "add": ["NET_RAW"]}
    # the agent's own /healthz; no readiness probe (a sidecar's would gate the pod's Ready)
    assert agent["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "agent-metrics"}
    assert "readinessProbe" not in agent
    # a settings change rolls the pool (OnDelete: the coordinator replaces the pods)
    ann = sts["spec"]["template"]["metadata"]["annotations"]
    changed = render(helm, MULTI_POOL, set_json=('agent={"health":{"checks":{"nvlink_links":4}}}',))
    ann2 = one(changed, "StatefulSet", "rel-h100")["spec"]["template"]["metadata"]["annotations"]
    assert ann["checksum/agent-config"] != ann2["checksum/agent-config"]
    (plain,) = _pod(one(render(helm), "StatefulSet", "rel-gpu"))["initContainers"]
    assert "add" not in plain["securityContext"]["capabilities"]


def _role_names(objs: list[Obj], role: str, resource: str) -> set[str]:
    return {
        n
        for r in one(objs, "Role", role)["rules"]
        if resource in r["resources"]
        for n in r.get("resourceNames", [])
    }


def test_coordinator_settings_match_rbac_service_and_volumes_and_load(
    helm: Helm, tmp_path: Path
) -> None:
    """config.json loads in the coordinator's loader; its names are the ones RBAC grants."""
    from slonkd.cli.coordinator import load_settings

    objs = render(
        helm,
        set_json=(
            'coordinator={"apiPort":9000,"budget":{"maxOut":4,"maxOutPercent":25,'
            '"massPercent":30},"dryRun":true,'
            '"audit":{"existingClaim":"audit-rwx","maxBytes":1048576,"keep":5}}',
        ),
    )
    deploy = one(objs, "Deployment", "rel-coordinator")
    pod = dict(deploy["spec"]["template"]["spec"])
    (coord,) = pod["containers"]
    env = _mounted_config(pod, coord, objs, tmp_path)
    notes: list[str] = []
    s = load_settings(env, notes)
    assert notes == []  # nothing the chart renders is deprecated
    assert s.namespace == "hpc"
    assert s.identity == "rel-h100-0"
    assert s.state_name == "rel-coordinator-state"
    assert s.state_name in _role_names(objs, "rel-coordinator", "configmaps")
    assert s.lease_name == "rel-coordinator"
    assert s.lease_name in _role_names(objs, "rel-coordinator", "leases")
    s.lease_settings()  # the elector's settings from these: valid (it raises otherwise)
    assert (s.max_out, s.max_out_percent, s.mass_percent, s.dry_run) == (4, 25, 30, True)
    assert s.cluster == "slonk"
    # the credential issuer (dynsec admin from the Secret) and its own dynsec-made bus client
    assert s.credentials is not None
    assert s.credentials.admin_user == "secret-username"
    assert s.credentials.audiences == ("slonkd",)
    assert s.credentials.service_account == "system:serviceaccount:hpc:rel-agent"
    assert s.bus is not None
    assert s.bus.username == ""
    # the worker pods are what pod_selector selects
    labels = one(objs, "StatefulSet", "rel-gpu")["spec"]["template"]["metadata"]["labels"]
    wanted = dict(kv.split("=") for kv in s.pod_selector.split(","))
    assert wanted.items() <= labels.items()
    # API: container port, probes and Service all on api_port
    assert s.api_port == 9000
    assert s.api_tls is not None  # TLS by default: the made-once Secret's certificate and key
    ports = {p["name"]: p["containerPort"] for p in coord["ports"]}
    assert ports["api"] == 9000
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        assert coord[probe]["httpGet"] == {"path": path, "port": "api", "scheme": "HTTPS"}
    svc = one(objs, "Service", "rel-coordinator")
    assert svc["spec"]["ports"] == [
        {"name": "api", "port": 9000, "targetPort": "api"},
        {"name": "metrics", "port": 9400, "targetPort": "metrics"},  # test_chart_metrics.py
    ]
    assert s.metrics_port == 9400
    assert (
        svc["spec"]["selector"].items() <= deploy["spec"]["template"]["metadata"]["labels"].items()
    )
    (agent,) = _pod(one(objs, "StatefulSet", "rel-gpu"))["initContainers"]
    url = next(e["value"] for e in agent["env"] if e["name"] == "SLONKD_COORDINATOR_URL")
    assert url == "https://rel-coordinator.hpc.svc.cluster.local:9000"
    # audit log on its volume: the claim, one directory per replica
    mounts = {m["name"]: m for m in coord["volumeMounts"]}
    assert Path(s.audit_path).parent == Path(mounts["audit"]["mountPath"])
    assert mounts["audit"]["subPathExpr"] == "$(POD_NAME)"
    assert (s.audit_max_bytes, s.audit_keep) == (1048576, 5)  # rotated, not grown forever
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["audit"]["persistentVolumeClaim"] == {"claimName": "audit-rwx"}
    default = one(render(helm), "Deployment", "rel-coordinator")["spec"]["template"]["spec"]
    assert {v["name"]: v for v in default["volumes"]}["audit"] == {
        "name": "audit",
        "emptyDir": {},
    }
    # SLURM client config and munge for scontrol (reconfigure, drains)
    assert mounts["slurm-config"]["mountPath"] == "/etc/slurm"
    assert env["SLURM_CONF"] == "/etc/slurm/slurm.conf"
    (munged,) = pod["initContainers"]
    assert munged["restartPolicy"] == "Always"
    assert {m["name"] for m in munged["volumeMounts"]} == {"munge-key", "munge-run"}


@pytest.mark.parametrize("plugin", ["tree", "block", "none"])
def test_topology_plugin_reaches_slurm_conf_seed_and_coordinator(
    helm: Helm, tmp_path: Path, plugin: str
) -> None:
    """TopologyPlugin, the seed topology.conf and the coordinator's topology object agree."""
    from slonkd.cli.coordinator import load_settings

    objs = render(
        helm, MULTI_POOL, set_json=(f'topology={{"plugin":"{plugin}","blockSizes":[2,4]}}',)
    )
    data = one(objs, "ConfigMap", "rel-slurm-config")["data"]
    conf = data["slurm.conf"]
    deploy = one(objs, "Deployment", "rel-coordinator")
    pod = dict(deploy["spec"]["template"]["spec"])
    (coord,) = pod["containers"]
    env = _mounted_config(pod, coord, objs, tmp_path)
    topology = load_settings(env).topology
    if plugin == "none":
        assert "TopologyPlugin" not in conf
        assert "topology.conf" not in data
        assert topology is None
        return
    assert f"TopologyPlugin=topology/{plugin}\n" in conf
    seed = data["topology.conf"].splitlines()
    every = "rel-h100-[0-2],rel-a100-[0-1],rel-cpu-0"
    first = "BlockName=b-unlabelled" if plugin == "block" else "SwitchName=sw-unlabelled"
    assert seed[1:] == [f"{first} Nodes={every}"]
    assert topology is not None
    assert topology.spec.plugin == plugin
    assert topology.configmap == "rel-topology"
    assert topology.configmap in _role_names(objs, "rel-coordinator", "configmaps")
    if plugin == "block":
        assert tuple(topology.spec.block_sizes or ()) == (2, 4)
    else:
        assert tuple(topology.spec.tree_keys) == (
            "topology.kubernetes.io/zone",
            "slonk.dev/spine",
            "slonk.dev/leaf",
        )
    # slurmctld's copy, as the coordinator sees it: the same projected volume, where the
    # coordinator's ConfigMap comes after the chart's (its topology.conf wins over the seed)
    mounts = {m["name"]: m["mountPath"] for m in coord["volumeMounts"]}
    assert topology.copy == f"{mounts['slurm-config']}/topology.conf"
    for spec in (
        pod,
        _pod(one(objs, "StatefulSet", "rel-slurmctld")),
        _pod(one(objs, "StatefulSet", "rel-h100")),
    ):
        sources = {v["name"]: v for v in spec["volumes"]}["slurm-config"]["projected"]["sources"]
        assert [s["configMap"]["name"] for s in sources] == ["rel-slurm-config", "rel-topology"]
        assert sources[1]["configMap"]["optional"] is True


def _labels_match(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


@pytest.mark.parametrize("values", [(), (MULTI_POOL,)], ids=["default", "multi-pool"])
def test_the_coordinator_api_takes_ingress_only_from_the_worker_pods(
    helm: Helm, values: tuple[Path, ...]
) -> None:
    """A NetworkPolicy (on by default) admits only worker pods to the API port.

    Its pod selector is the coordinator's pods; its API port's rule names the worker pods of
    every pool (their agents fetch credentials there) and nothing broad (no namespace or
    ipBlock peer, no rule without ``from``); no other pod of the release matches it. The
    other rule is the metrics port's, for the monitoring namespace (test_chart_metrics.py).
    """
    objs = render(helm, *values)
    policy = one(objs, "NetworkPolicy", "rel-coordinator")
    spec = policy["spec"]
    deploy = one(objs, "Deployment", "rel-coordinator")
    coordinator_labels = deploy["spec"]["template"]["metadata"]["labels"]
    assert _labels_match(spec["podSelector"]["matchLabels"], coordinator_labels)
    assert spec["policyTypes"] == ["Ingress"]
    rule, metrics = spec["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 8081}]
    assert metrics["ports"] == [{"protocol": "TCP", "port": 9400}]
    assert all("from" in r for r in spec["ingress"])
    (peer,) = rule["from"]
    assert set(peer) == {"podSelector"}
    allowed = peer["podSelector"]["matchLabels"]
    workloads = [o for o in objs if o["kind"] in ("StatefulSet", "Deployment")]
    admitted = {
        o["metadata"]["name"]
        for o in workloads
        if _labels_match(allowed, o["spec"]["template"]["metadata"]["labels"])
    }
    workers = {
        o["metadata"]["name"]
        for o in kinds(objs, "StatefulSet")
        if o["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component")
        == "slurmd"
    }
    assert workers
    assert admitted == workers


def test_the_network_policy_can_be_switched_off_or_widened(helm: Helm) -> None:
    """``networkPolicy.enabled: false`` renders none; ``extraFrom`` peers are added as given."""
    off = render(helm, set_json=('coordinator.networkPolicy={"enabled":false}',))
    assert kinds(off, "NetworkPolicy") == []
    prometheus = {"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}
    wide = render(
        helm, set_json=(f"coordinator.networkPolicy.extraFrom=[{json.dumps(prometheus)}]",)
    )
    rule, metrics = one(wide, "NetworkPolicy", "rel-coordinator")["spec"]["ingress"]
    assert rule["from"][1:] == [prometheus]
    assert len(metrics["from"]) == 1  # extraFrom widens the API port's rule only


def test_credential_limits_from_values_reach_the_coordinators_settings(
    helm: Helm, tmp_path: Path
) -> None:
    """``coordinator.credentials`` values load, through the pod's env, into the issuer's limits."""
    from tests.unit.test_bus_sessions import credential_limits

    limits = {
        "sourceRate": 0.2, "sourceBurst": 3, "globalRate": 7, "globalBurst": 30,
        "perPodLimit": 2, "perPodWindowSeconds": 90, "maxConcurrentReviews": 4, "maxBodyBytes": 0,
    }  # fmt: skip
    objs = render(helm, set_json=(f"coordinator.credentials={json.dumps(limits)}",))
    pod = one(objs, "Deployment", "rel-coordinator")["spec"]["template"]["spec"]
    (coord,) = pod["containers"]
    assert credential_limits(_container_env(coord, tmp_path)) == (0.2, 3, 7.0, 30, 2, 90.0, 4, 0)
    bad = helm.template("rel", set_json=('coordinator.credentials={"sourceBurst":0}',), check=False)
    assert bad.returncode != 0
    assert "sourceBurst" in bad.stderr


def test_fleet_metrics_values_reach_the_coordinators_settings(helm: Helm, tmp_path: Path) -> None:
    """``coordinator.fleetMetrics`` turns the exporter off or sets sdiag's period; 0.5 s fails."""
    from slonkd.cli.coordinator import load_settings

    def settings(values: str) -> tuple[bool, float]:
        objs = render(helm, set_json=(f"coordinator.fleetMetrics={values}",))
        pod = dict(one(objs, "Deployment", "rel-coordinator")["spec"]["template"]["spec"])
        (coord,) = pod["containers"]
        s = load_settings(_mounted_config(pod, coord, objs, tmp_path))
        return s.fleet_metrics, s.sdiag_s

    assert settings("{}") == (True, 60.0)
    assert settings('{"enabled":false,"sdiagSeconds":0}') == (False, 0.0)
    assert settings('{"sdiagSeconds":15}') == (True, 15.0)
    bad = helm.template(
        "rel", set_json=('coordinator.fleetMetrics={"sdiagSeconds":0.5}',), check=False
    )
    assert bad.returncode != 0
    assert "sdiagSeconds" in bad.stderr


def test_services_agents_dial_are_headless_and_the_api_host_can_be_named(helm: Helm) -> None:
    """Every Service a pod dials is headless; ``kubernetesService`` names the API for its clients.

    Coordinator and mosquitto resolve to pod IPs (no ClusterIP, so no kube-proxy needed);
    KUBERNETES_SERVICE_HOST/PORT are set in the coordinator and the agent only, and only when
    asked; the local-images values never pull.
    """
    objs = render(helm)
    for name in ("rel-coordinator", "rel-mosquitto", "rel-slurmctld", "rel-slurmd"):
        assert one(objs, "Service", name)["spec"]["clusterIP"] == "None", name

    def api_env(objs: list[Obj]) -> dict[str, dict[str, str]]:
        out = {}
        for kind, name in (("Deployment", "rel-coordinator"), ("StatefulSet", "rel-gpu")):
            pod = _pod(one(objs, kind, name))
            for c in pod.get("initContainers", []) + pod["containers"]:
                env = {e["name"]: e.get("value", "") for e in c.get("env", [])}
                out[c["name"]] = {k: v for k, v in env.items() if k.startswith("KUBERNETES_")}
        return out

    assert all(not env for env in api_env(objs).values())  # the kubelet's variables
    named = api_env(
        render(helm, set_json=('kubernetesService={"host":"kubernetes.default.svc","port":6443}',))
    )
    wanted = {
        "KUBERNETES_SERVICE_HOST": "kubernetes.default.svc",
        "KUBERNETES_SERVICE_PORT": "6443",
    }
    assert named == {"coordinator": wanted, "slonkd-agent": wanted, "munged": {}, "slurmd": {}}
    objs = render(helm, LOCAL_IMAGES)
    pods = [_pod(o) for o in objs if o["kind"] in ("StatefulSet", "Deployment")]
    policies = {
        c["imagePullPolicy"] for p in pods for c in p.get("initContainers", []) + p["containers"]
    }
    assert policies == {"Never"}


def test_the_agent_sidecar_requests_cpu_so_busy_jobs_cannot_starve_its_drain(helm: Helm) -> None:
    """By default the agent requests CPU and memory, with no limits.

    A Burstable container's cgroup weight follows its request, so jobs saturating the node
    leave it a share for a drain; without a request its weight is the minimum (cpu.shares 2,
    found with bench/real_node.py on the real node). A site can still set its own.
    """
    pod = _pod(one(render(helm), "StatefulSet", "rel-gpu"))
    (agent,) = pod["initContainers"]
    assert agent["resources"]["requests"] == {"cpu": "100m", "memory": "128Mi"}
    assert "limits" not in agent["resources"]
    mine = '{"requests":{"cpu":"250m","memory":"256Mi"},"limits":{"memory":"512Mi"}}'
    custom = _pod(
        one(render(helm, set_json=(f"agent.resources={mine}",)), "StatefulSet", "rel-gpu")
    )
    assert custom["initContainers"][0]["resources"]["limits"] == {"memory": "512Mi"}


def test_slurm_conf_names_a_reboot_program_so_the_reboot_steps_slurm_half_succeeds(
    helm: Helm,
) -> None:
    """The ladder's reboot step asks ``scontrol reboot ASAP``: slurmctld refuses it without one.

    slurmd runs in the worker pod and cannot reboot its host; the site's tooling reboots the
    machine for the ``slonk.dev/reboot-requested`` taint. So the chart's RebootProgram does
    nothing (``/bin/true``) and only lets slurmctld take the request: the node is held
    REBOOT_REQUESTED until slurmd registers from the rebooted host, then SLURM returns it.
    ResumeTimeout is how long SLURM waits for that: the site's reboot time, not SLURM's 60 s
    default (past it the node goes DOWN "reboot timed out"). Issue 37 item 9.
    """
    conf = slurm_conf(render(helm))
    assert "RebootProgram=/bin/true\n" in conf
    assert "ResumeTimeout=3600\n" in conf
    site = slurm_conf(
        render(helm, set_json=('slurm.reboot={"program":"/opt/site/reboot","timeoutSeconds":900}',))
    )
    assert "RebootProgram=/opt/site/reboot\n" in site
    assert "ResumeTimeout=900\n" in site
    off = slurm_conf(render(helm, set_json=('slurm.reboot={"program":""}',)))
    assert "RebootProgram" not in off  # the step is the taint alone: its SLURM half fails
    assert "ResumeTimeout=3600\n" in off


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ('{"timeoutSeconds":70000}', "/slurm/reboot/timeoutSeconds': maximum: got 70,000"),
        ('{"timeoutSeconds":0}', "/slurm/reboot/timeoutSeconds': minimum: got 0, want 60"),
        ('{"program":"true"}', "/slurm/reboot/program'"),
    ],
)
def test_a_reboot_setting_slurm_cannot_use_is_refused(helm: Helm, value: str, why: str) -> None:
    """ResumeTimeout is 16 bits in slurmctld (at most 65535 s); the program an absolute path."""
    proc = helm.template("rel", set_json=(f"slurm.reboot={value}",), check=False)
    assert proc.returncode != 0
    assert why in proc.stderr, proc.stderr


def test_each_pools_mode_reaches_the_coordinators_settings(helm: Helm, tmp_path: Path) -> None:
    """``pools[].mode`` is the coordinator's ``pool_modes`` (absent: full); a bad one is refused."""
    from slonkd.cli.coordinator import load_settings
    from slonkd.core.modes import Mode

    pools = (
        'pools=[{"name":"gpu","replicas":1,"gpus":8,"cpus":32,"realMemoryMB":1000,'
        '"mode":"observe"},{"name":"cpu","replicas":1,"gpus":0,"cpus":8,"realMemoryMB":1000}]'
    )
    objs = render(helm, set_json=(pools,))
    pod = dict(one(objs, "Deployment", "rel-coordinator")["spec"]["template"]["spec"])
    (coord,) = pod["containers"]
    s = load_settings(_mounted_config(pod, coord, objs, tmp_path), [])
    assert s.pool_modes == {"gpu": Mode.OBSERVE, "cpu": Mode.FULL}
    bad = helm.template(
        "rel", namespace="hpc", set_json=(pools.replace("observe", "watch"),), check=False
    )
    assert bad.returncode != 0
    assert "mode" in bad.stderr
