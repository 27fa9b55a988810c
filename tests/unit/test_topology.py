"""topology.conf rendering from labels: tree and block, defaults, hostile values, scale."""

from __future__ import annotations

import random
import time

import pytest

from slonkd.core.errors import ParseError
from slonkd.core.topology import (
    STAMP_PREFIX,
    TopologySpec,
    drift,
    leaf_membership,
    render,
    render_block,
    render_tree,
    stamped,
    stamped_hash,
)

KEYS = ("zone", "spine", "leaf")


def _labels(zone: str, spine: str, leaf: str) -> dict[str, str]:
    return {"zone": zone, "spine": spine, "leaf": leaf}


def test_tree_groups_nodes_by_leaf_and_joins_the_top_under_a_root() -> None:
    """Nodes share a leaf switch by label path; two zones get a root switch above them."""
    text = render_tree(
        {
            "w-0": _labels("z1", "s1", "l1"),
            "w-1": _labels("z1", "s1", "l1"),
            "w-2": _labels("z1", "s2", "l1"),
            "w-3": _labels("z2", "s1", "l1"),
        },
        KEYS,
    )
    lines = text.splitlines()
    assert "SwitchName=l2-z1_s1_l1 Nodes=w-[0-1]" in lines
    assert (
        "SwitchName=l2-z1_s2_l1 Nodes=w-2" in lines
    )  # same leaf value, other spine: another switch
    assert "SwitchName=l1-z1_s1 Switches=l2-z1_s1_l1" in lines
    assert "SwitchName=l0-z1 Switches=l1-z1_s1,l1-z1_s2" in lines
    assert "SwitchName=sw-root Switches=l0-z1,l0-z2" in lines


def test_one_top_switch_needs_no_root_and_unlabelled_nodes_get_the_default() -> None:
    """A single top switch is the root; nodes missing any key go to sw-unlabelled under a root."""
    one = render_tree({"a": _labels("z", "s", "l")}, KEYS)
    assert "sw-root" not in one
    mixed = render_tree({"a": _labels("z", "s", "l"), "b": {"zone": "z"}, "c": {}}, KEYS)
    assert "SwitchName=sw-unlabelled Nodes=b,c" in mixed.splitlines()
    assert "SwitchName=sw-root Switches=l0-z,sw-unlabelled" in mixed.splitlines()
    assert render_tree({"b": {}}, KEYS).splitlines()[1:] == ["SwitchName=sw-unlabelled Nodes=b"]


@pytest.mark.parametrize(
    "value",
    [
        "a\nSwitchName=evil Nodes=ALL",
        "x=y",
        "a b",
        "#comment",
        "a,b",
        "[1-9]",
        "a_b",
        "é",
        "x" * 300,
    ],
)
def test_hostile_label_values_cannot_break_the_file(value: str) -> None:
    """Whatever a label holds, each line stays one switch with safe characters only."""
    text = render_tree({"n1": _labels(value, "s", "l"), "n2": _labels("z", "s", "l")}, KEYS)
    for line in text.splitlines()[1:]:
        assert line.startswith("SwitchName=")
        name = line.split()[0].split("=", 1)[1]
        assert all(ch.isalnum() or ch in "-_" for ch in name)
        assert len(name) <= 60
        assert len(line.split()) == 2
    assert leaf_membership(text)["n1"] != leaf_membership(text)["n2"]


def test_underscores_cannot_make_two_paths_collide() -> None:
    """('a_b', 'c') and ('a', 'b_c') are different switches."""
    text = render_tree({"n1": _labels("a_b", "c", "l"), "n2": _labels("a", "b_c", "l")}, KEYS)
    members = leaf_membership(text)
    assert members["n1"] != members["n2"]


def test_bad_node_names_are_refused() -> None:
    """A SLURM node name with odd characters is a ParseError, not a line in the file."""
    with pytest.raises(ParseError):
        render_tree({"n1 Nodes=ALL": {}}, KEYS)


