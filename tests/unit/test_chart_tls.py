"""The chart's ``tls.enabled``: TLS for the bus and the coordinator's API, wired end to end.

Renders the chart (pinned helm, no cluster) with and without the option and reads what
each pod gets: mosquitto's listener and certificate, the coordinator's HTTPS API, probes
and broker CA, every agent's https URL and CA (and no private key). The rendered
environments are then loaded by slonkd's own settings code with the mounted files
stood in by real ones, so a name the chart and the code spell differently fails here.

TLS is on by default, its Secret ``<release>-tls`` made once by the secrets Job for every
name the clients dial, unless ``tls.secretName`` (the site's Secret) or ``tls.issuer`` (a
cert-manager Certificate) says where it comes from; plain only with ``tls.enabled: false``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from slonkd_sandbox.chart.helm import CHART_DIR, Helm
from slonkd_sandbox.tls import make_ca, make_server_cert
from tests.unit.test_chart_render import _container_env, helm, kinds, one, render
from tests.unit.test_chart_secrets import made_once

__all__ = ["helm"]  # the module-scoped fixture, shared with test_chart_render

Obj = dict[str, Any]
SECRET = "slonk-tls"
TLS = (f'tls={{"enabled":true,"secretName":"{SECRET}"}}',)
COORD_DNS = "rel-coordinator.hpc.svc.cluster.local"
MQTT_DNS = "rel-mosquitto.hpc.svc.cluster.local"
PLAIN = ('tls={"enabled":false}',)
ISSUER = ('tls={"issuer":{"name":"site-ca","kind":"ClusterIssuer"}}',)
DNS_NAMES = [
    *("rel-mosquitto", "rel-mosquitto.hpc", "rel-mosquitto.hpc.svc", MQTT_DNS),
    *("rel-coordinator", "rel-coordinator.hpc", "rel-coordinator.hpc.svc", COORD_DNS),
]
"""The names of the TLS Secret's certificate: mosquitto's and the API's, short to full."""


def _pod(objs: list[Obj], kind: str, name: str) -> Obj:
    spec: Obj = one(objs, kind, name)["spec"]["template"]["spec"]
    return spec


def _env(container: Obj) -> dict[str, str]:
    return {e["name"]: str(e.get("value", "")) for e in container.get("env", [])}


def _has_agent(sts: Obj) -> bool:
    inits = sts["spec"]["template"]["spec"].get("initContainers", [])
    return any(c["name"] == "slonkd-agent" for c in inits)


def _agent(pod: Obj) -> Obj:
    (agent,) = [c for c in pod["initContainers"] if c["name"] == "slonkd-agent"]
    found: Obj = agent
    return found


def _tls_volume(pod: Obj, secret: str = SECRET) -> Obj:
    """The pod's one volume from the TLS Secret."""
    found = [v for v in pod["volumes"] if v.get("secret", {}).get("secretName") == secret]
    assert len(found) == 1, pod["volumes"]
    volume: Obj = found[0]
    return volume


def _file(pod: Obj, container: Obj, path: str, secret: str = SECRET) -> str:
    """The Secret key mounted at ``path`` in ``container`` (fails if none is)."""
    volume = _tls_volume(pod, secret)
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    assert mount["readOnly"] is True
    assert path.startswith(mount["mountPath"].rstrip("/") + "/"), (path, mount)
    key = path[len(mount["mountPath"].rstrip("/")) + 1 :]
    items = {i["path"]: i["key"] for i in volume["secret"].get("items", [])}
    return items.get(key, key) if items else key


def _dialled(objs: list[Obj]) -> set[str]:
    """Every host name a rendered container reaches mosquitto or the API by, TLS-checked."""
    names = set()
    for obj in kinds(objs, "Deployment") + kinds(objs, "StatefulSet"):
        pod = obj["spec"]["template"]["spec"]
        for c in pod.get("initContainers", []) + pod["containers"]:
            env = _env(c)
            names |= {
                env[k] for k in ("SLONKD_MQTT_HOST", "SLONKD_COORDINATOR_TLS_NAME") if k in env
            }
            url = env.get("SLONKD_COORDINATOR_URL", "")
            host = re.sub(r"^\w+://|:\d+$", "", url)
            if url and host != "127.0.0.1":  # in the coordinator's pod: checks TLS_NAME
                names.add(host)
    return names


