"""What a benchmark prints at its end: a table for people, then one JSON line.

Used by the benchmarks whose result is one flat mapping of measures (:mod:`bench.agent`,
:mod:`bench.health`); those with runs or medians per measure print their own tables
(:mod:`bench.harness`, :mod:`bench.bus`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping


def print_result(result: Mapping[str, object], key_width: int, value_width: int) -> None:
    """One line per measure, then ``result`` as one JSON object.

    A line holds the measure's name left-aligned in ``key_width`` characters and its value
    right-aligned in ``value_width``.
    """
    for key, value in result.items():
        print(f"{key:<{key_width}}{value:>{value_width}}")
    print(json.dumps(result))
