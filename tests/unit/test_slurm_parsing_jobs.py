"""The running-job count parser on recorded ``squeue`` output of 22.05 and 24.11, and fuzzed.

``squeue_jobs.txt`` was recorded by ``tests/data/slurm/record.py`` (command and version in
``sources.json``): n3 runs one job, n5 two, a job pending on x8 is not listed.
"""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slonkd.adapters.slurm.parsing_jobs import SQUEUE_JOBS_ARGS, parse_running_jobs
from slonkd.core.errors import ParseError
from tests.unit.recorded import RELEASES, recorded, recorded_source

RECORDED = {v: recorded(v, "squeue_jobs.txt") for v in RELEASES}


@pytest.mark.parametrize("version", sorted(RECORDED))
def test_recorded_counts(version: str) -> None:
    """Both versions: one job on n3, two on n5, nothing for idle or pending-only nodes."""
    assert parse_running_jobs(RECORDED[version]) == {"n3": 1, "n5": 2}
    source = recorded_source(version, "squeue_jobs.txt")
    assert source["command"] == ["squeue", *SQUEUE_JOBS_ARGS]
    assert source["slurm_version"].startswith(version)


@pytest.mark.parametrize(
    ("text", "counts"),
    [
        ("", {}),
        ("RUNNING|n[1-3]\n", {"n1": 1, "n2": 1, "n3": 1}),
        ("RUNNING|n[1-2],x7\nCOMPLETING|n2\n", {"n1": 1, "n2": 2, "x7": 1}),
        ("SUSPENDED|gpu-a[01-02]\nCONFIGURING|gpu-a02\n", {"gpu-a01": 1, "gpu-a02": 2}),
        ("COMPLETING|\n", {}),
        ("RUNNING|n[1,1]\n", {"n1": 1}),
    ],
)
def test_table(text: str, counts: dict[str, int]) -> None:
    """Hostlists expand; a job counts once per node; a completing job without nodes adds nothing."""
    assert parse_running_jobs(text) == counts


@pytest.mark.parametrize(
    "text",
    [
        "PENDING|n1\n",  # not a state the read asks for: squeue changed, or not our output
        "WEIRD|n1\n",
        "RUNNING|n1",  # cut off
        "RUNNING|n1\n\nRUNNING|n2\n",
        "RUNNING n1\n",
        "RUNNING|n[1-\n",
        "RUNNING|n1|x\n",
        "RUNNING|n;rm\n",
        "running|n1\n",
    ],
)
def test_malformed_output_is_a_parse_error(text: str) -> None:
    """Anything but state|hostlist lines of the asked-for states is refused, not guessed."""
    with pytest.raises(ParseError):
        parse_running_jobs(text)


def test_huge_output_is_refused() -> None:
    """Output past the limit is a ParseError before any work."""
    with pytest.raises(ParseError):
        parse_running_jobs("RUNNING|n1\n" * 7_000_000)


@given(data=st.text(max_size=2000) | st.binary(max_size=2000).map(lambda b: b.decode("latin-1")))
@settings(max_examples=300)
def test_garbage_gives_parse_error_or_counts(data: str) -> None:
    """Random input parses to positive counts of valid names, or raises ParseError."""
    with contextlib.suppress(ParseError):
        counts = parse_running_jobs(data)
        assert all(n > 0 for n in counts.values())


FULL = "RUNNING|n[1-3,10]\nCOMPLETING|n2\nSUSPENDED|x[7-8]\n" + RECORDED["22.05"]
FULL_COUNTS = parse_running_jobs(FULL)


@given(cut=st.integers(min_value=0, max_value=len(FULL) - 1))
def test_truncated_output_never_overcounts(cut: int) -> None:
    """A cut-off output raises, or (cut at a line end) counts no node above the full read."""
    try:
        counts = parse_running_jobs(FULL[:cut])
    except ParseError:
        return
    assert FULL[:cut].endswith("\n") or cut == 0
    for node, count in counts.items():
        assert count <= FULL_COUNTS[node]


@given(
    pos=st.integers(min_value=0, max_value=len(FULL) - 1),
    junk=st.text(alphabet="|[],-\n RUNINGPDCOMLTA0123456789nx", min_size=1, max_size=30),
)
@settings(max_examples=300)
def test_hostile_insertions_parse_or_raise(pos: int, junk: str) -> None:
    """Junk spliced into the output never crashes the parser."""
    with contextlib.suppress(ParseError):
        counts = parse_running_jobs(FULL[:pos] + junk + FULL[pos:])
        assert all(n > 0 for n in counts.values())
