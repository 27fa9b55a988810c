"""TokenReview: which pod a bound ServiceAccount token belongs to (the bus's bootstrap uses it).

An agent presents its pod-bound projected token; the coordinator asks the apiserver who that
is. Only an authenticated ServiceAccount token bound to a pod yields a pod name; anything
else comes back with ``authenticated=False`` or no pod, and the caller refuses it.

With ``audiences`` the review must report one of them in ``status.audiences``: the
apiserver's own authenticators refuse a token of another audience, but one that is not
audience-aware (a webhook) answers "authenticated" regardless, and the TokenReview API asks
its clients to check (an empty ``status.audiences`` means "valid for the apiserver").
"""

from __future__ import annotations

from collections.abc import Sequence

from slonkd.adapters.kube.errors import Call
from slonkd.adapters.kube.parsing import pod_from_json
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.core.kube_objects import Pod, PodName, TokenIdentity

POD_NAME = "authentication.kubernetes.io/pod-name"
POD_UID = "authentication.kubernetes.io/pod-uid"
SA_PREFIX = "system:serviceaccount:"


def _first(extra: dict[str, list[str]], key: str) -> str:
    values = extra.get(key) or []
    return str(values[0]) if values else ""


async def review_token(
    transport: KubeTransport, token: str, *, audiences: Sequence[str] = ()
) -> TokenIdentity:
    """Ask the apiserver who ``token`` belongs to."""
    spec: dict[str, object] = {"token": token}
    if audiences:
        spec["audiences"] = list(audiences)
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}
    call = Call(verb="create", group="authentication.k8s.io", resource="tokenreviews")
    review = await transport.request(
        call, "POST", "/apis/authentication.k8s.io/v1/tokenreviews", body=body
    )
    status = review.get("status") or {}
    if not status.get("authenticated"):
        return TokenIdentity(authenticated=False, error=str(status.get("error", "")))
    granted = tuple(str(a) for a in status.get("audiences") or ())
    if audiences and not set(granted) & set(audiences):
        wanted = ", ".join(audiences)[:100]
        return TokenIdentity(
            authenticated=False,
            error=f"token not reviewed for the audience {wanted} (got {list(granted)[:3]})",
        )
    user = status.get("user") or {}
    username = str(user.get("username", ""))
    namespace = service_account = ""
    if username.startswith(SA_PREFIX):
        namespace, _, service_account = username[len(SA_PREFIX) :].partition(":")
    extra = user.get("extra") or {}
    pod = _first(extra, POD_NAME)
    return TokenIdentity(
        authenticated=True,
        username=username,
        namespace=namespace,
        service_account=service_account,
        pod_name=PodName(pod) if pod else None,
        pod_uid=_first(extra, POD_UID),
        audiences=granted,
    )


async def find_worker_pod(
    transport: KubeTransport, namespace: str, name: str, *, selector: str
) -> Pod | None:
    """The pod ``namespace/name`` if it matches the worker ``selector`` (else None).

    The apiserver applies the selector, so its meaning is exactly the informers' one.
    """
    call = Call(verb="list", resource="pods", namespace=namespace)
    query = {"fieldSelector": f"metadata.name={name}", "labelSelector": selector}
    listed = await transport.request(
        call, "GET", f"/api/v1/namespaces/{namespace}/pods", query=query
    )
    items = listed.get("items") or []
    return pod_from_json(items[0]) if items else None
