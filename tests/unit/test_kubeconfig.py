"""The lean kubeconfig / in-cluster loader: what it reads, what it refuses, token rotation."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from slonkd.adapters.kube.kubeconfig import (
    ExecPlugin,
    KubeConfigError,
    TokenSource,
    endpoint_from_kubeconfig,
    in_cluster_endpoint,
    load_kubeconfig,
    ssl_context,
)

PEM = "-----BEGIN CERTIFICATE-----\nnot really\n-----END CERTIFICATE-----\n"
V1 = "client.authentication.k8s.io/v1"


def config(user: dict[str, Any], cluster: dict[str, Any] | None = None) -> dict[str, Any]:
    """A kubeconfig with one context ``c`` of cluster ``k`` and user ``u``."""
    return {
        "clusters": [{"name": "k", "cluster": cluster or {"server": "https://10.0.0.1:6443/"}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "current-context": "c",
    }


def test_token_and_ca_data_of_the_current_context(tmp_path: Path) -> None:
    """Server without its trailing slash, the decoded CA, the token."""
    cluster = {
        "server": "https://10.0.0.1:6443/",
        "certificate-authority-data": base64.b64encode(PEM.encode()).decode(),
        "tls-server-name": "kubernetes.default.svc",
    }
    ep = endpoint_from_kubeconfig(config({"token": "abc"}, cluster), base_dir=tmp_path)
    assert ep.server == "https://10.0.0.1:6443"
    assert ep.ca_data == PEM
    assert ep.tls_server_name == "kubernetes.default.svc"
    assert ep.token == "abc"
    assert ep.cert_file is ep.cert_data is None


def test_relative_paths_are_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    """certificate-authority, client-certificate, client-key and tokenFile resolve like kubectl."""
    cluster = {"server": "https://h:1", "certificate-authority": "pki/ca.crt"}
    user = {"client-certificate": "pki/me.crt", "client-key": "/abs/me.key", "tokenFile": "t"}
    path = tmp_path / "cfg" / "kubeconfig"
    path.parent.mkdir()
    path.write_text(json.dumps(config(user, cluster)))
    ep = load_kubeconfig(path)
    assert ep.ca_file == str(tmp_path / "cfg" / "pki" / "ca.crt")
    assert ep.cert_file == str(tmp_path / "cfg" / "pki" / "me.crt")
    assert ep.key_file == "/abs/me.key"
    assert ep.token_file == str(tmp_path / "cfg" / "t")


def test_yaml_kubeconfig_and_a_named_context(tmp_path: Path) -> None:
    """kubectl writes YAML; a context other than the current one can be chosen."""
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\n"
        "clusters:\n"
        "- name: a\n  cluster: {server: 'https://a:6443'}\n"
        "- name: b\n  cluster: {server: 'https://b:6443', insecure-skip-tls-verify: true}\n"
        "users:\n- name: u\n  user: {token: t}\n"
        "contexts:\n"
        "- name: ca\n  context: {cluster: a, user: u}\n"
        "- name: cb\n  context: {cluster: b, user: u}\n"
        "current-context: ca\n"
    )
    assert load_kubeconfig(path).server == "https://a:6443"
    other = load_kubeconfig(path, context="cb")
    assert other.server == "https://b:6443"
    assert other.insecure is True


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (config({"exec": {"command": "aws"}}), "apiVersion None is not one of"),
        (config({"exec": {"apiVersion": V1}}), "exec: no command"),
        (config({"exec": {"command": "a", "apiVersion": V1, "args": "x"}}), "args is not a list"),
        (config({"exec": {"command": "a", "apiVersion": V1, "env": [{"name": "A"}]}}), "env is"),
        (config({"exec": {"command": "a", "apiVersion": V1}, "token": "t"}), "or an exec plugin"),
        (config({"exec": "aws"}), "exec: not a mapping"),
        (config({"auth-provider": {"name": "gcp"}}), "auth-provider plugins: not supported"),
        (config({"username": "a", "password": "b"}), "basic auth: not supported"),
        (config({"token": "t"}, {"server": "10.0.0.1:6443"}), "is not an http(s) URL"),
        (config({"client-certificate-data": "eA=="}), "needs its key"),
        (config({"client-key-data": "%%%", "client-certificate-data": "%%%"}), "not base64"),
        ({**config({"token": "t"}), "current-context": "nope"}, "no context named 'nope'"),
        ({**config({"token": "t"}), "current-context": ""}, "no current-context"),
        ({**config({"token": "t"}), "clusters": []}, "no cluster named 'k'"),
        (["not", "a", "mapping"], "expected a mapping"),
    ],
)
def test_unusable_kubeconfigs_are_refused_with_the_reason(doc: Any, message: str) -> None:
    """Every unusable kubeconfig is one KubeConfigError that says what is wrong."""
    with pytest.raises(KubeConfigError) as caught:
        endpoint_from_kubeconfig(doc, base_dir=Path("/"), source="kc")
    assert message in str(caught.value)
    assert str(caught.value).startswith("kc")


def test_exec_plugin_section_is_checked_and_its_relative_command_resolved(tmp_path: Path) -> None:
    """A command with a slash is relative to the kubeconfig; a bare name is left for PATH."""
    section = {
        "command": "bin/get-token",
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "args": ["eks", "get-token"],
        "env": [{"name": "AWS_PROFILE", "value": "ops"}],
    }
    ep = endpoint_from_kubeconfig(config({"exec": section}), base_dir=tmp_path)
    assert ep.exec_plugin == ExecPlugin(
        command=str(tmp_path / "bin" / "get-token"),
        args=("eks", "get-token"),
        env=(("AWS_PROFILE", "ops"),),
        api_version="client.authentication.k8s.io/v1beta1",
    )
    assert ep.token is ep.token_file is None
    bare = config({"exec": {"command": "aws", "apiVersion": V1}})
    assert endpoint_from_kubeconfig(bare, base_dir=tmp_path).exec_plugin == ExecPlugin(
        command="aws", api_version=V1
    )


def test_unreadable_or_unparsable_file(tmp_path: Path) -> None:
    """A missing file and a file that is neither JSON nor YAML are KubeConfigErrors."""
    with pytest.raises(KubeConfigError, match="cannot read kubeconfig"):
        load_kubeconfig(tmp_path / "missing")
    bad = tmp_path / "bad"
    bad.write_text("clusters: [unclosed\n")
    with pytest.raises(KubeConfigError, match="neither JSON nor YAML"):
        load_kubeconfig(bad)


def test_in_cluster_reads_the_service_env_and_the_mounted_account(tmp_path: Path) -> None:
    """Host and port from env (IPv6 bracketed), token and CA from the account directory."""
    (tmp_path / "token").write_text("tok\n")
    (tmp_path / "ca.crt").write_text(PEM)
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    ep = in_cluster_endpoint(env, tmp_path)
    assert ep.server == "https://[fd00::1]:443"
    assert ep.token_file == str(tmp_path / "token")
    assert ep.ca_file == str(tmp_path / "ca.crt")
    with pytest.raises(KubeConfigError, match="KUBERNETES_SERVICE_HOST"):
        in_cluster_endpoint({}, tmp_path)
    with pytest.raises(KubeConfigError, match="no ServiceAccount token"):
        in_cluster_endpoint(env, tmp_path / "elsewhere")


def test_token_file_is_read_again_after_the_refresh_period(tmp_path: Path) -> None:
    """A rotated token is picked up; a token file gone for a moment keeps the last token."""
    token = tmp_path / "token"
    token.write_text("one\n")
    fixed = TokenSource("static")
    assert fixed.header() == "Bearer static"
    cached = TokenSource(token_file=str(token), refresh_s=3600)
    rotating = TokenSource(token_file=str(token), refresh_s=0)
    token.write_text("two\n")
    assert cached.header() == "Bearer one"
    assert rotating.header() == "Bearer two"
    token.unlink()
    assert rotating.header() == "Bearer two"
    assert TokenSource().header() is None
    with pytest.raises(KubeConfigError, match="cannot read token"):
        TokenSource(token_file=str(token))


def test_bad_tls_material_is_a_kube_config_error(tmp_path: Path) -> None:
    """A CA that is not a certificate fails when the transport is built, not on first use."""
    bad = endpoint_from_kubeconfig(
        config({"token": "t"}, {"server": "https://h:1", "certificate-authority-data": "eA=="}),
        base_dir=tmp_path,
    )
    with pytest.raises(KubeConfigError, match="bad TLS material"):
        ssl_context(bad)
