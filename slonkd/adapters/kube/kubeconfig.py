"""Where the apiserver is and how slonkd proves who it is: kubeconfig or in-cluster account.

A lean loader on the standard library, so that no slonkd process imports kubernetes_asyncio
(its client alone costs about 60 MB of RSS in every agent) unless a kubeconfig asks for an
``exec`` credential plugin. It reads:

- a kubeconfig (JSON or YAML): the current context (or a named one), its cluster's
  ``server``, ``certificate-authority`` / ``-data``, ``insecure-skip-tls-verify`` and
  ``tls-server-name``, and its user's ``token``, ``tokenFile``, ``client-certificate`` /
  ``-data`` and ``client-key`` / ``-data``; relative paths are relative to the file, as
  kubectl reads them;
- or its user's ``exec`` credential plugin (EKS ``aws eks get-token``, GKE
  ``gke-gcloud-auth-plugin``, OIDC ``kubelogin``): ``command``, ``args``, ``env`` and
  ``apiVersion`` are checked here into an :class:`ExecPlugin`; running it, caching its token
  or client certificate until it expires and asking again after a 401 is
  :mod:`slonkd.adapters.kube.exec_auth`'s job, the one place kubernetes_asyncio is imported
  (only when such a kubeconfig is loaded; in-cluster agents never import it);
- the pod's ServiceAccount: ``KUBERNETES_SERVICE_HOST`` / ``_PORT`` and the mounted token
  and CA. The token is re-read once a minute, so a rotated projected token is picked up.

Not supported, and refused with a clear :class:`KubeConfigError`: ``auth-provider``
(deprecated since Kubernetes 1.22; its replacements are exec plugins) and basic auth.

Only :func:`ssl_context` and :class:`TokenSource` touch files after loading; nothing here
opens a connection.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import ssl
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slonkd.core.errors import TerminalError

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REFRESH_S = 60.0
"""How often a token file is read again (client-go and kubernetes_asyncio: one minute)."""
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
"""The ExecCredential versions plugins speak today (v1alpha1 was removed in Kubernetes 1.24)."""


class KubeConfigError(TerminalError):
    """The kubeconfig or the in-cluster account cannot be used; the message says why."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecPlugin:
    """A kubeconfig user's ``exec`` section, checked: what to run to get credentials."""

    command: str
    """A name looked up in PATH, or a path (relative ones resolved against the kubeconfig)."""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    """Added to slonkd's own environment for the plugin."""
    api_version: str = EXEC_API_VERSIONS[0]


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiEndpoint:
    """One apiserver and the credentials to present to it (PEM data or file paths)."""

    server: str
    """``https://host:port`` (or ``http://``), no trailing slash."""
    ca_file: str | None = None
    ca_data: str | None = None
    insecure: bool = False
    tls_server_name: str | None = None
    token: str | None = None
    token_file: str | None = None
    cert_file: str | None = None
    cert_data: str | None = None
    key_file: str | None = None
    key_data: str | None = None
    exec_plugin: ExecPlugin | None = None
    """Run for a token or a client certificate (:mod:`slonkd.adapters.kube.exec_auth`)."""
    source: str = ""
    """Where this came from (a kubeconfig path and context, or "in-cluster"), for messages."""


def _named(items: Any, name: str, what: str, source: str) -> Mapping[str, Any]:
    if not isinstance(items, list):
        raise KubeConfigError(f"{source}: {what}s is not a list")
    for item in items:
        if isinstance(item, dict) and item.get("name") == name:
            body = item.get(what)
            if not isinstance(body, dict):
                raise KubeConfigError(f"{source}: {what} {name!r} has no {what} section")
            return body
    raise KubeConfigError(f"{source}: no {what} named {name!r}")


