"""TokenReview through the adapter: a pod-bound token names its pod; a forged one is refused."""

from __future__ import annotations

import pytest

from slonkd.adapters.kube.tokenreview import review_token
from slonkd.adapters.kube.transport import KubeTransport
from slonkd_sandbox.kube.cluster import KubeCluster
from tests.contract.kube_helpers import pending_pod

pytestmark = pytest.mark.kube


async def test_pod_bound_token_names_its_pod_and_a_forged_one_is_refused(
    kube: KubeCluster, kube_transport: KubeTransport, namespace: str
) -> None:
    """review_token returns the pod and ServiceAccount of a bound token; a forgery is refused."""
    pod = kube.api.request("POST", f"/api/v1/namespaces/{namespace}/pods", pending_pod("w-3"))
    uid = pod["metadata"]["uid"]
    token = kube.create_token(namespace, "default", bound_pod=("w-3", uid))
    who = await review_token(kube_transport, token)
    assert who.authenticated
    assert who.pod_name == "w-3"
    assert who.pod_uid == uid
    assert (who.namespace, who.service_account) == (namespace, "default")
    forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    refused = await review_token(kube_transport, forged)
    assert not refused.authenticated
    assert refused.pod_name is None


async def test_the_apiserver_reports_the_reviewed_audience_and_it_is_checked(
    kube: KubeCluster, kube_transport: KubeTransport, namespace: str
) -> None:
    """A review for our audience reports it in ``status.audiences``; another audience fails.

    The real apiserver is audience-aware (it refuses a token of another audience itself);
    the adapter also checks the reported audiences, for authenticators that are not.
    """
    pod = kube.api.request("POST", f"/api/v1/namespaces/{namespace}/pods", pending_pod("w-4"))
    bound = ("w-4", pod["metadata"]["uid"])
    ours = kube.create_token(namespace, "default", bound_pod=bound, audiences=("slonkd-bus",))
    who = await review_token(kube_transport, ours, audiences=("slonkd-bus",))
    assert who.authenticated
    assert who.audiences == ("slonkd-bus",)
    other = kube.create_token(namespace, "default", bound_pod=bound, audiences=("other",))
    refused = await review_token(kube_transport, other, audiences=("slonkd-bus",))
    assert not refused.authenticated
