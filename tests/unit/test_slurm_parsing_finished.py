"""The finished-jobs parser (the job-outcome source of the job-failure blame), and fuzzed."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slonkd.adapters.slurm.parsing_finished import (
    SQUEUE_FINISHED_ARGS,
    FinishedJob,
    parse_finished_jobs,
)
from slonkd.core.errors import ParseError
from slonkd.core.slurm_job import JobId, JobState
from slonkd.core.slurm_node import NodeName


def _job(job_id: int, state: JobState, code: int, *nodes: str) -> FinishedJob:
    return FinishedJob(
        job_id=JobId(job_id), state=state, exit_code=code, nodes=tuple(NodeName(n) for n in nodes)
    )


def test_the_read_asks_for_four_fields_and_no_job_name() -> None:
    """Only id, state, exit code and nodes are read: a user's job name can forge nothing."""
    fmt = next(a for a in SQUEUE_FINISHED_ARGS if a.startswith("--Format="))
    assert [f.split(":")[0] for f in fmt.removeprefix("--Format=").split(",")] == [
        "JobID",
        "State",
        "exit_code",
        "NodeList",
    ]
    assert "RUNNING" not in next(a for a in SQUEUE_FINISHED_ARGS if a.startswith("--states="))


@pytest.mark.parametrize(
    ("text", "jobs"),
    [
        ("", []),
        ("7|FAILED|42:0|n[1-2]|\n", [_job(7, JobState.FAILED, 42, "n1", "n2")]),
        (
            "12   |NODE_FAIL |0:0 |w-[3,5]  |\n3|COMPLETED|0:0|n1|\n",
            [_job(12, JobState.NODE_FAIL, 0, "w-3", "w-5"), _job(3, JobState.COMPLETED, 0, "n1")],
        ),
        ("9|CANCELLED|0:15||\n", [_job(9, JobState.CANCELLED, 0)]),
        ("9|CANCELLED|0:0|(null)|\n", [_job(9, JobState.CANCELLED, 0)]),
        ("4|TIMEOUT|0|gpu-a01|\n", [_job(4, JobState.TIMEOUT, 0, "gpu-a01")]),
        ("5|FAILED|10752|n1|\n", [_job(5, JobState.FAILED, 42, "n1")]),  # 22.05: wait status
        ("6|NODE_FAIL|9|n1|\n", [_job(6, JobState.NODE_FAIL, 0, "n1")]),  # 22.05: killed
    ],
)
def test_table(text: str, jobs: list[FinishedJob]) -> None:
    """Padding is stripped, hostlists expand, a job that never ran has no nodes."""
    assert parse_finished_jobs(text) == jobs


@pytest.mark.parametrize(
    "text",
    [
        "7|RUNNING|0:0|n1|\n",  # not a state the read asks for
        "7|PENDING|0:0||\n",
        "7|WEIRD|0:0|n1|\n",
        "7|FAILED|42:0|n1|",  # cut off
        "7|FAILED|42:0|n1\n",  # no trailing separator
        "7|FAILED|42:0|n1|x|\n",  # a field too many
        "7|FAILED|n1|\n",
        "x7|FAILED|42:0|n1|\n",
        "|FAILED|42:0|n1|\n",
        "7|FAILED|300:0|n1|\n",  # not an exit code
        "7|FAILED|-1|n1|\n",
        "7|FAILED|65536|n1|\n",  # not a wait status
        "7|FAILED|42:300|n1|\n",
        "7|FAILED|42:0|n[1-|\n",
        "7|FAILED|42:0|n1;rm|\n",
        "7|FAILED|42:0|n1 n2|\n",
        "7|FAILED|42:0|n1|\n7|FAILED|42:0|n1|\n",  # listed twice
        "7|FAILED|42:0|n1|\n\n",
        "failed|7|42:0|n1|\n",
    ],
)
def test_malformed_output_is_refused(text: str) -> None:
    """Anything but the asked-for shape is a ParseError: the whole read, nothing guessed."""
    with pytest.raises(ParseError):
        parse_finished_jobs(text)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from("0123456789|:FAILEDNOCMPT_[]-,n \n"), max_size=80))
def test_fuzzed_output_parses_or_is_refused(text: str) -> None:
    """Arbitrary text never raises anything but ParseError, and what parses is well-formed."""
    try:
        jobs = parse_finished_jobs(text)
    except ParseError:
        return
    for job in jobs:
        assert 0 <= job.exit_code <= 255
        assert job.state is not JobState.UNRECOGNISED
