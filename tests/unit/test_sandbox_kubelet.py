"""The kubelet stand-in finishes a pod's deletion even when the apiserver is briefly away.

A real kubelet keeps reconciling a terminating pod until the apiserver takes its final
deletion; the stand-in once tried that deletion once, so an apiserver restart at that moment
left the pod Terminating for good (soak seed 4242: I5, w-2 never converged). Pure logic of the
stand-in's retry, with an API double that refuses like a stopped apiserver.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from slonkd_sandbox.kube.api import ApiError
from slonkd_sandbox.kube.kubelet import _StandIn


class _Api:
    """Answers the final DELETE with the given outcomes in turn (an exception or a body)."""

    def __init__(self, *outcomes: BaseException | dict[str, Any]) -> None:
        self.outcomes = list(outcomes)
        self.calls: list[tuple[str, str, Any]] = []

    def request(self, method: str, path: str, body: Any = None, **_: Any) -> dict[str, Any]:
        self.calls.append((method, path, body))
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


def _standin(tmp_path: Path, api: _Api) -> _StandIn:
    spec = {
        "host": "127.0.0.1", "port": 1, "ca_file": str(tmp_path / "ca.crt"), "token": "t",
        "namespace": "ns", "slurm_socket": str(tmp_path / "s.sock"),
        "slurm_conf": str(tmp_path / "slurm.conf"), "journal": str(tmp_path / "j.jsonl"),
        "log_dir": str(tmp_path),
    }  # fmt: skip
    standin = _StandIn(spec)
    standin.api = api  # type: ignore[assignment]
    return standin


def _events(tmp_path: Path) -> list[str]:
    lines = (tmp_path / "j.jsonl").read_text().splitlines()
    return [json.loads(line)["event"] for line in lines]


def test_a_refused_final_deletion_is_tried_again_until_the_apiserver_takes_it(
    tmp_path: Path,
) -> None:
    """Connection refused twice (the apiserver restarting), then taken: one pod.deleted."""
    refused = ConnectionRefusedError(111, "Connection refused")
    api = _Api(refused, refused, {"kind": "Pod"})
    standin = _standin(tmp_path, api)
    standin.finish_deletion("w-2", "uid-1", bound_s=5.0, pause_s=0.01)
    assert len(api.calls) == 3, api.calls
    assert all(c[0] == "DELETE" and c[1].endswith("/pods/w-2") for c in api.calls)
    assert all(c[2]["preconditions"] == {"uid": "uid-1"} for c in api.calls)
    assert _events(tmp_path) == ["pod.delete_failed", "pod.delete_failed", "pod.deleted"]


def test_a_server_error_is_tried_again_but_a_refusal_of_the_request_is_not(
    tmp_path: Path,
) -> None:
    """A 503 is the apiserver failing: again; a 403 is the request refused: no second try."""
    api = _Api(ApiError(503, {}, "DELETE"), {"kind": "Pod"})
    _standin(tmp_path, api).finish_deletion("w-2", "u", bound_s=5.0, pause_s=0.01)
    assert len(api.calls) == 2
    forbidden = _Api(ApiError(403, {}, "DELETE"))
    other = tmp_path / "other"
    other.mkdir()
    _standin(other, forbidden).finish_deletion("w-2", "u", bound_s=5.0, pause_s=0.01)
    assert len(forbidden.calls) == 1
    assert _events(other) == ["pod.delete_failed", "pod.delete_abandoned"]


def test_a_deletion_that_never_goes_through_is_not_journalled_as_done(tmp_path: Path) -> None:
    """Past the bound the stand-in gives up and says so, never journalling a deletion."""
    api = _Api(*[ConnectionRefusedError(111, "Connection refused")] * 1000)
    _standin(tmp_path, api).finish_deletion("w-2", "u", bound_s=0.05, pause_s=0.01)
    events = _events(tmp_path)
    assert "pod.deleted" not in events
    assert events[-1] == "pod.delete_abandoned"
    assert len(api.calls) >= 2
