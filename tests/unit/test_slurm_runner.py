"""Pure helpers of the SLURM adapter: hostlist chunking and error translation."""

from __future__ import annotations

import random

import hostlist
import pytest
from hypothesis import given
from hypothesis import strategies as st

from slonkd.adapters.slurm.hostlists import chunk_hostlists, compress
from slonkd.adapters.slurm.runner import (
    InvalidNodeStateError,
    NodeNotFoundError,
    NotReachedError,
    PermissionDeniedError,
    translate_failure,
)
from slonkd.core.errors import OutcomeUnknownError, TerminalError, TransientError


def test_random_thousand_of_five_thousand_fit_in_few_chunks() -> None:
    """1,000 random nodes of 5,000 compress into a handful of bounded hostlists."""
    names = random.Random(4).sample([f"x{i}" for i in range(1, 5001)], 1000)  # noqa: S311 - seeded choice of test nodes
    chunks = chunk_hostlists(names, 8192)
    assert 1 <= len(chunks) <= 4
    assert all(len(c) <= 8192 for c in chunks)
    expanded = [n for c in chunks for n in hostlist.expand_hostlist(c)]
    assert sorted(expanded) == sorted(names)


@given(
    names=st.sets(st.integers(min_value=1, max_value=100_000), min_size=1, max_size=300),
    limit=st.integers(min_value=8, max_value=400),
)
def test_chunks_cover_every_node_exactly_once_within_the_limit(names: set[int], limit: int) -> None:
    """Chunks cover the names exactly once; each fits the limit unless one name is longer."""
    wanted = [f"gpu{i:05d}" for i in names]
    chunks = chunk_hostlists(wanted, limit)
    expanded = [n for c in chunks for n in hostlist.expand_hostlist(c)]
    assert sorted(expanded) == sorted(wanted)
    assert all(len(c) <= limit or ("," not in c and "[" not in c) for c in chunks)


def test_compress_is_a_slurm_hostlist() -> None:
    """Names compress into SLURM's bracket syntax."""
    assert compress(["n3", "n1", "n2", "x7"]) == "n[1-3],x7"


CONNECT_FAILURE = "slurm_update error: Unable to contact slurm controller (connect failure)"
NOT_RESOLVED = (
    'scontrol: error: slurm_set_addr: Unable to resolve "ctld"\n'
    "scontrol: error: Unable to establish control machine address"
)  # 22.05 with a SlurmctldHost that does not resolve: no "slurm_update error" line at all

ERRORS = [  # reads
    (CONNECT_FAILURE, TransientError),
    # a read does not retry it, as before issue 37 item 2 (made transient, the e2e
    # test_slurmctlds_name_not_resolving... failed: reverted in 97b45b9)
    (NOT_RESOLVED, TerminalError),
    ("slurm_load_node error: Socket timed out on send/recv operation", TransientError),
    ("slurm_load_node error: Connection reset by peer", TransientError),
    ("slurm_update error: Invalid node name specified", NodeNotFoundError),
    ("Node n9 not found", NodeNotFoundError),
    ("slurm_update error: Invalid node state specified", InvalidNodeStateError),
    ("slurm_update error: Access/permission denied", PermissionDeniedError),
    ("Invalid job id specified for job 99", TerminalError),
]


@pytest.mark.parametrize(("stderr", "kind"), ERRORS)
def test_failures_translate_to_slonkd_errors(stderr: str, kind: type[Exception]) -> None:
    """SLURM's messages map to transient (retry) or terminal (report) errors."""
    err = translate_failure("scontrol", ("update",), 1, stderr)
    assert type(err) is kind
    assert stderr in str(err)


WRITE_ERRORS = [
    (CONNECT_FAILURE, NotReachedError),
    (NOT_RESOLVED, NotReachedError),
    ("slurm_update error: Slurm backup controller in standby mode", NotReachedError),
    ("slurm_update error: Socket timed out on send/recv operation", OutcomeUnknownError),
    ("slurm_update error: Zero Bytes were transmitted or received", OutcomeUnknownError),
    ("slurm_update error: Unable to contact slurm controller (send failure)", OutcomeUnknownError),
    ("slurm_update error: Connection reset by peer", OutcomeUnknownError),
    # two controllers: the first not resolved, the second took the request and timed out
    (f"{NOT_RESOLVED}\nslurm_update error: Socket timed out on send/recv", OutcomeUnknownError),
    ("slurm_update error: Invalid node state specified", InvalidNodeStateError),
    ("slurm_update error: Access/permission denied", PermissionDeniedError),
]


@pytest.mark.parametrize(("stderr", "kind"), WRITE_ERRORS)
def test_a_write_that_may_have_arrived_is_an_unknown_outcome(
    stderr: str, kind: type[Exception]
) -> None:
    """A write goes again only when it never reached slurmctld; else its outcome is unknown.

    Issue 37 item 2: a resume slurmctld applied but answered late was sent again after an
    operator's drain and cleared it. A read of the same failure stays a plain retry.
    """
    err = translate_failure("scontrol", ("update",), 1, stderr, write=True)
    assert type(err) is kind
    read = translate_failure("scontrol", ("show",), 1, stderr)
    assert not isinstance(read, OutcomeUnknownError | NotReachedError)
    if stderr != NOT_RESOLVED:  # a read of a name not resolved is terminal (ERRORS)
        assert isinstance(read, TransientError) == isinstance(err, TransientError)


def test_a_write_killed_by_a_signal_has_an_unknown_outcome() -> None:
    """A client killed mid-call may have sent its request: unknown for a write, retry for a read."""
    assert type(translate_failure("scontrol", ("update",), -9, "", write=True)) is (
        OutcomeUnknownError
    )
    assert type(translate_failure("scontrol", ("show",), -9, "")) is TransientError


def test_long_stderr_is_truncated() -> None:
    """stderr in an error is cut to its last kilobyte."""
    err = translate_failure("scontrol", ("x",), 1, "y" * 100_000)
    assert len(str(err)) < 1500
