"""The container build files are well formed and agree with each other and with the chart.

A small Dockerfile reader (continuations, instructions, stages) checks what a build would
trip over late: the base is the build argument BASE_IMAGE (so the same file builds from
debian:bookworm-slim), every stage named in COPY --from or a --target exists, every COPY
source exists in the context or is made by build.sh, and the images' commands match the
chart's container args. The images themselves are built by container/build.sh (outside
pytest: about 45 s for slonkd and 100 s for the SLURM images on 2 cores) and run by
container/smoke.sh.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

CONTAINER = Path(__file__).resolve().parents[2] / "container"
DOCKERFILES = {
    "slonkd": CONTAINER / "slonkd" / "Dockerfile",
    "slurm": CONTAINER / "slurm" / "Dockerfile",
    "mosquitto": CONTAINER / "mosquitto" / "Dockerfile",
}
INSTRUCTIONS = {
    "FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME",
    "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL",
}  # fmt: skip


@dataclass(slots=True)
class Stage:
    """One FROM ... [AS name] and its instructions."""

    base: str
    name: str | None
    steps: list[tuple[str, str]] = field(default_factory=list)


@dataclass(slots=True)
class Dockerfile:
    """Global ARGs and stages, in order."""

    args: dict[str, str]
    stages: list[Stage]


def parse(path: Path) -> Dockerfile:
    """Read a Dockerfile: join continuations, drop comments, split into stages."""
    logical: list[str] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, f"{path}: dangling continuation"
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        word, _, rest = line.partition(" ")
        assert word in INSTRUCTIONS, f"{path}: unknown instruction {word!r}"
        if word == "FROM":
            m = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", rest.strip(), flags=re.I)
            assert m, f"{path}: bad FROM {rest!r}"
            stages.append(Stage(base=m.group(1), name=m.group(2)))
        elif not stages:
            assert word == "ARG", f"{path}: only ARG may precede the first FROM"
            name, _, default = rest.partition("=")
            args[name.strip()] = default.strip()
        else:
            stages[-1].steps.append((word, rest.strip()))
    return Dockerfile(args=args, stages=stages)


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_base_is_a_build_argument_defaulting_to_the_debootstrap_image(image: str) -> None:
    """Every stage starts from ${BASE_IMAGE} or an earlier stage; the default is local."""
    df = parse(DOCKERFILES[image])
    assert df.args == {"BASE_IMAGE": "localhost/slonk/debian:bookworm"}
    seen: set[str] = set()
    for stage in df.stages:
        assert stage.base == "${BASE_IMAGE}" or stage.base in seen, stage.base
        if stage.name:
            seen.add(stage.name)
        # A slim registry image has no python3: every stage that runs it installs it.
        runs = " ".join(rest for word, rest in stage.steps if word == "RUN")
        if stage.base == "${BASE_IMAGE}" and "python3" in runs:
            assert "apt-get install" in runs
            assert " python3 " in f"{runs} "


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_copy_sources_and_stages_exist(image: str) -> None:
    """COPY --from names an earlier stage; sources exist in container/ or build.sh makes them."""
    df = parse(DOCKERFILES[image])
    build_sh = (CONTAINER / "build.sh").read_text()
    names: set[str] = set()
    for stage in df.stages:
        for word, rest in stage.steps:
            if word not in ("COPY", "ADD"):
                continue
            parts = rest.split()
            flags = [p for p in parts if p.startswith("--")]
            src = [p for p in parts if not p.startswith("--")][:-1]
            from_stage = [f.split("=", 1)[1] for f in flags if f.startswith("--from=")]
            if from_stage:
                assert from_stage[0] in names, f"COPY --from={from_stage[0]}: no such stage"
                continue
            for s in src:
                if s.startswith(".build/"):
                    assert f'"$here/{s.rstrip("/")}"' in build_sh, f"build.sh does not make {s}"
                else:
                    assert (CONTAINER / s).exists(), f"{image}: COPY {s}: missing in container/"
        if stage.name:
            names.add(stage.name)


def test_slurm_targets_match_build_script_and_chart() -> None:
    """build.sh's --target names exist; each image's CMD is what the chart passes as args."""
    df = parse(DOCKERFILES["slurm"])
    stages = {s.name: s for s in df.stages if s.name}
    assert "controller | worker | login)" in (CONTAINER / "build.sh").read_text()
    for target in ("controller", "worker", "login"):
        assert target in stages
    cmds = {
        name: next(rest for word, rest in stage.steps if word == "CMD")
        for name, stage in stages.items()
        if any(word == "CMD" for word, _ in stage.steps)
    }
    chart = CONTAINER.parent / "deploy" / "helm" / "slonk" / "templates"
    assert cmds["controller"] in (chart / "controller.yaml").read_text().replace("args: ", "")
    assert cmds["login"] in (chart / "login.yaml").read_text().replace("args: ", "")
    # The worker's CMD names the node by hostname; the chart adds -N $(POD_NAME).
    assert cmds["worker"].startswith('["--munge-key", "/etc/slonk/munge/munge.key", "--", "slurmd"')
    worker = next(s for s in df.stages if s.name == "worker")
    assert ("COPY", "--from=slonkd-build /opt/slonkd /opt/slonkd") in worker.steps, (
        "the worker image carries slonkd for its preStop hook"
    )
    entry = next(rest for word, rest in stages["slurm-base"].steps if word == "ENTRYPOINT")
    assert entry == '["/usr/local/sbin/slonk-init"]'


def test_controller_image_carries_the_trigger_program() -> None:
    """slurmctld runs its triggers' program in its own container: the controller has slonkd-nudge.

    The chart's ``coordinator.slurmTriggers.program`` default is where the image puts it.
    """
    controller = next(s for s in parse(DOCKERFILES["slurm"]).stages if s.name == "controller")
    assert ("COPY", "--from=slonkd-build /opt/slonkd /opt/slonkd") in controller.steps
    values = (CONTAINER.parent / "deploy" / "helm" / "slonk" / "values.yaml").read_text()
    assert "program: /opt/slonkd/bin/slonkd-nudge" in values


def test_slonkd_image_runs_as_slurm_user_not_root() -> None:
    """The slonkd image's USER is SLURM's fixed uid, as the chart's securityContext says."""
    (final,) = [s for s in parse(DOCKERFILES["slonkd"]).stages if s.name is None]
    assert ("USER", "64030:64030") in final.steps
    assert ("ENTRYPOINT", '["slonkd"]') in final.steps