def test_block_plugin_one_block_per_label_value() -> None:
    """Blocks follow the NVLink-domain label; unlabelled nodes form their own block."""
    text = render_block(
        {"a": {"nvl": "d1"}, "b": {"nvl": "d1"}, "c": {"nvl": "d.2"}, "d": {}}, "nvl", [2, 4]
    )
    lines = text.splitlines()
    assert "BlockName=b-d1 Nodes=a,b" in lines
    assert any(line.startswith("BlockName=b-d-2-") and line.endswith(" Nodes=c") for line in lines)
    assert "BlockName=b-unlabelled Nodes=d" in lines
    assert lines[-1] == "BlockSizes=2,4"
    with pytest.raises(ValueError, match="positive"):
        render_block({"a": {}}, "nvl", [0])


def test_rendering_is_deterministic_and_hashed() -> None:
    """The same labels in any order give the same text and hash; a change changes the hash."""
    labels = {f"w-{i}": _labels("z", f"s{i % 3}", f"l{i % 7}") for i in range(50)}
    shuffled = dict(random.Random(7).sample(sorted(labels.items()), len(labels)))  # noqa: S311
    spec = TopologySpec(tree_keys=KEYS)
    assert render(labels, spec) == render(shuffled, spec)
    labels["w-0"] = _labels("z", "s9", "l9")
    assert render(labels, spec).sha256 != render(shuffled, spec).sha256
    with pytest.raises(ValueError, match="unknown topology plugin"):
        render(labels, TopologySpec(plugin="torus"))


def test_thousands_of_nodes_render_compactly() -> None:
    """5,000 nodes in 20 racks render to a few dozen lines, each rack's nodes as one range."""
    labels = {f"w-{i}": _labels("z", f"s{i // 1000}", f"r{i // 250}") for i in range(5000)}
    began = time.monotonic()
    text = render(labels, TopologySpec(tree_keys=KEYS)).text
    assert time.monotonic() - began < 5  # generous: a sanity bound, the benchmark measures
    assert len(text.splitlines()) < 40
    members = leaf_membership(text)
    assert len(members) == 5000
    assert members["w-0"] == members["w-249"] != members["w-250"]


def test_leaf_membership_reads_scontrol_show_topology() -> None:
    """`scontrol show topology` lines (with Level= and upper switches) map nodes to leaves."""
    shown = (
        "SwitchName=l2-z1_s1_l1 Level=0 LinkSpeed=1 Nodes=n[2,4],x[2,4]\n"
        "SwitchName=sw-unlabelled Level=0 LinkSpeed=1 Nodes=x6\n"
        "SwitchName=l1-z1_s1 Level=1 LinkSpeed=1 Nodes=n[1-4],x[1-5] Switches=l2-z1_s1_l1\n"
    )
    assert leaf_membership(shown) == {
        "n2": "l2-z1_s1_l1",
        "n4": "l2-z1_s1_l1",
        "x2": "l2-z1_s1_l1",
        "x4": "l2-z1_s1_l1",
        "x6": "sw-unlabelled",
    }
    with pytest.raises(ParseError):
        leaf_membership("SwitchName=s Nodes=n[1-")


def test_a_stamped_file_carries_its_hash_and_a_changed_copy_does_not() -> None:
    """The stamp line names the content's hash; a truncated or edited copy reads as None."""
    rendered = render({"w-0": _labels("z", "s", "l")}, TopologySpec(tree_keys=KEYS))
    text = stamped(rendered)
    assert text.startswith(STAMP_PREFIX)
    assert stamped_hash(text) == rendered.sha256
    assert stamped_hash(text[:-5]) is None  # mid-update or truncated
    assert stamped_hash(text.replace("w-0", "w-1")) is None  # edited by hand
    assert stamped_hash(rendered.text) is None  # no stamp: the chart's placeholder, say
    assert stamped_hash("") is None
    assert leaf_membership(text) == leaf_membership(rendered.text)  # the stamp is a comment


def test_drift_lists_nodes_whose_leaf_differs_or_is_missing() -> None:
    """Moved, missing on either side: drift; equal: none."""
    assert drift({"a": "s1", "b": "s2"}, {"a": "s1", "b": "s2"}) == {}
    assert drift({"a": "s1", "b": "s2", "c": "s3"}, {"a": "s1", "b": "s9", "d": "s1"}) == {
        "b": ("s2", "s9"),
        "c": ("s3", ""),
        "d": ("", "s1"),
    }
