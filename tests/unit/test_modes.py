"""The modes' rules (:mod:`slonkd.core.modes`): each mode against each kind of action.

``observe`` takes no action of the coordinator but lifecycle ones, ``quarantine`` takes all
but the ladder's rungs, ``full`` takes everything; the agent's own actions are never the
coordinator's to hold back. Neighbours: ``test_pool_modes_pass`` (the modes in a pass),
:mod:`slonkd.core.coordinator_state` (where an operator's mode is kept).
"""

from __future__ import annotations

import pytest

from slonkd.core.coordinator_state import MODES, CoordinatorState, PoolMode, StateCorrupt
from slonkd.core.modes import (
    LADDER,
    Mode,
    check_pool,
    held_back,
    mode_of,
    parse_mode,
    split,
    taken,
)
from slonkd.core.plan import Action, Kind, Plan, Writer
from slonkd.core.reasons import Cause
from slonkd.core.slurm_node import NodeName

FAILURE = Cause(name="slurm-failure")


def _act(kind: Kind, cause: Cause = FAILURE, writer: Writer = Writer.COORDINATOR) -> Action:
    return Action(kind=kind, writer=writer, cause=cause, budgeted=True)


@pytest.mark.parametrize("kind", list(Kind))
@pytest.mark.parametrize("mode", list(Mode))
def test_each_mode_takes_its_kinds_of_a_failures_actions(mode: Mode, kind: Kind) -> None:
    """observe: none; quarantine: all but eviction, reboot and manual repair; full: all."""
    expected = {
        Mode.OBSERVE: False,
        Mode.QUARANTINE: kind not in LADDER,
        Mode.FULL: True,
    }[mode]
    assert taken(_act(kind), mode) is expected


@pytest.mark.parametrize("cause", ["pod-terminating", "pod-not-ready", "rollout", "prestop"])
@pytest.mark.parametrize("kind", [Kind.DRAIN, Kind.RELEASE])
@pytest.mark.parametrize("mode", list(Mode))
def test_lifecycle_drains_and_releases_are_taken_in_every_mode(
    mode: Mode, kind: Kind, cause: str
) -> None:
    """A pod terminating, not ready or replaced: drained (and released) whatever the mode."""
    assert taken(_act(kind, Cause(name=cause)), mode)


def test_the_agents_actions_are_never_held_back() -> None:
    """The agent's drain of its terminating pod is its own: no mode holds it back."""
    assert taken(_act(Kind.DRAIN, Cause(name="health"), Writer.AGENT), Mode.OBSERVE)


def test_split_keeps_taken_actions_and_reports_the_rest() -> None:
    """Per plan, its pool's mode: held-back actions become ``Would``; full plans stay as is."""
    lifecycle = _act(Kind.DRAIN, Cause(name="pod-not-ready"))
    plans = [
        Plan(node=NodeName("a"), actions=(_act(Kind.CORDON), _act(Kind.EVICT), lifecycle)),
        Plan(node=NodeName("b"), actions=(_act(Kind.CORDON), _act(Kind.EVICT))),
        Plan(node=NodeName("c"), actions=(_act(Kind.CORDON),)),
    ]
    modes = {"obs": Mode.OBSERVE, "q": Mode.QUARANTINE}
    kept, would = split(plans, ["obs", "q", "other"], modes)
    assert [a.kind for a in kept[0].actions] == [Kind.DRAIN]
    assert [a.kind for a in kept[1].actions] == [Kind.CORDON]
    assert kept[2] is plans[2]
    assert kept[1].notes == ("pool q is in quarantine mode: would evict slurm-failure",)
    assert [(w.node, w.mode, w.action.kind) for w in would] == [
        ("a", Mode.OBSERVE, Kind.CORDON),
        ("a", Mode.OBSERVE, Kind.EVICT),
        ("b", Mode.QUARANTINE, Kind.EVICT),
    ]
    assert held_back(would) == {"a", "b"}


def test_a_dry_run_is_observe_for_every_pool() -> None:
    """The dry run wins over the operator's and the chart's modes."""
    chosen = {"a": Mode.FULL}
    assert mode_of("a", chosen=chosen, configured={}, dry_run=True) is Mode.OBSERVE
    assert mode_of("a", chosen=chosen, configured={"a": Mode.OBSERVE}, dry_run=False) is Mode.FULL
    assert mode_of("b", chosen=chosen, configured={"b": Mode.QUARANTINE}, dry_run=False) is (
        Mode.QUARANTINE
    )
    assert mode_of("c", chosen=chosen, configured={}, dry_run=False) is Mode.FULL


def test_unknown_modes_and_pools_are_refused_by_name() -> None:
    """``slonkd mode``'s and the settings' checks name what they refuse."""
    with pytest.raises(ValueError, match="unknown mode 'ful'"):
        parse_mode("ful")
    with pytest.raises(ValueError, match="unknown pool 'a b'"):
        check_pool("a b")
    assert check_pool("gpu-h100") == "gpu-h100"
    assert set(MODES) == {m.value for m in Mode}


def test_the_state_keeps_the_operators_modes() -> None:
    """A mode survives the ConfigMap's round trip; one slonkd does not know is corrupt."""
    state = CoordinatorState(pool_modes={"gpu": PoolMode(mode="observe", by="alice", at=2.0)})
    data = state.to_data()
    assert CoordinatorState.from_data(data) == state
    assert CoordinatorState.from_data({**data, "poolModes": "{}"}).pool_modes == {}
    with pytest.raises(StateCorrupt, match="poolModes"):
        CoordinatorState.from_data({**data, "poolModes": '{"gpu": {"mode": "off"}}'})