@pytest.mark.parametrize("script", ["build.sh", "smoke.sh"])
def test_scripts_parse(script: str) -> None:
    """The build and smoke scripts are valid bash and executable."""
    path = CONTAINER / script
    assert path.stat().st_mode & 0o111
    proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_init_is_valid_python() -> None:
    """slonk-init compiles (it runs on the images' Debian python3, stdlib only)."""
    source = (CONTAINER / "init" / "slonk-init").read_text()
    compile(source, "slonk-init", "exec")
    imports = set(re.findall(r"^(?:import|from) (\w+)", source, flags=re.M))
    assert imports <= {
        "__future__",
        "argparse",
        "os",
        "pwd",
        "shlex",
        "shutil",
        "signal",
        "subprocess",
        "sys",
        "time",
        "pathlib",
    }


def test_mosquitto_image_matches_the_chart() -> None:
    """uid 1883 and the plugin path the chart's securityContext and mosquitto.conf use."""
    (stage,) = parse(DOCKERFILES["mosquitto"]).stages
    run = next(rest for word, rest in stage.steps if word == "RUN")
    assert "--uid 1883" in run
    assert "/usr/lib/mosquitto_dynamic_security.so" in run
    values = (CONTAINER.parent / "deploy" / "helm" / "slonk" / "values.yaml").read_text()
    assert "dynsecPlugin: /usr/lib/mosquitto_dynamic_security.so" in values
    assert "mosquitto: {repository: localhost/slonk/mosquitto, tag: dev}" in values
    assert ("USER", "1883:1883") in stage.steps
