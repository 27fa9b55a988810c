"""topology.conf rendering from labels: tree and block, defaults, hostile values, scale."""

from __future__ import annotations

import random
import time

import hostlist
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slonkd.core.errors import ParseError
from slonkd.core.topology import (
    STAMP_PREFIX,
    TopologySpec,
    UnsafeTopology,
    block_sizes,
    check,
    check_block,
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
        {"a": {"nvl": "d1"}, "b": {"nvl": "d1"}, "c": {"nvl": "d.2"}, "e": {"nvl": "d.2"}}
        | {"d": {}, "f": {}},
        "nvl",
        [4, 2],
    )
    lines = text.splitlines()
    assert "BlockName=b-d1 Nodes=a,b" in lines
    assert any(
        line.startswith("BlockName=b-d-2-") and line.endswith(" Nodes=c,e") for line in lines
    )
    assert "BlockName=b-unlabelled Nodes=d,f" in lines
    assert lines[-1] == "BlockSizes=2,4"  # sorted: 24.11 takes the first as the base
    with pytest.raises(ValueError, match="positive"):
        render_block({"a": {}}, "nvl", [0])


def test_uneven_blocks_without_sizes_get_the_smallest_block_as_base() -> None:
    """3 + 2 + 1 unlabelled (24.11 died on this): base 1, SLURM's default levels above it."""
    labels = {"n1": {"nvl": "a"}, "n2": {"nvl": "a"}, "n3": {"nvl": "a"}}
    labels |= {"n4": {"nvl": "b"}, "n5": {"nvl": "b"}, "n6": {}}
    rendered = render(labels, TopologySpec(plugin="block", block_key="nvl"))
    lines = rendered.text.splitlines()
    assert lines[1:] == [
        "BlockName=b-a Nodes=n[1-3]",
        "BlockName=b-b Nodes=n[4-5]",
        "BlockName=b-unlabelled Nodes=n6",
        "BlockSizes=1,2,4,8,16",
    ]
    assert rendered.left_out == ()
    assert check_block(rendered.text) == []
    # the file a colleague saw kill slurmctld: no BlockSizes, the bigger block first
    fatal = "BlockName=b-a Nodes=n[1-2]\nBlockName=b-unlabelled Nodes=n3\n"
    assert check_block(fatal) == [
        "block b-unlabelled has 1 nodes, fewer than the base block size 2"
    ]


def test_blocks_under_the_configured_base_are_left_out() -> None:
    """Configured sizes are a promise: smaller blocks go out of the file, and are reported."""
    labels = {f"a{i}": {"nvl": "a"} for i in range(4)} | {f"b{i}": {"nvl": "b"} for i in range(3)}
    labels |= {"u0": {}}
    rendered = render(labels, TopologySpec(plugin="block", block_key="nvl", block_sizes=(4, 8)))
    assert rendered.left_out == (("b-b", 3), ("b-unlabelled", 1))
    members = leaf_membership(rendered.text)
    assert set(members) == {f"a{i}" for i in range(4)}
    assert rendered.text.splitlines()[-1] == "BlockSizes=4,8"
    assert "# left out, fewer nodes than the base block size 4: b-b (3), b-unlabelled (1)" in (
        rendered.text.splitlines()
    )
    assert check("anything", "tree") == []  # only block files are checked
    assert check(rendered.text, "block", known=labels) == []


def test_no_block_big_enough_or_no_nodes_is_refused() -> None:
    """Nothing 24.11 accepts: UnsafeTopology (the coordinator keeps slurmctld's file)."""
    with pytest.raises(UnsafeTopology, match="fewer nodes than the base block size 4"):
        render_block({"a": {"nvl": "x"}, "b": {}}, "nvl", [4])
    with pytest.raises(UnsafeTopology, match="no SLURM nodes"):
        render_block({}, "nvl")