def test_tls_is_on_by_default_with_a_secret_the_job_makes_once(helm: Helm) -> None:
    """Default values: mosquitto on 8883 only, an HTTPS API, agents with the CA; ``rel-tls``.

    The secrets Job's spec has the TLS entry for exactly the names the clients dial (and no
    more than mosquitto's and the API's); no Certificate is rendered, and nothing is drawn
    at render time (two renders are the same bytes: tests/unit/test_chart_secrets.py).
    """
    objs = render(helm)
    conf = one(objs, "ConfigMap", "rel-mosquitto")["data"]["mosquitto.conf"]
    assert re.findall(r"^listener .*$", conf, re.M) == ["listener 8883"]
    assert re.search(r"^certfile ", conf, re.M)
    containers = _pod(objs, "Deployment", "rel-mosquitto")["containers"]
    (broker,) = [c for c in containers if c["name"] == "mosquitto"]
    assert [p["containerPort"] for p in broker["ports"]] == [8883]
    assert sorted(c["name"] for c in containers) == ["mosquitto", "tls-reload"]
    pod = _pod(objs, "Deployment", "rel-coordinator")
    (coord,) = pod["containers"]
    assert _file(pod, coord, _env(coord)["SLONKD_API_TLS_CERT_FILE"], "rel-tls") == "tls.crt"
    assert coord["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    for sts in [s for s in kinds(objs, "StatefulSet") if _has_agent(s)]:
        pod = sts["spec"]["template"]["spec"]
        env = _env(_agent(pod))
        assert env["SLONKD_COORDINATOR_URL"] == f"https://{COORD_DNS}:8081"
        assert "SLONKD_MQTT_TLS_CA_FILE" in env
        assert [i["key"] for i in _tls_volume(pod, "rel-tls")["secret"]["items"]] == ["ca.crt"]
    _tls_volume(_pod(objs, "Deployment", "rel-mosquitto"), "rel-tls")

    made = made_once(objs)
    tls = made["rel-tls"]["tls.crt"]["tls"]
    assert tls == {"dnsNames": DNS_NAMES}
    assert set(made["rel-tls"]) == {"ca.crt", "tls.crt", "tls.key"}
    assert _dialled(objs) <= set(DNS_NAMES)
    assert {"rel-mosquitto", MQTT_DNS, COORD_DNS} <= _dialled(objs)
    assert not kinds(objs, "Certificate")


def test_the_certificates_names_follow_the_namespace_and_cluster_domain(helm: Helm) -> None:
    """Another namespace and clusterDomain: the names the clients dial, and the Job's, move."""
    objs = render(helm, set_json=('clusterDomain="k8s.example"',), ns="batch")
    names = made_once(objs)["rel-tls"]["tls.crt"]["tls"]["dnsNames"]
    assert "rel-mosquitto.batch.svc.k8s.example" in names
    assert "rel-coordinator.batch.svc.k8s.example" in names
    assert _dialled(objs) <= set(names)


def test_an_issuer_gets_a_certificate_and_the_job_makes_no_tls_secret(helm: Helm) -> None:
    """tls.issuer: a cert-manager Certificate writes rel-tls for the same names; the Job not."""
    objs = render(helm, set_json=ISSUER)
    cert = one(objs, "Certificate", "rel-tls")
    assert cert["apiVersion"] == "cert-manager.io/v1"
    assert cert["spec"]["secretName"] == "rel-tls"
    assert cert["spec"]["dnsNames"] == DNS_NAMES
    assert cert["spec"]["issuerRef"] == {
        "name": "site-ca",
        "kind": "ClusterIssuer",
        "group": "cert-manager.io",
    }
    assert "server auth" in cert["spec"]["usages"]
    assert "rel-tls" not in made_once(objs)
    assert set(made_once(objs)) == {"rel-munge", "rel-mosquitto-admin"}
    _tls_volume(_pod(objs, "Deployment", "rel-coordinator"), "rel-tls")


def test_a_secret_name_means_neither_a_certificate_nor_a_made_secret(helm: Helm) -> None:
    """tls.secretName: the pods mount the site's Secret; no Certificate, no TLS entry."""
    objs = render(helm, set_json=TLS)
    assert not kinds(objs, "Certificate")
    assert set(made_once(objs)) == {"rel-munge", "rel-mosquitto-admin"}
    assert not [o for o in objs if o["metadata"]["name"] == "rel-tls"]
    _tls_volume(_pod(objs, "Deployment", "rel-coordinator"))


def test_tls_enabled_false_is_plain(helm: Helm) -> None:
    """``tls.enabled: false``: plain MQTT on 1883 and an http API; no TLS variable or Secret."""
    objs = render(helm, set_json=PLAIN)
    assert "rel-tls" not in made_once(objs)
    assert not kinds(objs, "Certificate")
    conf = one(objs, "ConfigMap", "rel-mosquitto")["data"]["mosquitto.conf"]
    assert re.search(r"^listener 1883$", conf, re.M)
    assert "certfile" not in conf
    text = json.dumps(objs)
    assert "SLONKD_MQTT_TLS_CA_FILE" not in text
    assert "SLONKD_API_TLS" not in text
    assert "HTTPS" not in text
    assert "rel-tls" not in text
    for sts in [s for s in kinds(objs, "StatefulSet") if _has_agent(s)]:
        url = _env(_agent(sts["spec"]["template"]["spec"]))["SLONKD_COORDINATOR_URL"]
        assert url == f"http://{COORD_DNS}:8081"


def test_lint_is_clean_with_tls(helm: Helm) -> None:
    """``helm lint --strict`` passes with the site's Secret, and with a cert-manager issuer."""
    for tls in (TLS[0], ISSUER[0]):
        proc = helm.run("lint", "--strict", str(CHART_DIR), f"--set-json={tls}")
        assert "1 chart(s) linted, 0 chart(s) failed" in proc.stdout


@pytest.mark.parametrize(
    ("tls", "says"),
    [
        ('{"secretName":"x","issuer":{"name":"ca"}}', "tls.issuer.name: set tls.secretName"),
        ('{"enabled":false,"issuer":{"name":"ca"}}', "tls.issuer.name: set with tls.enabled"),
        ('{"issuer":{"name":"ca","kind":"Bogus"}}', "/tls/issuer/kind"),
        ('{"issuer":{"nmae":"ca"}}', "nmae"),
    ],
)
def test_a_bad_tls_combination_is_refused_naming_the_key(helm: Helm, tls: str, says: str) -> None:
    """A Secret and an issuer both, an issuer with TLS off, or a bad issuer: one line, the key."""
    proc = helm.template("rel", namespace="hpc", set_json=(f"tls={tls}",), check=False)
    assert proc.returncode != 0
    assert says in proc.stderr


def test_the_schema_refuses_unknown_tls_keys(helm: Helm) -> None:
    """A typo under ``tls`` (or a non-boolean ``enabled``) fails the schema."""
    for bad in ('tls={"enabled":true,"secretname":"x"}', 'tls={"enabled":"yes"}'):
        proc = helm.template("rel", namespace="hpc", set_json=(bad,), check=False)
        assert proc.returncode != 0, bad
        assert "tls" in proc.stderr


def test_mosquitto_listens_only_with_tls_from_the_secret(helm: Helm) -> None:
    """With TLS mosquitto's one listener is 8883 with the Secret's certificate and key."""
    objs = render(helm, set_json=TLS)
    conf = one(objs, "ConfigMap", "rel-mosquitto")["data"]["mosquitto.conf"]
    assert re.findall(r"^listener .*$", conf, re.M) == ["listener 8883"]
    pod = _pod(objs, "Deployment", "rel-mosquitto")
    (broker,) = [c for c in pod["containers"] if c["name"] == "mosquitto"]
    cert = re.search(r"^certfile (\S+)$", conf, re.M)
    key = re.search(r"^keyfile (\S+)$", conf, re.M)
    assert cert is not None
    assert key is not None
    assert _file(pod, broker, cert.group(1)) == "tls.crt"
    assert _file(pod, broker, key.group(1)) == "tls.key"
    assert [p["containerPort"] for p in broker["ports"]] == [8883]
    (port,) = one(objs, "Service", "rel-mosquitto")["spec"]["ports"]
    assert port["port"] == 8883
    plain = one(render(helm), "Deployment", "rel-mosquitto")["spec"]["template"]["metadata"]
    tls = one(objs, "Deployment", "rel-mosquitto")["spec"]["template"]["metadata"]
    checksum = "checksum/config"  # turning TLS on or off restarts the broker with its config
    assert plain["annotations"][checksum] != tls["annotations"][checksum]


def test_the_coordinator_serves_https_and_trusts_the_ca(helm: Helm, tmp_path: Path) -> None:
    """The coordinator's API gets the certificate and key, its probes HTTPS, its bus the CA.

    Its rendered environment loads through ``slonkd coordinator``'s own settings code (with
    real files where the Secret would be mounted): HTTPS API, TLS to the broker on 8883 for
    the bus and the dynsec admin, and the in-pod operator commands verify the Service name.
    """
    from slonkd.cli.coordinator import load_settings

    objs = render(helm, set_json=(*TLS, 'metrics={"prometheusAnnotations":true}'))
    deployment = one(objs, "Deployment", "rel-coordinator")
    pod = deployment["spec"]["template"]["spec"]
    (coord,) = pod["containers"]
    env = _env(coord)
    assert _file(pod, coord, env["SLONKD_API_TLS_CERT_FILE"]) == "tls.crt"
    assert _file(pod, coord, env["SLONKD_API_TLS_KEY_FILE"]) == "tls.key"
    assert _file(pod, coord, env["SLONKD_MQTT_TLS_CA_FILE"]) == "ca.crt"
    assert _file(pod, coord, env["SLONKD_COORDINATOR_CA"]) == "ca.crt"
    assert env["SLONKD_COORDINATOR_URL"] == "https://127.0.0.1:8081"
    assert env["SLONKD_COORDINATOR_TLS_NAME"] == COORD_DNS
    assert env["SLONKD_MQTT_PORT"] == "8883"
    assert coord["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert coord["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert "prometheus.io/scheme" not in annotations  # its metrics port: plain HTTP
    assert annotations["prometheus.io/port"] == "9400"

    ca = make_ca(tmp_path)
    server = make_server_cert(ca, tmp_path, sans=(f"DNS:{COORD_DNS}", f"DNS:{MQTT_DNS}"))
    real = {"ca.crt": str(ca.cert), "tls.crt": str(server.cert), "tls.key": str(server.key)}
    loaded = _container_env(coord, tmp_path)
    for name in ("SLONKD_API_TLS_CERT_FILE", "SLONKD_API_TLS_KEY_FILE", "SLONKD_MQTT_TLS_CA_FILE"):
        loaded[name] = real[_file(pod, coord, env[name])]
    loaded.pop("SLONKD_CONFIG")
    s = load_settings(loaded)
    assert s.api_tls is not None
    assert (s.api_tls.cert_file, s.api_tls.key_file) == (real["tls.crt"], real["tls.key"])
    assert s.bus is not None
    assert s.credentials is not None
    assert (s.bus.host, s.bus.port, s.bus.ca_file) == ("rel-mosquitto", 8883, real["ca.crt"])
    assert (s.credentials.admin_port, s.credentials.admin_ca_file) == (8883, real["ca.crt"])


@pytest.mark.parametrize("values", [(), ("ci/multi-pool-values.yaml",)], ids=["one", "multi"])
def test_every_agent_uses_https_and_the_ca_and_holds_no_key(
    helm: Helm, tmp_path: Path, values: tuple[str, ...]
) -> None:
    """Each pool's agent fetches credentials over https and reaches the broker over TLS.

    It mounts only the CA (``ca.crt``) of the Secret; no container of a worker pod (slurmd,
    jobs) mounts the private key. The rendered environment loads through the agent's own
    settings code into an https bootstrap and a TLS bus, both with the CA.
    """
    from slonkd.cli.bus_env import agent_bus_settings

    objs = render(helm, *(CHART_DIR / v for v in values), set_json=TLS)
    workers = [s for s in kinds(objs, "StatefulSet") if _has_agent(s)]
    assert len(workers) == (3 if values else 1)
    ca = str(make_ca(tmp_path).cert)
    for sts in workers:
        pod = sts["spec"]["template"]["spec"]
        agent = _agent(pod)
        env = _env(agent)
        assert env["SLONKD_COORDINATOR_URL"] == f"https://{COORD_DNS}:8081"
        assert env["SLONKD_MQTT_PORT"] == "8883"
        assert _file(pod, agent, env["SLONKD_MQTT_TLS_CA_FILE"]) == "ca.crt"
        assert _file(pod, agent, env["SLONKD_MQTT_BOOTSTRAP_CA"]) == "ca.crt"
        volume = _tls_volume(pod)
        assert [i["key"] for i in volume["secret"]["items"]] == ["ca.crt"]
        users = [
            c["name"]
            for c in pod.get("initContainers", []) + pod["containers"]
            if any(m["name"] == volume["name"] for m in c.get("volumeMounts", []))
        ]
        assert users == ["slonkd-agent"]
        loaded = {
            **_container_env(agent, tmp_path),
            "SLONKD_MQTT_TLS_CA_FILE": ca,
            "SLONKD_MQTT_BOOTSTRAP_CA": ca,
        }
        bus, boot = agent_bus_settings(loaded, "slonkd-agent-x")
        assert bus is not None
        assert boot is not None
        assert (bus.host, bus.port, bus.ca_file) == (MQTT_DNS, 8883, ca)
        assert (boot.url, boot.ca_file) == (f"https://{COORD_DNS}:8081/v1/credentials", ca)


def test_notes_tell_the_https_status_command(helm: Helm) -> None:
    """With TLS the install notes show ``https`` URLs and the CA for ``slonkd status``."""
    proc = helm.run(
        "install", "rel", str(CHART_DIR), "--dry-run=client", "--namespace=hpc",
        f"--set-json={TLS[0]}",
    )  # fmt: skip
    notes = proc.stdout.split("NOTES:", 1)[1]
    assert "http://" not in notes
    assert "--url https://127.0.0.1:8081" in notes
    assert "SLONKD_COORDINATOR_CA" in notes
