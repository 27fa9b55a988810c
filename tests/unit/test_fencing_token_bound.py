"""A state token no Lease can exceed: a leader still takes the term, pauses, and a reset frees it.

Issue 37 item 8a. The fencing token is the Lease's ``spec.leaseTransitions``, an int32; a new
term's token is above the state's last one (the elector's floor). A state claiming a token at
or above 2^31-1 asked every acquire for a ``leaseTransitions`` the apiserver refuses: no
leader, ever, and nothing said why. It is corrupt state: the term starts, its pass pauses
and names ``slonkd state reset --yes-discard-state``, and the reset does not keep the token.
The real :class:`~slonkd.adapters.kube.lease.LeaderElector`,
:class:`~slonkd.adapters.kube.state.StateStore` and
:class:`~slonkd.runtime.coordinating.remembering.Memory` run over an apiserver faked in memory
(it refuses an int32 overflow as the real one does). Neighbours: ``test_coordinator_state``
(the encoding), ``test_coordinator_term_end`` (the claim), the contract ``test_kube_lease``.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any, cast

from slonkd.adapters.kube.errors import Call, KubeConflict, KubeInvalid, KubeNotFound
from slonkd.adapters.kube.lease import LeaderElector, LeaseSettings
from slonkd.adapters.kube.state import StateStore
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.core.coordinator_state import CoordinatorState
from slonkd.runtime.coordinating.remembering import Memory
from tests.unit.coordinator_fakes import (
    FakeEvents,
)

INT32_MAX = 2**31 - 1


class _Apiserver:
    """One ConfigMap and one Lease in memory: GET, POST, PUT with resourceVersion checks."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self._version = 0

    def put_object(self, path: str, obj: dict[str, Any]) -> None:
        """Store ``obj`` at ``path`` with a new resourceVersion."""
        self._version += 1
        obj = copy.deepcopy(obj)
        obj.setdefault("metadata", {})["resourceVersion"] = str(self._version)
        self.objects[path] = obj

    async def request(
        self, call: Call, method: str, path: str, *, body: Any = None, **_: Any
    ) -> dict[str, Any]:
        """The apiserver's answer (a slonkd error where it would refuse)."""
        if method == "GET":
            if path not in self.objects:
                raise KubeNotFound(f"{call}: not found")
            return copy.deepcopy(self.objects[path])
        if method == "POST":
            path = f"{path}/{body['metadata']['name']}"
            if path in self.objects:
                raise KubeConflict(f"{call}: already exists")
        elif method == "PUT":
            held = self.objects.get(path)
            if held is None:
                raise KubeNotFound(f"{call}: not found")
            if body["metadata"].get("resourceVersion") != held["metadata"]["resourceVersion"]:
                raise KubeConflict(f"{call}: the object has been modified")
        else:
            raise AssertionError(f"unexpected {method} {path}")
        transitions = (body.get("spec") or {}).get("leaseTransitions", 0)
        if not -(2**31) <= transitions <= INT32_MAX:
            raise KubeInvalid(
                f"{call}: json: cannot unmarshal number {transitions} into Go struct field "
                "LeaseSpec.spec.leaseTransitions of type int32"
            )
        self.put_object(path, body)
        return copy.deepcopy(self.objects[path])


NS = "slonk"
STATE_PATH = f"/api/v1/namespaces/{NS}/configmaps/slonkd-state"
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/slonkd"


async def _first_term(elector: LeaderElector) -> tuple[int, asyncio.Task[None]]:
    """The token of the elector's first term, and its campaign (running it until cancelled)."""
    got: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def work(token: int) -> None:
        got.set_result(token)
        await asyncio.Event().wait()  # lead until the test ends

    campaign = asyncio.create_task(elector.run(work))
    either: set[asyncio.Future[Any]] = {campaign, got}
    await asyncio.wait(either, timeout=5, return_when=asyncio.FIRST_COMPLETED)
    if campaign.done():
        campaign.result()  # the campaign's error, as it is
    assert got.done(), "no term within 5 s"
    return got.result(), campaign


async def test_a_state_token_no_lease_can_exceed_pauses_the_term_and_a_reset_frees_it() -> None:
    """State token 2^31-1: a term starts (token 5), paused; the reset keeps no token; it acts."""
    api = _Apiserver()
    good = CoordinatorState(fencing_token=3).to_data()
    api.put_object(STATE_PATH, {"metadata": {"name": "slonkd-state"}, "data": good})
    api.objects[STATE_PATH]["data"]["fencingToken"] = str(INT32_MAX)
    api.put_object(LEASE_PATH, {"metadata": {"name": "slonkd"}, "spec": {"leaseTransitions": 4}})
    transport = cast(KubeTransport, api)
    store = StateStore(transport, NS, "slonkd-state")
    lease = LeaseSettings(name="slonkd", namespace=NS, identity="c-0")
    elector = LeaderElector(transport, lease, floor=store.last_token)
    token, campaign = await _first_term(elector)
    try:
        assert token == 5  # the Lease's next, not above the impossible state token
        memory = Memory(store=store, events=FakeEvents(), namespace=NS, name="slonkd-state")
        await memory.claim(token)  # corrupt: left to the pass
        state = await memory.load()
        assert state.paused
        assert "slonkd state reset --yes-discard-state" in state.paused_reason
        _, reset = await store.discard("alice")  # what `slonkd state reset` does
        assert reset.fencing_token == -1  # not the impossible one
        await memory.claim(token)
        state = await memory.load()
        assert (state.paused, state.fencing_token) == (False, token)
    finally:
        campaign.cancel()
        await asyncio.gather(campaign, return_exceptions=True)
