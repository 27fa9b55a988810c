"""``slonkd sandbox demo``'s run: the scenes of the sandbox's mode, one after another.

The process mode's scenes are :mod:`slonkd_sandbox.sandbox.demo`'s, the real node's
:mod:`slonkd_sandbox.sandbox.demo_real`'s (two of them its own); this module picks by the
running sandbox's state (:mod:`slonkd_sandbox.sandbox.ctl`), undoes what an earlier demo
left, plays them and writes ``<dir>/demo.json``. Its caller: :mod:`slonkd_sandbox.command`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from slonkd_sandbox.kube.api import KubeApi
from slonkd_sandbox.sandbox.access import DemoFailed, Sandbox
from slonkd_sandbox.sandbox.access import say as _say
from slonkd_sandbox.sandbox.ctl import read_state
from slonkd_sandbox.sandbox.demo import SCENES, reset_previous
from slonkd_sandbox.sandbox.demo_real import REAL_SCENES


def run_demo(root: Path) -> int:
    """Play every scene against the sandbox in ``root``; 0 when every check held."""
    state = read_state(root)
    if not state or not state.get("ready"):
        _say(f"no running sandbox in {root}: start one with `slonkd sandbox up --dir {root}`")
        return 1
    if len(state["workers"]) < 3:
        _say("the demo needs at least 3 workers: `slonkd sandbox up --workers 3` or more")
        return 1
    api = KubeApi(
        host=state["api"]["host"],
        port=int(state["api"]["port"]),
        ca_file=Path(state["api"]["ca_file"]),
        token=state["api"]["token"],
    )
    sb = Sandbox(state=state, api=api, record={"mode": state.get("mode", "process")})
    scenes = REAL_SCENES if sb.real else SCENES
    _say(f"slonkd sandbox demo: {len(state['workers'])} workers in {root} ({sb.record['mode']})")
    watch = "slurm sinfo -R" if sb.real else "sinfo -R"
    _say(f"(watch along: source {state['env']}; watch {watch}; kubectl -n {sb.ns} get pods -w)")
    began = time.monotonic()
    ok = True
    try:
        previous = root / "demo.json"
        if previous.exists():
            reset_previous(sb, json.loads(previous.read_text()))
        for scene in scenes:
            scene(sb)
    except DemoFailed as exc:
        ok = False
        _say(f"    FAILED  {exc}")
    sb.record.update({"ok": ok, "took_s": round(time.monotonic() - began, 1)})
    (root / "demo.json").write_text(json.dumps(sb.record, indent=2))
    _say(
        f"\ndemo {'passed' if ok else 'FAILED'} in {time.monotonic() - began:.0f} s;"
        f" record: {root / 'demo.json'}"
    )
    return 0 if ok else 1


__all__ = ["run_demo"]
