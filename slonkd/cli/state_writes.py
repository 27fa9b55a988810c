"""An operator's write of the state ConfigMap, its failures as one line and an exit code.

``slonkd pause``, ``unpause``, ``budget reset``, ``state reset`` (:mod:`slonkd.cli.ops`) and
``slonkd mode`` (:mod:`slonkd.cli.mode`) write the coordinator's state ConfigMap
(:mod:`slonkd.adapters.kube.state`) with the operator's own credentials; each says what went
wrong the same way.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from typing import Any

from slonkd.core.coordinator_state import CoordinatorState, StateCorrupt
from slonkd.core.errors import SlonkdError


def state_written(
    what: str, name: str, write: Coroutine[Any, Any, CoordinatorState]
) -> CoordinatorState | int:
    """An operator's write of the state ConfigMap ``name``: the state, or the exit code.

    A refused value exits 2, an unreadable ConfigMap or an API error 1, each in one line.
    """
    try:
        return asyncio.run(write)
    except ValueError as exc:
        print(f"slonkd {what}: {exc}", file=sys.stderr)
        return 2
    except StateCorrupt as exc:
        print(
            f"slonkd {what}: the state ConfigMap {name} is unreadable ({str(exc)[:200]}); "
            "repair it by hand, or replace it with `slonkd state reset --yes-discard-state`",
            file=sys.stderr,
        )
        return 1
    except SlonkdError as exc:
        print(f"slonkd {what}: {str(exc)[:300]}", file=sys.stderr)
        return 1
