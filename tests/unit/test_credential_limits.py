"""The credentials API's guards as pure logic: token buckets, settings, audiences, refusal log."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
import structlog

from slonkd.adapters.kube.tokenreview import review_token
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.core.rate_limit import SourceLimiter, TokenBucket
from slonkd.runtime.coordinating.credentials import CredentialSettings
from slonkd.runtime.coordinating.refusal_log import RefusalLog

ADMIN = {"admin_host": "h", "admin_port": 1883, "admin_user": "u", "admin_password": "p"}


def test_a_bucket_allows_its_burst_then_refuses_until_it_refills() -> None:
    """A bucket of burst 3 and rate 2/s allows 3 at once, then one per half second."""
    bucket = TokenBucket(rate=2.0, burst=3, now=100.0)
    assert [bucket.take(100.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take(100.0) == pytest.approx(0.5)
    assert bucket.take(100.25) == pytest.approx(0.25)  # a refusal spends nothing
    assert bucket.take(100.5) == 0.0
    assert bucket.take(1000.0) == 0.0  # never more than the burst after a long pause
    assert bucket.take(1000.0) == 0.0
    assert bucket.take(1000.0) == 0.0
    assert bucket.take(1000.0) > 0


def test_sources_have_their_own_buckets_and_the_global_one_is_shared() -> None:
    """One source's flood does not spend another's allowance; the global bucket is shared.

    A source refused by its own bucket spends nothing of the global one.
    """
    limiter = SourceLimiter(source_rate=1.0, source_burst=2, global_rate=1.0, global_burst=3)
    now = 10.0
    flood = [limiter.take_source("10.0.0.9", now) for _ in range(50)]
    assert flood[:2] == [0.0, 0.0]
    assert all(wait > 0 for wait in flood[2:])
    assert limiter.take_source("10.0.0.1", now) == 0.0  # another pod is unaffected
    assert [limiter.take_global(now) for _ in range(4)][3] > 0  # only 3 reached the global one


def test_the_source_table_stays_bounded() -> None:
    """Many sources never grow the table past ``max_sources``; refilled buckets are dropped."""
    limiter = SourceLimiter(
        source_rate=1.0, source_burst=1, global_rate=1.0, global_burst=1, max_sources=100
    )
    for i in range(1000):
        limiter.take_source(f"10.1.{i // 256}.{i % 256}", 5.0)
        assert limiter.sources <= 100
    limiter.take_source("10.9.9.9", 500.0)  # long after: every old bucket is full again
    assert limiter.sources == 1


@pytest.mark.parametrize(
    "bad",
    [
        {"source_rate": 0},
        {"source_burst": 0},
        {"global_rate": -1},
        {"global_burst": 0},
        {"max_body_bytes": -1},
        {"refusal_log_interval_s": 0},
        {"max_sources": 0},
    ],
)
def test_limit_settings_are_validated(bad: dict[str, float]) -> None:
    """A rate, burst, body cap or log interval that would disable a guard is refused."""
    with pytest.raises(ValueError, match=next(iter(bad))):
        CredentialSettings(**ADMIN, **bad)  # type: ignore[arg-type]


class _Reviewer:
    """A transport answering every TokenReview with ``status``."""

    def __init__(self, status: dict[str, Any]) -> None:
        self.status = status
        self.bodies: list[Any] = []

    async def request(self, _call: Any, _method: str, _path: str, **kw: Any) -> dict[str, Any]:
        self.bodies.append(kw.get("body"))
        return {"status": self.status}


def _review(status: dict[str, Any], audiences: tuple[str, ...]) -> Any:
    transport = cast(KubeTransport, _Reviewer(status))
    return asyncio.run(review_token(transport, "t", audiences=audiences))


USER = {
    "username": "system:serviceaccount:ns:default",
    "extra": {"authentication.kubernetes.io/pod-name": ["w-1"]},
}


def test_a_review_for_another_audience_is_not_authenticated() -> None:
    """An authenticated review whose ``status.audiences`` misses ours is refused.

    The apiserver is audience-aware, but an authenticator that is not (a webhook) answers
    authenticated for any audience; Kubernetes tells clients to check ``status.audiences``.
    """
    other = _review({"authenticated": True, "user": USER, "audiences": ["other"]}, ("bus",))
    assert not other.authenticated
    assert "audience" in other.error
    missing = _review({"authenticated": True, "user": USER}, ("bus",))
    assert not missing.authenticated
    ours = _review({"authenticated": True, "user": USER, "audiences": ["x", "bus"]}, ("bus",))
    assert ours.authenticated
    assert ours.pod_name == "w-1"
    assert ours.audiences == ("x", "bus")
    # no audience configured: the apiserver's own, which it reports; nothing to compare
    plain = _review({"authenticated": True, "user": USER, "audiences": ["https://k8s"]}, ())
    assert plain.authenticated


async def test_refusals_are_logged_once_then_summarised_per_interval() -> None:
    """The first refusal is logged in full; the rest of a flood as one line per interval.

    The summary counts per reason and names the busiest sources.
    """
    log = RefusalLog(structlog.get_logger("t"), "bus.credentials_refused", interval_s=0.2)
    with structlog.testing.capture_logs() as logs:
        for i in range(300):
            log.refused(status=401, reason="token not authenticated", remote="10.0.0.9")
            if i % 3 == 0:
                log.refused(status=429, reason="rate limited", remote=f"10.0.1.{i % 7}")
        await asyncio.sleep(0.3)
        log.refused(status=403, reason="not a worker pod", remote="10.0.0.2")
        await asyncio.sleep(0.3)
        log.close()
    lines = [e for e in logs if e["event"] == "bus.credentials_refused"]
    assert len(lines) <= 3, lines
    assert lines[0]["reason"] == "token not authenticated"
    assert lines[0]["remote"] == "10.0.0.9"
    summary = lines[1]
    assert summary["reasons"] == {"token not authenticated": 299, "rate limited": 100}
    assert summary["top_sources"][0] == ("10.0.0.9", 299)
    assert sum(sum(e.get("reasons", {}).values()) for e in lines) + 1 == 401
