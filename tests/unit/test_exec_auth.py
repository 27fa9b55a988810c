"""Exec credential plugins: argv and env passed, answers cached until they expire, failures."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import structlog

from slonkd.adapters.kube.exec_auth import (
    ExecAuth,
    ExecPluginUnavailable,
    credential_from_status,
)
from slonkd.adapters.kube.kubeconfig import ApiEndpoint, KubeConfigError, endpoint_from_kubeconfig

V1 = "client.authentication.k8s.io/v1"

# The fake plugin: appends what it was given (argv, FAKE_* env, KUBERNETES_EXEC_INFO) to
# calls.jsonl next to it, then does what the file "mode" says.
PLUGIN = f"""\
#!{sys.executable}
import json, os, pathlib, sys, time
here = pathlib.Path(__file__).parent
calls = here / "calls.jsonl"
n = sum(1 for _ in calls.open()) + 1 if calls.exists() else 1
with calls.open("a") as out:
    out.write(json.dumps({{
        "argv": sys.argv[1:],
        "env": {{k: v for k, v in os.environ.items() if k.startswith("FAKE_")}},
        "info": json.loads(os.environ["KUBERNETES_EXEC_INFO"]),
        "pid": os.getpid(),
    }}) + "\\n")
mode = (here / "mode").read_text().strip() if (here / "mode").exists() else "token"
if mode == "fail":
    print("identity provider said no", file=sys.stderr)
    sys.exit(3)
if mode == "garbage":
    print("<html>not a credential</html>")
    sys.exit(0)
if mode == "hang":
    time.sleep(60)
status = {{"token": f"secret-token-{{n}}"}}
if os.environ.get("FAKE_EXPIRES"):
    status["expirationTimestamp"] = os.environ["FAKE_EXPIRES"]
asked = json.loads(os.environ["KUBERNETES_EXEC_INFO"])["apiVersion"]
version = os.environ.get("FAKE_VERSION", asked)
print(json.dumps({{"apiVersion": version, "kind": "ExecCredential", "status": status}}))
"""


def plugin(tmp_path: Path, mode: str = "token") -> Path:
    """The fake plugin, executable, in its own directory."""
    script = tmp_path / "bin" / "fake-plugin"
    script.parent.mkdir(exist_ok=True)
    script.write_text(PLUGIN)
    script.chmod(0o755)
    (script.parent / "mode").write_text(mode)
    return script


def calls(script: Path) -> list[dict[str, Any]]:
    """What the plugin was given, one entry a run."""
    path = script.parent / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def endpoint(tmp_path: Path, exec_section: dict[str, Any]) -> ApiEndpoint:
    """The endpoint of a kubeconfig (in ``tmp_path``) whose user runs ``exec_section``."""
    doc = {
        "clusters": [{"name": "k", "cluster": {"server": "http://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"exec": exec_section}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "current-context": "c",
    }
    return endpoint_from_kubeconfig(doc, base_dir=tmp_path, source="kc")


class Clock:
    """A wall clock that moves only when told."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        """The time it was set to."""
        return self.now


def iso(t: float) -> str:
    """RFC 3339 in UTC, as plugins write expirationTimestamp."""
    from datetime import UTC, datetime

    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def test_argv_env_and_exec_info_reach_the_plugin(tmp_path: Path) -> None:
    """args in order (spaces kept), env added to slonkd's, KUBERNETES_EXEC_INFO with the version."""
    script = plugin(tmp_path)
    section = {
        "command": "./bin/fake-plugin",  # relative to the kubeconfig's directory
        "apiVersion": V1,
        "args": ["token", "--cluster-name", "a b"],
        "env": [{"name": "FAKE_REGION", "value": "eu-west-1"}],
    }
    auth = ExecAuth(endpoint(tmp_path, section))
    credential = await auth.credential()
    assert credential.token == "secret-token-1"
    assert credential.expires_at is None
    assert credential.tls is None
    (call,) = calls(script)
    assert call["argv"] == ["token", "--cluster-name", "a b"]
    assert call["env"] == {"FAKE_REGION": "eu-west-1"}
    assert call["info"]["apiVersion"] == V1
    assert call["info"]["kind"] == "ExecCredential"


