"""The control plane's credentials: its CA, certificates, token file and kubeconfigs.

Everything is made with ``openssl`` under ``<cluster root>/pki``: the harness CA, the
apiserver's serving certificate (for 127.0.0.1, ``localhost`` and ``kubernetes.default.svc``),
the service-account key pair (so TokenRequest and TokenReview work as in a real cluster) and
the client certificate the apiserver shows a kubelet. A static token file makes the admin
user a member of ``system:masters``.

Neighbours: :mod:`slonkd_sandbox.kube.cluster` (the
:class:`~slonkd_sandbox.kube.cluster.KubeCluster` that writes these at start),
:mod:`slonkd_sandbox.kube.components` (the command lines that name these files) and
:mod:`slonkd_sandbox.realnode.node` (signs its kubelet's and CoreDNS's client certificates with
:func:`sign_client_cert`).
"""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path


def write_pki(root: Path, admin_token: str) -> None:
    """Write the token file (``admin_token``) and, once per root, the CA and every key pair."""
    pki = root / "pki"
    pki.mkdir(parents=True, exist_ok=True)
    tokens = root / "tokens.csv"
    tokens.write_text(f'{admin_token},admin,admin-uid,"system:masters"\n')
    tokens.chmod(0o600)
    if (pki / "apiserver.crt").exists():
        return

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)

    openssl(
        "genpkey",
        "-algorithm",
        "RSA",
        "-pkeyopt",
        "rsa_keygen_bits:2048",
        "-out",
        str(pki / "sa.key"),
    )
    openssl("pkey", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))
    openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "3650",
        "-subj",
        "/CN=slonkd-harness-ca",
        "-keyout",
        str(pki / "ca.key"),
        "-out",
        str(pki / "ca.crt"),
    )
    ext = pki / "san.ext"
    ext.write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\n"
        "extendedKeyUsage=serverAuth\n"
    )
    openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=kube-apiserver",
        "-keyout",
        str(pki / "apiserver.key"),
        "-out",
        str(pki / "apiserver.csr"),
    )
    openssl(
        "x509",
        "-req",
        "-in",
        str(pki / "apiserver.csr"),
        "-CA",
        str(pki / "ca.crt"),
        "-CAkey",
        str(pki / "ca.key"),
        "-CAcreateserial",
        "-days",
        "3650",
        "-extfile",
        str(ext),
        "-out",
        str(pki / "apiserver.crt"),
    )
    sign_client_cert(
        pki, pki / "kubelet-client", cn="kube-apiserver-kubelet-client", org="system:masters"
    )


def sign_client_cert(pki: Path, out: Path, *, cn: str, org: str) -> None:
    """Write ``out``.key/.crt: a client certificate (user ``cn``, group ``org``) of the CA."""
    key, csr, crt = (out.with_suffix(s) for s in (".key", ".csr", ".crt"))
    ext = out.with_suffix(".ext")
    ext.write_text("extendedKeyUsage=clientAuth\n")
    ca, ca_key = str(pki / "ca.crt"), str(pki / "ca.key")
    request = ["req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/O={org}/CN={cn}"]
    sign = ["x509", "-req", "-in", str(csr), "-CA", ca, "-CAkey", ca_key, "-CAcreateserial"]
    for args in (
        [*request, "-keyout", str(key), "-out", str(csr)],
        [*sign, "-days", "3650", "-extfile", str(ext), "-out", str(crt)],
    ):
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)
    key.chmod(0o600)


def token_kubeconfig(
    server: str, ca_file: Path, token: str, *, user: str, namespace: str = "default"
) -> str:
    """A kubeconfig (JSON, which is YAML) for ``server`` that authenticates with ``token``."""
    ca = base64.b64encode(ca_file.read_bytes()).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "harness",
                "cluster": {"server": server, "certificate-authority-data": ca},
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {
                "name": "harness",
                "context": {"cluster": "harness", "user": user, "namespace": namespace},
            }
        ],
        "current-context": "harness",
    }
    return json.dumps(config, indent=2)


__all__ = ["sign_client_cert", "token_kubeconfig", "write_pki"]