@pytest.mark.parametrize(
    ("sizes", "why"),
    [([4, 6], "not 6"), ([3, 9], "not 9"), ([1, 1 << 16], "power of two"), ([2, 0], "positive")],
)
def test_block_sizes_24_11_refuses_are_refused(sizes: list[int], why: str) -> None:
    """BlockSizes must be the base times powers of two up to 2**15 (24.11: fatal otherwise)."""
    with pytest.raises(ValueError, match=why):
        block_sizes(sizes)
    assert block_sizes([8, 2, 4, 2, 1 << 16]) == (2, 4, 8, 1 << 16)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("BlockName=a Nodes=n[1-2]\nBlockName=a Nodes=n3\nBlockSizes=1\n", "defined twice"),
        ("BlockName=a Nodes=n[1-2]\nBlockSizes=4\n", "fewer than the base block size 4"),
        ("BlockName=a Nodes=n[1-4]\nBlockSizes=2,6\n", "not 2 times a power of two"),
        ("BlockName=a Nodes=n[1-4]\nBlockSizes=2,x\n", "positive integers"),
        ("BlockName=a Nodes=n1\nBlockSizes=1\nblocksizes=1\n", "more than one BlockSizes"),
        ("BlockName=a\n", "has no nodes"),
        ("BlockName=a Nodes=n[1-\n", "bad node list"),
        ("# only a comment\n", "no blocks"),
        ("SwitchName=s Nodes=n1\n", "not a block line"),
    ],
)
def test_check_block_names_what_24_11_dies_on(text: str, why: str) -> None:
    """Each rule of 24.11's block_record.c is a named problem."""
    assert any(why in problem for problem in check_block(text)), check_block(text)


def test_check_block_counts_only_nodes_slurmctld_has() -> None:
    """Unknown names are only a warning in slurmctld, but they do not make a block big enough."""
    text = "BlockName=a Nodes=n[1-4]\nBlockName=b Nodes=n5,ghost[1-3]\nBlockSizes=4\n"
    assert check_block(text) == []
    assert check_block(text, known=[f"n{i}" for i in range(1, 6)]) == [
        "block b has 1 nodes, fewer than the base block size 4"
    ]
    assert check_block("BlockName=a Nodes=ghost\n", known=["n1"]) == ["blocks contain no nodes"]


def test_a_big_block_stays_on_one_line() -> None:
    """24.11 dies on a repeated BlockName, so a block is never split across lines."""
    labels: dict[str, dict[str, str]] = {
        f"w{i * 7919 % 10007}": {} for i in range(5000)
    }  # scattered: long hostlist
    text = render_block(labels, "nvl")
    assert len(text.splitlines()) == 3
    assert len(leaf_membership(text)) == 5000
    assert check_block(text, known=labels) == []


_LABEL_VALUES = st.sampled_from(["a", "b", "c.d", "x" * 70, "e f", "", "é", "a_b"])


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.from_regex(r"[a-z][a-z0-9-]{0,6}", fullmatch=True),
        st.one_of(st.just({}), st.builds(lambda v: {"nvl": v}, _LABEL_VALUES)),
        max_size=40,
    ),
    st.one_of(
        st.just(()),
        st.builds(
            lambda base, levels: tuple(base << lvl for lvl in levels),
            st.integers(1, 12),
            st.lists(st.integers(0, 15), min_size=1, max_size=4),
        ),
    ),
)
def test_any_labels_render_a_block_file_24_11_accepts(
    labels: dict[str, dict[str, str]], sizes: tuple[int, ...]
) -> None:
    """For any labels and valid sizes: a file passing 24.11's rules, or a refusal.

    Every node is either in exactly one block or in a reported left-out block, and nodes
    are only left out when sizes were configured.
    """
    spec = TopologySpec(plugin="block", block_key="nvl", block_sizes=sizes)
    try:
        rendered = render(labels, spec)
    except UnsafeTopology:
        assert not labels or sizes  # refused only without nodes or under a configured base
        return
    assert check_block(rendered.text, known=labels) == []
    members = leaf_membership(rendered.text)
    assert sum(n for _, n in rendered.left_out) + len(members) == len(labels)
    assert set(members) <= set(labels)
    if not sizes:
        assert rendered.left_out == ()
    assert all(n < min(sizes) for _, n in rendered.left_out)
    names = [ln.split()[0] for ln in rendered.text.splitlines() if ln.startswith("BlockName=")]
    assert len(names) == len(set(names))
    for line in rendered.text.splitlines():
        if line.startswith("BlockName="):
            assert hostlist.expand_hostlist(line.split()[1].removeprefix("Nodes="))


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
