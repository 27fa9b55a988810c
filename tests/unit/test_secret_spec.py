"""The spec of ``slonkd secrets ensure``: what it accepts, the values it draws, what it refuses.

And which Secret it releases from Helm's (and Argo CD's) care: one an older chart rendered.

The chart's pre-install Job passes this spec (tests/unit/test_chart_secrets.py renders it);
the contract test (tests/contract/test_kube_secrets.py) runs the command on the apiserver.
"""

from __future__ import annotations

import base64
import json
import os
import re
import string

import pytest

from slonkd.adapters.kube.secrets import release_from_helm
from slonkd.core.secret_spec import make_data, parse_spec
from tests.cli import slonkd

SPEC = {
    "secrets": [
        {"name": "rel-munge", "data": {"munge.key": {"randomBytes": 1024}}},
        {
            "name": "rel-mosquitto-admin",
            "labels": {"slonk.dev/release": "rel"},
            "data": {"username": {"value": "admin"}, "password": {"randomAlphanumeric": 32}},
        },
    ]
}

TLS_BAD = {"secrets": [{"name": "rel-tls", "tls": {"dnsNames": ["Rel-Mosquitto"]}}]}
"""A TLS entry the command refuses (tests/unit/test_tls_secret.py has the rest of them)."""


def test_a_spec_draws_fresh_values_of_each_kind() -> None:
    """Random bytes of the length asked, alphanumeric passwords, fixed values as given."""
    munge, admin = parse_spec(json.dumps(SPEC))
    assert (munge.name, [k.key for k in munge.keys]) == ("rel-munge", ["munge.key"])
    assert admin.labels == {"slonk.dev/release": "rel"}
    one, two = make_data(munge), make_data(munge)
    assert len(base64.b64decode(one["munge.key"])) == 1024
    assert one != two
    data = {k: base64.b64decode(v).decode() for k, v in make_data(admin).items()}
    assert data["username"] == "admin"
    assert len(data["password"]) == 32
    assert set(data["password"]) <= set(string.ascii_letters + string.digits)


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("{", "not JSON"),
        ("[]", '{"secrets": [...]}'),
        ('{"secrets": []}', "names no secret"),
        ('{"secrets": [{"name": "Bad_Name", "data": {"k": {"value": "v"}}}]}', "not a valid"),
        ('{"secrets": [{"name": "a", "data": {}}]}', "at least one key"),
        ('{"secrets": [{"name": "a", "data": {"k": {"randomBytes": 0}}}]}', "whole number"),
        ('{"secrets": [{"name": "a", "data": {"k": {"randomBytes": true}}}]}', "whole number"),
        ('{"secrets": [{"name": "a", "data": {"k": {"random": 3}}}]}', "exactly one of"),
        ('{"secrets": [{"name": "a", "data": {"k/x": {"value": "v"}}}]}', "valid Secret key"),
        ('{"secrets": [{"name": "a", "data": {"k": {"value": 3}}}]}', "must be a string"),
        ('{"secrets": [{"name": "a", "data": {"k": {"value": "v"}}, "x": 1}]}', "unknown"),
        (
            '{"secrets": [{"name": "a", "labels": {"l": 1}, "data": {"k": {"value": "v"}}}]}',
            "labels",
        ),
        (
            '{"secrets": [{"name": "a", "data": {"k": {"value": "v"}}},'
            ' {"name": "a", "data": {"k": {"value": "v"}}}]}',
            "named twice",
        ),
    ],
)
def test_a_bad_spec_is_refused_with_one_line(spec: str, says: str) -> None:
    """Every shape error is a ValueError whose one line names it."""
    with pytest.raises(ValueError, match=re.escape(says)) as caught:
        parse_spec(spec)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--namespace", "ns", "--spec", "{"], "not JSON"),
        (["--spec", json.dumps(SPEC)], "no namespace"),
        (["--namespace", "ns", "--spec-file", "/nonexistent/spec.json"], "cannot read"),
        (["--namespace", "ns", "--spec", json.dumps(SPEC), "--timeout", "0"], "--timeout"),
        (["--namespace", "ns", "--spec", json.dumps(TLS_BAD)], "not a lowercase DNS name"),
    ],
)
def test_the_command_refuses_bad_input_with_one_line_and_exit_2(argv: list[str], says: str) -> None:
    """Bad input: one line on stderr, exit 2, and no call to any apiserver."""
    env = {k: v for k, v in os.environ.items() if k not in ("POD_NAMESPACE", "KUBECONFIG")}
    done = slonkd("secrets", "ensure", *argv, env=env)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("slonkd secrets ensure: ")
    assert says in lines[0]
    assert done.stdout == ""


KEEP = {"helm.sh/resource-policy": "keep", "argocd.argoproj.io/sync-options": "Prune=false"}


@pytest.mark.parametrize(
    ("metadata", "added"),
    [
        ({"labels": {"app.kubernetes.io/managed-by": "slonkd"}}, {}),  # made once: left alone
        ({}, {}),  # an operator's
        ({"annotations": {"meta.helm.sh/release-name": "rel"}}, KEEP),  # helm install
        ({"labels": {"app.kubernetes.io/managed-by": "Helm"}}, KEEP),  # helm template, Argo CD
        ({"labels": {"app.kubernetes.io/managed-by": "Helm"}, "annotations": KEEP}, {}),
        (
            {
                "annotations": {
                    "meta.helm.sh/release-name": "rel",
                    "helm.sh/resource-policy": "keep",
                    "argocd.argoproj.io/sync-options": "Replace=true",
                }
            },
            {"argocd.argoproj.io/sync-options": "Replace=true,Prune=false"},
        ),
    ],
)
def test_only_a_secret_an_older_chart_rendered_is_released_from_helm_and_argo(
    metadata: dict[str, dict[str, str]], added: dict[str, str]
) -> None:
    """Helm's marks get keep and Prune=false, added to what is there; nothing else is touched."""
    assert release_from_helm(metadata) == added
