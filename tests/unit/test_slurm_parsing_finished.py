"""The finished-jobs parser (the job-outcome source of the job-failure blame), and fuzzed."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slonkd.adapters.slurm.parsing_finished import (
    SQUEUE_FINISHED_ARGS,
    FinishedJob,
    parse_finished_jobs,
)
from slonkd.core.errors import ParseError
from slonkd.core.slurm_job import JobState
from tests.unit.jobs import finished_job

START, END = "2026-12-01T10:00:00", "2026-12-01T10:05:00"
T = f"{START}|{END}|1000|"
"""The start, end and uid fields of a line (UTC: the clients run with TZ=UTC0)."""


def _job(job_id: int, state: JobState, code: int, *nodes: str, ran: bool = True) -> FinishedJob:
    start, end = (datetime.fromisoformat(t).replace(tzinfo=UTC).timestamp() for t in (START, END))
    return finished_job(
        job_id,
        *nodes,
        state=state,
        code=code,
        start=start if ran else None,
        end=end if ran else None,
    )


def test_the_read_asks_for_seven_fields_and_no_job_name() -> None:
    """Id, state, exit code, nodes, start, end, uid: a user's job name can forge nothing."""
    fmt = next(a for a in SQUEUE_FINISHED_ARGS if a.startswith("--Format="))
    assert [f.split(":")[0] for f in fmt.removeprefix("--Format=").split(",")] == [
        "JobID",
        "State",
        "exit_code",
        "NodeList",
        "StartTime",
        "EndTime",
        "UserID",
    ]
    assert "RUNNING" not in next(a for a in SQUEUE_FINISHED_ARGS if a.startswith("--states="))


@pytest.mark.parametrize(
    ("text", "jobs"),
    [
        ("", []),
        (f"7|FAILED|42:0|n[1-2]|{T}\n", [_job(7, JobState.FAILED, 42, "n1", "n2")]),
        (
            f"12   |NODE_FAIL |0:0 |w-[3,5]  |{START} |{END}  |1000 |\n3|COMPLETED|0:0|n1|{T}\n",
            [_job(12, JobState.NODE_FAIL, 0, "w-3", "w-5"), _job(3, JobState.COMPLETED, 0, "n1")],
        ),
        ("9|CANCELLED|0:15||Unknown|Unknown|1000|\n", [_job(9, JobState.CANCELLED, 0, ran=False)]),
        ("9|CANCELLED|0:0|(null)|N/A|None|1000|\n", [_job(9, JobState.CANCELLED, 0, ran=False)]),
        (f"4|TIMEOUT|0|gpu-a01|{T}\n", [_job(4, JobState.TIMEOUT, 0, "gpu-a01")]),
        (f"5|FAILED|10752|n1|{T}\n", [_job(5, JobState.FAILED, 42, "n1")]),  # 22.05: wait status
        (f"6|NODE_FAIL|9|n1|{T}\n", [_job(6, JobState.NODE_FAIL, 0, "n1")]),  # 22.05: killed
    ],
)
def test_table(text: str, jobs: list[FinishedJob]) -> None:
    """Padding is stripped, hostlists expand, a job that never ran has no nodes nor times."""
    assert parse_finished_jobs(text) == jobs


def test_times_given_as_seconds_since_the_epoch_are_read_as_they_are() -> None:
    """``SLURM_TIME_FORMAT=%s`` in slurmctld's environment: no zone to guess."""
    (job,) = parse_finished_jobs("7|FAILED|42:0|n1|1800000000|1800000060|0|\n")
    assert (job.start, job.end, job.user) == (1_800_000_000.0, 1_800_000_060.0, 0)


@pytest.mark.parametrize(
    "text",
    [
        f"7|RUNNING|0:0|n1|{T}\n",  # not a state the read asks for
        f"7|PENDING|0:0||{T}\n",
        f"7|WEIRD|0:0|n1|{T}\n",
        f"7|FAILED|42:0|n1|{T}",  # cut off
        f"7|FAILED|42:0|n1|{T[:-1]}\n",  # no trailing separator
        f"7|FAILED|42:0|n1|{T}x|\n",  # a field too many
        "7|FAILED|42:0|n1|\n",  # the four fields of the old read
        f"7|FAILED|n1|{T}\n",
        f"x7|FAILED|42:0|n1|{T}\n",
        f"|FAILED|42:0|n1|{T}\n",
        f"7|FAILED|300:0|n1|{T}\n",  # not an exit code
        f"7|FAILED|-1|n1|{T}\n",
        f"7|FAILED|65536|n1|{T}\n",  # not a wait status
        f"7|FAILED|42:300|n1|{T}\n",
        f"7|FAILED|42:0|n[1-|{T}\n",
        f"7|FAILED|42:0|n1;rm|{T}\n",
        f"7|FAILED|42:0|n1 n2|{T}\n",
        f"7|FAILED|42:0|n1|{T}\n7|FAILED|42:0|n1|{T}\n",  # listed twice
        f"7|FAILED|42:0|n1|{T}\n\n",
        f"failed|7|42:0|n1|{T}\n",
        f"7|FAILED|42:0|n1|yesterday|{END}|1000|\n",  # not a time
        f"7|FAILED|42:0|n1|2026-13-01T10:00:00|{END}|1000|\n",
        f"7|FAILED|42:0|n1|{START}|{END}|alice|\n",  # a name, not the uid
        f"7|FAILED|42:0|n1|{START}|{END}||\n",
    ],
)
def test_malformed_output_is_refused(text: str) -> None:
    """Anything but the asked-for shape is a ParseError: the whole read, nothing guessed."""
    with pytest.raises(ParseError):
        parse_finished_jobs(text)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from("0123456789|:FAILEDNOCMPT_[]-,n \n"), max_size=120))
def test_fuzzed_output_parses_or_is_refused(text: str) -> None:
    """Arbitrary text never raises anything but ParseError, and what parses is well-formed."""
    try:
        jobs = parse_finished_jobs(text)
    except ParseError:
        return
    for job in jobs:
        assert 0 <= job.exit_code <= 255
        assert job.state is not JobState.UNRECOGNISED


def test_a_jobs_times_are_read_as_utc_whatever_this_processs_zone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The clients run with TZ=UTC0 (runner.client_env): a start of 10:00 is 10:00 UTC.

    Read as this process's local time, a coordinator in another zone placed every job
    hours away from the pods that ran it.
    """
    monkeypatch.setenv("TZ", "EST+5")
    time.tzset()
    try:
        (job,) = parse_finished_jobs(f"7|FAILED|1:0|n1|{T}\n")
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert job.start == datetime(2026, 12, 1, 10, 0, tzinfo=UTC).timestamp()
    assert job.end == datetime(2026, 12, 1, 10, 5, tzinfo=UTC).timestamp()