async def test_token_is_cached_until_the_margin_before_expiry(tmp_path: Path) -> None:
    """One run while the token is fresh; the next once within the margin of its expiry."""
    script = plugin(tmp_path)
    clock = Clock()
    section = {
        "command": str(script),
        "apiVersion": V1,
        "env": [{"name": "FAKE_EXPIRES", "value": iso(clock.now + 600)}],
    }
    auth = ExecAuth(endpoint(tmp_path, section), clock=clock, margin_s=60)
    first = await auth.credential()
    assert first.token == "secret-token-1"
    assert first.expires_at == clock.now + 600
    assert first.refresh_at == clock.now + 540
    clock.now += 539
    assert await auth.credential() is first
    assert auth.runs == 1
    clock.now += 1
    second = await auth.credential()
    assert second.token == "secret-token-2"
    assert auth.runs == len(calls(script)) == 2


def test_short_lived_tokens_refresh_at_three_quarters_of_their_life() -> None:
    """A token that lives less than four margins is renewed after three quarters of its life."""
    ep = ApiEndpoint(server="http://h:1", source="kc")
    status = {"token": "t", "expirationTimestamp": "2027-01-15T08:00:20Z"}
    exp = 1_800_000_020.0  # 2027-01-15T08:00:20Z
    credential = credential_from_status(status, ep, now=exp - 20, margin_s=60)
    assert credential.refresh_at == exp - 5
    offset = {"token": "t", "expirationTimestamp": "2027-01-15T09:00:20+01:00"}
    assert credential_from_status(offset, ep, now=exp - 20).expires_at == exp


async def test_concurrent_requests_share_one_run_and_a_rejection_runs_it_again(
    tmp_path: Path,
) -> None:
    """Ten waiters, one run; rejected() of the current credential forces the next run only once."""
    script = plugin(tmp_path)
    auth = ExecAuth(endpoint(tmp_path, {"command": str(script), "apiVersion": V1}))
    got = await asyncio.gather(*(auth.credential() for _ in range(10)))
    assert {c.token for c in got} == {"secret-token-1"}
    assert auth.runs == 1
    auth.rejected(got[0])
    second = await auth.credential()
    assert second.token == "secret-token-2"
    auth.rejected(got[0])  # a late 401 for the old token must not run the plugin again
    assert await auth.credential() is second
    assert auth.runs == len(calls(script)) == 2


async def test_plugin_failure_is_transient_and_says_why(tmp_path: Path) -> None:
    """A non-zero exit is an ExecPluginUnavailable with the plugin's stderr; nothing cached."""
    script = plugin(tmp_path, "fail")
    auth = ExecAuth(endpoint(tmp_path, {"command": str(script), "apiVersion": V1}))
    with pytest.raises(ExecPluginUnavailable, match=r"returned 3\. identity provider said no"):
        await auth.credential()
    (script.parent / "mode").write_text("token")
    assert (await auth.credential()).token == "secret-token-2"


@pytest.mark.parametrize(
    ("mode", "env", "message"),
    [
        ("garbage", {}, "unusable answer: exec: failed to decode process output"),
        ("token", {"FAKE_VERSION": "client.authentication.k8s.io/v1beta1"}, "does not match"),
        ("token", {"FAKE_EXPIRES": "tomorrow"}, "'tomorrow' is not RFC 3339"),
        ("token", {"FAKE_EXPIRES": "2027-01-15T08:00:20"}, "is not RFC 3339"),
    ],
)
async def test_unusable_answers_are_kube_config_errors(
    tmp_path: Path, mode: str, env: dict[str, str], message: str
) -> None:
    """Output that is not an ExecCredential of the right version is terminal, and named."""
    script = plugin(tmp_path, mode)
    section = {
        "command": str(script),
        "apiVersion": V1,
        "env": [{"name": k, "value": v} for k, v in env.items()],
    }
    with pytest.raises(KubeConfigError, match=message) as caught:
        await ExecAuth(endpoint(tmp_path, section)).credential()
    assert "secret-token" not in str(caught.value)


