"""Which updates a primed scontrol may take (``primed.line_of``): scontrol's line is not argv."""

from __future__ import annotations

import pytest

from slonkd.adapters.slurm.primed import line_of
from slonkd.core.reasons import Cause, format_reason, sanitise_text


def test_slonkds_own_drain_is_one_line_with_the_reason_quoted() -> None:
    """nodename and state as they are, the reason double-quoted (scontrol strips those)."""
    reason = format_reason(Cause.parse("pod-terminating"), "pod is terminating")
    line = line_of(["nodename=w-[0-3,7]", "state=drain", f"reason={reason}"])
    assert line == f'update nodename=w-[0-3,7] state=drain reason="{reason}"\n'
    assert line_of(["nodename=n1", "state=resume"]) == "update nodename=n1 state=resume\n"


@pytest.mark.parametrize(
    "args",
    [
        ["nodename=n1", "state=drain", 'reason=a "quoted" word'],
        ["nodename=n1", "state=drain", "reason=back\\slash"],
        ["nodename=n1", "state=drain", "reason=it's"],
        ["nodename=n1", "state=drain", "reason=two\nlines"],
        ["nodename=n1", "state=drain", "reason=k=v"],
        ["nodename=n1", "state=drain", "reason= padded "],
        ["nodename=n1", "state=drain", "reason="],
        ["nodename=n1 n2", "state=drain"],
        ["nodename=n1", "state=drain reason=x"],
        ["nodename=n1", "extra={\"slonkd\":[]}"],
        ["nodename=n1", "weight=1"],
        ["nodename"],
        [],
    ],
    ids=[
        "double-quote", "backslash", "single-quote", "newline", "equals", "padded", "empty",
        "space-in-name", "space-in-state", "extra", "other-key", "no-value", "nothing",
    ],
)  # fmt: skip
def test_anything_else_takes_the_argv_path(args: list[str]) -> None:
    """A value scontrol's line parser could read differently from argv gives no line."""
    assert line_of(args) is None


def test_sanitised_free_text_with_a_quote_still_takes_argv() -> None:
    """sanitise_text turns " into ': still outside the primed set, so argv carries it."""
    reason = format_reason(Cause.parse("pod-terminating"), sanitise_text('it is "done"'))
    assert line_of(["nodename=n1", "state=drain", f"reason={reason}"]) is None


def test_a_line_too_long_for_scontrols_buffer_takes_argv() -> None:
    """A hostlist of 600 single nodes: far past the line limit, so argv (no silent no-op)."""
    many = ",".join(f"n{i}" for i in range(600))
    assert line_of([f"nodename={many}", "state=resume"]) is None
    assert line_of(["nodename=n[1-600]", "state=resume"]) is not None