def _decoded(value: Any, key: str, source: str) -> str:
    try:
        return base64.b64decode(str(value), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise KubeConfigError(f"{source}: {key} is not base64 of PEM text") from None


def _path(value: Any, base_dir: Path) -> str:
    path = Path(str(value)).expanduser()
    return str(path if path.is_absolute() else base_dir / path)


def _exec_plugin(section: Any, user: Mapping[str, Any], base_dir: Path, source: str) -> ExecPlugin:
    """The user's ``exec`` section, or a KubeConfigError naming what is wrong with it."""
    where = f"{source}: exec"
    if not isinstance(section, dict):
        raise KubeConfigError(f"{where}: not a mapping")
    if "token" in user or "tokenFile" in user:
        raise KubeConfigError(f"{where}: a user has a token (or tokenFile) or an exec plugin")
    command = section.get("command")
    if not isinstance(command, str) or not command:
        raise KubeConfigError(f"{where}: no command")
    api_version = section.get("apiVersion")
    if api_version not in EXEC_API_VERSIONS:
        raise KubeConfigError(
            f"{where}: apiVersion {api_version!r} is not one of {', '.join(EXEC_API_VERSIONS)}"
        )
    args = section.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise KubeConfigError(f"{where}: args is not a list of strings")
    env: list[tuple[str, str]] = []
    for item in section.get("env") or []:
        if not (
            isinstance(item, dict)
            and isinstance(item.get("name"), str)
            and item["name"]
            and isinstance(item.get("value"), str)
        ):
            raise KubeConfigError(f"{where}: env is not a list of {{name, value}} strings")
        env.append((item["name"], item["value"]))
    if os.sep in command and not os.path.isabs(command):
        command = _path(command, base_dir)  # kubectl: a path is relative to the kubeconfig
    return ExecPlugin(command=command, args=tuple(args), env=tuple(env), api_version=api_version)


def endpoint_from_kubeconfig(
    doc: Any, *, base_dir: Path, context: str | None = None, source: str = "kubeconfig"
) -> ApiEndpoint:
    """The endpoint of ``context`` (default: the current context) of a parsed kubeconfig."""
    if not isinstance(doc, dict):
        raise KubeConfigError(f"{source}: not a kubeconfig (expected a mapping)")
    name = context or doc.get("current-context")
    if not name:
        raise KubeConfigError(f"{source}: no current-context and no context named")
    source = f"{source} (context {name})"
    ctx = _named(doc.get("contexts"), str(name), "context", source)
    cluster = _named(doc.get("clusters"), str(ctx.get("cluster", "")), "cluster", source)
    user: Mapping[str, Any] = {}
    if ctx.get("user"):
        user = _named(doc.get("users"), str(ctx["user"]), "user", source)
    for unsupported, why in (
        ("auth-provider", "auth-provider plugins"),
        ("username", "basic auth"),
    ):
        if unsupported in user:
            raise KubeConfigError(
                f"{source}: {why}: not supported; use a token, a tokenFile, a client "
                "certificate or an exec plugin (in a pod, the ServiceAccount)"
            )
    server = str(cluster.get("server", "")).rstrip("/")
    if not server.startswith(("https://", "http://")):
        raise KubeConfigError(f"{source}: cluster server {server[:80]!r} is not an http(s) URL")
    has_cert = "client-certificate" in user or "client-certificate-data" in user
    has_key = "client-key" in user or "client-key-data" in user
    if has_cert != has_key:
        raise KubeConfigError(f"{source}: a client certificate needs its key, and the reverse")

    def optional_path(section: Mapping[str, Any], key: str) -> str | None:
        return _path(section[key], base_dir) if section.get(key) else None

    def optional_data(section: Mapping[str, Any], key: str) -> str | None:
        return _decoded(section[key], key, source) if section.get(key) else None

    return ApiEndpoint(
        server=server,
        ca_file=optional_path(cluster, "certificate-authority"),
        ca_data=optional_data(cluster, "certificate-authority-data"),
        insecure=bool(cluster.get("insecure-skip-tls-verify", False)),
        tls_server_name=str(cluster["tls-server-name"]) if cluster.get("tls-server-name") else None,
        token=str(user["token"]) if user.get("token") else None,
        token_file=_path(user["tokenFile"], base_dir) if user.get("tokenFile") else None,
        cert_file=optional_path(user, "client-certificate"),
        cert_data=optional_data(user, "client-certificate-data"),
        key_file=optional_path(user, "client-key"),
        key_data=optional_data(user, "client-key-data"),
        exec_plugin=_exec_plugin(user["exec"], user, base_dir, source) if "exec" in user else None,
        source=source,
    )


def load_kubeconfig(path: Path | str, context: str | None = None) -> ApiEndpoint:
    """Read a kubeconfig file (JSON is tried first: it needs no YAML parser)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise KubeConfigError(f"cannot read kubeconfig {path}: {exc.strerror}") from None
    try:
        doc = json.loads(text)
    except ValueError:
        import yaml  # only for YAML kubeconfigs (kubectl's); in-cluster never needs it

        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise KubeConfigError(f"kubeconfig {path} is neither JSON nor YAML: {exc}") from None
    return endpoint_from_kubeconfig(
        doc, base_dir=path.resolve().parent, context=context, source=str(path)
    )


def in_cluster_endpoint(
    env: Mapping[str, str] | None = None, account_dir: Path = SERVICE_ACCOUNT_DIR
) -> ApiEndpoint:
    """The pod's own ServiceAccount: service host and port from env, token and CA mounted."""
    env = os.environ if env is None else env
    host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise KubeConfigError(
            "not in a pod: KUBERNETES_SERVICE_HOST/PORT are not set (set KUBECONFIG instead)"
        )
    token, ca = account_dir / "token", account_dir / "ca.crt"
    if not token.is_file():
        raise KubeConfigError(f"in-cluster: no ServiceAccount token at {token}")
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    return ApiEndpoint(
        server=f"https://{host}:{port}",
        ca_file=str(ca) if ca.is_file() else None,
        token_file=str(token),
        source="in-cluster",
    )


def ssl_context(endpoint: ApiEndpoint) -> ssl.SSLContext:
    """The TLS context: the endpoint's CA (or the system's), its client certificate if any."""
    try:
        context = ssl.create_default_context(cafile=endpoint.ca_file, cadata=endpoint.ca_data)
        if endpoint.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if endpoint.cert_file or endpoint.cert_data:
            _load_client_cert(context, endpoint)
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise KubeConfigError(f"{endpoint.source}: bad TLS material: {exc}") from None
    return context


def _load_client_cert(context: ssl.SSLContext, endpoint: ApiEndpoint) -> None:
    # ssl loads certificates from files only: inline data goes through a private temporary
    # directory that is removed at once.
    with tempfile.TemporaryDirectory(prefix="slonkd-tls-") as tmp:
        # inline data wins over a path, as kubectl reads it
        cert = os.path.join(tmp, "cert.pem") if endpoint.cert_data else str(endpoint.cert_file)
        key = os.path.join(tmp, "key.pem") if endpoint.key_data else str(endpoint.key_file)
        for path, data in ((cert, endpoint.cert_data), (key, endpoint.key_data)):
            if data:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as out:
                    out.write(data)
        context.load_cert_chain(cert, keyfile=key)


class TokenSource:
    """The bearer token to send: fixed, or read from a file again once a minute."""

    def __init__(
        self,
        token: str | None = None,
        token_file: str | None = None,
        *,
        refresh_s: float = TOKEN_REFRESH_S,
    ) -> None:
        self._token = token
        self._file = token_file
        self._refresh_s = refresh_s
        self._read_at = -refresh_s
        if token_file:
            self._reread(time.monotonic())

    def _reread(self, now: float) -> None:
        try:
            self._token = Path(str(self._file)).read_text().strip()
        except OSError as exc:
            if self._token is None:
                raise KubeConfigError(f"cannot read token {self._file}: {exc.strerror}") from None
            # keep the last token: a rotation in progress must not break every request
        self._read_at = now

    def header(self) -> str | None:
        """The ``Authorization`` header value, or None when there is no token."""
        if self._file:
            now = time.monotonic()
            if now - self._read_at >= self._refresh_s:
                self._reread(now)
        return f"Bearer {self._token}" if self._token else None