@pytest.mark.parametrize(
    ("status", "message"),
    [
        ({}, "neither a token nor a client certificate"),
        ({"token": ""}, "token is not a non-empty string"),
        ({"token": 5}, "token is not a non-empty string"),
        ({"clientCertificateData": "PEM"}, "needs clientKeyData"),
        ({"clientKeyData": "PEM", "token": "t"}, "needs clientKeyData"),
        ("a string", "status is not a mapping"),
    ],
)
def test_statuses_without_a_usable_credential_are_refused(status: Any, message: str) -> None:
    """A status that gives nothing to authenticate with is a KubeConfigError naming the gap."""
    with pytest.raises(KubeConfigError, match=message):
        credential_from_status(status, ApiEndpoint(server="https://h:1", source="kc"), now=0)


async def test_missing_command_is_terminal(tmp_path: Path) -> None:
    """A plugin that is not installed: a KubeConfigError saying it cannot be run."""
    section = {"command": "slonkd-no-such-plugin", "apiVersion": V1}
    with pytest.raises(KubeConfigError, match="cannot run slonkd-no-such-plugin"):
        await ExecAuth(endpoint(tmp_path, section)).credential()


async def test_a_hung_plugin_is_killed_at_its_deadline(tmp_path: Path) -> None:
    """Past the timeout the plugin is killed (not left running) and the error is transient."""
    script = plugin(tmp_path, "hang")
    auth = ExecAuth(endpoint(tmp_path, {"command": str(script), "apiVersion": V1}), timeout_s=1)
    started = asyncio.get_running_loop().time()
    with pytest.raises(ExecPluginUnavailable, match="no answer in 1s"):
        await auth.credential()
    assert asyncio.get_running_loop().time() - started < 10
    (call,) = calls(script)
    with pytest.raises(ProcessLookupError):
        os.kill(call["pid"], 0)


async def test_the_token_is_never_logged_nor_shown(tmp_path: Path) -> None:
    """Logs say a credential was fetched and when it expires; the token is in no log or repr."""
    script = plugin(tmp_path)
    auth = ExecAuth(endpoint(tmp_path, {"command": str(script), "apiVersion": V1}))
    with structlog.testing.capture_logs() as logs:
        credential = await auth.credential()
    assert [e["event"] for e in logs] == ["kube.exec_credential"]
    assert logs[0]["plugin"] == "fake-plugin"
    assert logs[0]["cause"] == "first request"
    assert "secret-token" not in repr(logs) + repr(credential)


IMPORT_PROBE = textwrap.dedent(
    """
    import asyncio, sys
    from slonkd.adapters.kube.kubeconfig import in_cluster_endpoint
    from slonkd.adapters.kube.transport import KubeTransport

    async def main():
        transport = await KubeTransport.from_kubeconfig(sys.argv[1])
        await transport.close()
        if len(sys.argv) > 2:
            env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
            KubeTransport(in_cluster_endpoint(env, __import__("pathlib").Path(sys.argv[2])))
        print("kubernetes_asyncio" in sys.modules)

    asyncio.run(main())
    """
)


@pytest.mark.parametrize(
    ("user", "imported"),
    [({"token": "t"}, False), ({"exec": {"command": "x", "apiVersion": V1}}, True)],
    ids=["token", "exec"],
)
def test_only_an_exec_kubeconfig_imports_kubernetes_asyncio(
    tmp_path: Path, user: dict[str, Any], imported: bool
) -> None:
    """A token kubeconfig and the in-cluster account never import kubernetes_asyncio (60 MB)."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "clusters": [{"name": "k", "cluster": {"server": "http://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    account = tmp_path / "sa"
    account.mkdir()
    (account / "token").write_text("t")
    argv = [sys.executable, "-c", IMPORT_PROBE, str(kubeconfig)]
    if not imported:
        argv.append(str(account))
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == str(imported)
