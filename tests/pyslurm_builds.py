"""The bootstrap's pyslurm builds for the tests: the site of a release's build, or why not.

A test that needs one (the pyslurm backend's contract and e2e tests) skips with the
bootstrap's reason when there is none, or fails under ``SLONKD_REQUIRE_PYSLURM=1`` (CI sets
it: there the bootstrap built both). The builds are :mod:`slonkd_sandbox.pyslurm_build`'s.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slonkd_sandbox.pyslurm_build import REQUIRE_ENV, pyslurm_site, pyslurm_status


def built_or_skip(release: str) -> Path:
    """The site directory of ``release``'s build; the test skips (or fails) without one."""
    got = pyslurm_site(release)
    if got is None:
        why = pyslurm_status(release)
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{why} ({REQUIRE_ENV}=1)")
        pytest.skip(why)
    return got
