"""No product module over 400 lines (issue 38): one concept per module stays readable.

A module that grows past the limit holds two concepts; split it where they part (each new
module with a docstring naming its neighbours), never by moving lines at random.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 400


def long_modules(root: Path = ROOT, limit: int = LIMIT) -> dict[str, int]:
    """Product modules (``slonkd/``) longer than ``limit`` lines, with their lengths."""
    found = {}
    for path in sorted((root / "slonkd").rglob("*.py")):
        lines = len(path.read_text().splitlines())
        if lines > limit:
            found[str(path.relative_to(root))] = lines
    return found


def test_the_check_counts_lines(tmp_path: Path) -> None:
    """A module one line past the limit is named, one at the limit is not."""
    (tmp_path / "slonkd").mkdir()
    (tmp_path / "slonkd" / "long.py").write_text("x = 1\n" * (LIMIT + 1))
    (tmp_path / "slonkd" / "fits.py").write_text("x = 1\n" * LIMIT)
    assert long_modules(tmp_path) == {"slonkd/long.py": LIMIT + 1}


def test_no_product_module_over_400_lines() -> None:
    """Every module of ``slonkd/`` is at most 400 lines long."""
    assert not long_modules(), f"split these (over {LIMIT} lines): {long_modules()}"
