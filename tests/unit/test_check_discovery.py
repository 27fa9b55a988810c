"""``slonkd check`` with no flags: it finds what the machine has, checks it, says what it did not.

A fake ``/dev`` and ``/sys`` tree in tmp_path stands for the machine (device files, IB ports,
NICs as sysfs links, a virtual one and lo among them); ``nvidia-smi -L`` is the hand-written
recordings of tests/data/health/nvidia-smi, given by a fake runner to the discovery functions
(slonkd/adapters/health/discovery.py) and by a shell script on a private PATH to the command
(slonkd/cli/check.py).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from slonkd.adapters.health import discovery
from slonkd.adapters.health.checks import build_checks
from slonkd.adapters.health.probes import Outcome, ProbeGuard
from slonkd.adapters.health.settings import HealthSettings
from slonkd.cli import check
from slonkd.cli.main import main

SMI = Path(__file__).parent.parent / "data" / "health" / "nvidia-smi"


def fake_machine(
    root: Path,
    *,
    gpus: int = 0,
    ib: Sequence[str] = (),
    nics: Sequence[tuple[str, str]] = (),
    virtual: Sequence[str] = (),
) -> tuple[Path, Path]:
    """``(dev, sys)`` trees: nvidiaN files, IB ports, physical and virtual NICs, lo."""
    dev, sys_ = root / "dev", root / "sys"
    dev.mkdir(parents=True)
    for name in ("nvidiactl", "nvidia-uvm", "nvidia-modeset", "kmsg"):
        (dev / name).touch()
    for i in range(gpus):
        (dev / f"nvidia{i}").touch()
    for port in ib:
        hca, number = port.split("/")
        d = sys_ / "class" / "infiniband" / hca / "ports" / number
        d.mkdir(parents=True)
        (d / "state").write_text("4: ACTIVE\n")
        (d / "phys_state").write_text("5: LinkUp\n")
        (d / "rate").write_text("400 Gb/sec (4X NDR)\n")
    net = sys_ / "class" / "net"
    net.mkdir(parents=True)
    places = [(n, s, f"pci0000:00/0000:00:0{i}.0/net") for i, (n, s) in enumerate(nics)]
    places += [(n, "up", "virtual/net") for n in ("lo", *virtual)]
    for name, state, place in places:
        real = sys_ / "devices" / place / name
        real.mkdir(parents=True)
        (real / "operstate").write_text(state + "\n")
        (real / "carrier_changes").write_text("1\n")
        (net / name).symlink_to(Path("../../devices") / place / name)
    return dev, sys_


def runner(
    stdout: str = "", *, rc: int = 0, missing: bool = False, stderr: str = ""
) -> discovery.Runner:
    """A stand-in for ``probes.run_command`` that answers ``nvidia-smi -L`` and nothing else."""

    async def run(argv: Sequence[str]) -> Outcome:
        assert list(argv) == ["nvidia-smi", "-L"]
        return Outcome(rc=None if missing else rc, stdout=stdout, stderr=stderr, missing=missing)

    return run


def test_gpu_list_recordings_count_gpus_not_mig_devices() -> None:
    """8 H100s are 8; the MIG devices under a GPU are not GPUs."""
    assert discovery.parse_gpu_list((SMI / "list-8-h100.handwritten.txt").read_text()) == 8
    assert discovery.parse_gpu_list((SMI / "list-2-mig.handwritten.txt").read_text()) == 2


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ((SMI / "list-garbled.handwritten.txt").read_text(), "line 2 not understood"),
        ("", "lists no GPU"),
        ("GPU 0: X (UUID: GPU-1)\nGPU 0: X (UUID: GPU-1)\n", "GPU 0 twice"),
        ((SMI / "healthy-8.handwritten.csv").read_text(), "line 1 not understood"),
    ],
)
def test_odd_gpu_list_is_a_clear_error(text: str, said: str) -> None:
    """A line that is neither a GPU nor a MIG device, no GPU, a GPU twice: ValueError."""
    with pytest.raises(ValueError, match=said):
        discovery.parse_gpu_list(text)


async def test_discovery_finds_gpus_ib_ports_physical_nics(tmp_path: Path) -> None:
    """lo and virtual NICs are left out; a physical NIC not up is set apart."""
    dev, sys_ = fake_machine(
        tmp_path,
        gpus=8,
        ib=("mlx5_0/1", "mlx5_1/1", "mlx5_1/2"),
        nics=(("eth0", "up"), ("ib0", "up"), ("eth1", "down")),
        virtual=("docker0", "veth12ab"),
    )
    found = await discovery.discover(
        run=runner((SMI / "list-8-h100.handwritten.txt").read_text()),
        dev_root=str(dev),
        sys_root=str(sys_),
        which=lambda tool: f"/usr/bin/{tool}",
    )
    assert found.gpus == 8
    assert found.gpu_how == "8 listed by nvidia-smi -L"
    assert found.ib_ports == ("mlx5_0/1", "mlx5_1/1", "mlx5_1/2")
    assert found.nics == ("eth0", "ib0")
    assert found.nics_down == (("eth1", "down"),)
    assert found.dcgmi
    assert not found.notes
    assert not found.mounts


async def test_discovery_feeds_the_checks(tmp_path: Path) -> None:
    """Expected GPUs, IB ports and NICs are what was found; the checks are built for them."""
    dev, sys_ = fake_machine(
        tmp_path, gpus=8, ib=("mlx5_0/1", "mlx5_1/1"), nics=(("eth0", "up"),), virtual=("br0",)
    )
    found = await discovery.discover(
        run=runner((SMI / "list-8-h100.handwritten.txt").read_text()),
        dev_root=str(dev),
        sys_root=str(sys_),
        which=lambda _tool: None,
    )
    s = discovery.settings_for(found, HealthSettings())
    assert (s.expected_gpus, s.ib_expected_ports, tuple(s.nic_interfaces)) == (8, 2, ("eth0",))
    assert s.sysfs_root == str(sys_)
    assert not s.dcgm  # no dcgmi on PATH
    names = [c.name for c in build_checks(s, ProbeGuard())]
    assert names == ["nvidia-smi", "xid", "fabric", "disk:/", "nic", "infiniband", "pcie"]
    skipped = {n.check: n.why for n in discovery.not_checked(s, found, dcgm_off="")}
    assert skipped == {
        "dcgm": "dcgmi not found",
        "nvlink": "no --nvlink-links given (the link count is not discovered)",
        "mounts": "none configured (no agent config)",
        "slurmd": "no --slurmd-port given",
        "peers": "no --peer given",
    }


@pytest.mark.parametrize(
    ("outcome", "gpus", "note"),
    [
        (runner(missing=True), 2, ""),
        (runner((SMI / "list-garbled.handwritten.txt").read_text()), 2, "line 2 not understood"),
        (runner("", rc=9, stderr="NVIDIA-SMI has failed"), 2, "exited 9: NVIDIA-SMI has failed"),
        (runner((SMI / "list-8-h100.handwritten.txt").read_text()), 8, "lists 8 GPUs"),
    ],
)
async def test_odd_nvidia_smi_answers_are_notes_never_crashes(
    tmp_path: Path, outcome: discovery.Runner, gpus: int, note: str
) -> None:
    """Two /dev/nvidiaN files: a missing, garbled or failing nvidia-smi leaves those two."""
    dev, sys_ = fake_machine(tmp_path, gpus=2)
    found = await discovery.discover(run=outcome, dev_root=str(dev), sys_root=str(sys_))
    assert found.gpus == gpus
    assert (note in " ".join(found.notes)) if note else not found.notes


async def test_garbled_gpu_list_and_no_device_files_is_not_checked_with_why(
    tmp_path: Path,
) -> None:
    """No GPU device file and garbled nvidia-smi -L: no GPU checks, and the line says why."""
    dev, sys_ = fake_machine(tmp_path)
    found = await discovery.discover(
        run=runner((SMI / "list-garbled.handwritten.txt").read_text()),
        dev_root=str(dev),
        sys_root=str(sys_),
    )
    s = discovery.settings_for(found, HealthSettings())
    (gpu,) = [n for n in discovery.not_checked(s, found, dcgm_off="") if n.check == "gpu"]
    assert gpu.why.startswith(f"no {dev}/nvidia*, and nvidia-smi -L line 2 not understood")


def test_agent_config_names_the_mounts(tmp_path: Path) -> None:
    """health.mounts of the agent's section (whole tree or flat); a string is refused."""
    tree = tmp_path / "slonkd.json"
    tree.write_text(json.dumps({"agent": {"health": {"mounts": ["/scratch", "/home"]}}}))
    assert discovery.read_agent_mounts(str(tree)) == ("/scratch", "/home")
    assert discovery.agent_mounts({"health": {"mounts": ["/data"]}}, "flat") == ("/data",)
    assert discovery.agent_mounts({"coordinator": {}}, "tree") == ()
    with pytest.raises(ValueError, match="list of paths"):
        discovery.agent_mounts({"agent": {"health": {"mounts": "/scratch"}}}, "tree")


@pytest.fixture(autouse=True)
def _logging_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """``slonkd check`` configures structlog for its process: not for the test process.

    Configured in a test, structlog prints to pytest's captured stderr, closed once the test
    ends, and every later test of the worker that logs fails ("I/O operation on closed file").
    """
    monkeypatch.setattr("slonkd.cli.main.configure_logging", lambda **_: None)


def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, smi_list: str = "") -> None:
    """A PATH with only ``nvidia-smi`` (printing ``smi_list`` for -L) when given, no config."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    monkeypatch.setenv("PATH", str(bin_))
    monkeypatch.delenv("SLONKD_CONFIG", raising=False)
    if smi_list:
        tool = bin_ / "nvidia-smi"
        tool.write_text(f'#!/bin/sh\n[ "$*" = "-L" ] || exit 64\n/bin/cat "{smi_list}"\n')
        tool.chmod(0o755)


def test_plain_check_on_a_bare_machine_says_what_it_did_not_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, a plain ``slonkd check`` ran one disk check and said nothing of the rest."""
    dev, sys_ = fake_machine(tmp_path, virtual=("docker0",))
    _isolated(monkeypatch, tmp_path)
    rc = main(["check", "--dev-root", str(dev), "--sysfs-root", str(sys_)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert out.split("not checked:\n")[1].splitlines() == [
        f"  {'gpu':<20} no {dev}/nvidia* and no nvidia-smi",
        f"  {'dcgm':<20} no GPU",
        f"  {'nvlink':<20} no GPU",
        f"  {'fabric':<20} no GPU",
        f"  {'mounts':<20} none configured (no agent config)",
        f"  {'slurmd':<20} no --slurmd-port given",
        f"  {'peers':<20} no --peer given",
        f"  {'nic':<20} no physical NIC up in {sys_}/class/net",
        f"  {'infiniband':<20} no port in {sys_}/class/infiniband",
        f"  {'pcie':<20} no GPU and no InfiniBand port",
    ]


def test_plain_check_json_discovers_gpus_through_nvidia_smi_l(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command counts GPUs with the real runner (a script printing the recording)."""
    dev, sys_ = fake_machine(tmp_path, gpus=8, ib=("mlx5_0/1",), nics=(("eth0", "up"),))
    _isolated(monkeypatch, tmp_path, str(SMI / "list-8-h100.handwritten.txt"))
    argv = ["check", "-o", "json", "--dev-root", str(dev), "--sysfs-root", str(sys_)]
    rc = main([*argv, "--only", "nic", "--only", "infiniband"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0, doc
    assert doc["discovered"]["gpus"] == 8
    assert doc["discovered"]["ib_ports"] == ["mlx5_0/1"]
    assert doc["discovered"]["nics"] == ["eth0"]
    assert {r["check"]: r["verdict"] for r in doc["results"]} == {"nic": "ok", "infiniband": "ok"}
    skipped = {n["check"]: n["why"] for n in doc["not_checked"]}
    assert skipped["dcgm"] == "dcgmi not found"
    assert skipped["nvidia-smi"] == skipped["xid"] == "not selected by --only"
    assert main([*argv, "--only", "nic", "--no-dcgm"]) == 0
    skipped = {n["check"]: n["why"] for n in json.loads(capsys.readouterr().out)["not_checked"]}
    assert skipped["dcgm"] == "--no-dcgm given"


def test_a_named_check_turns_discovery_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Today's behaviour when an option names the checks: only those (and disk /)."""
    dev, sys_ = fake_machine(tmp_path, gpus=8, ib=("mlx5_0/1",), nics=(("eth0", "up"),))
    _isolated(monkeypatch, tmp_path, str(SMI / "list-8-h100.handwritten.txt"))
    roots = ["--dev-root", str(dev), "--sysfs-root", str(sys_)]
    for named in (["--nic", "eth0"], ["--no-discover"]):
        assert main(["check", "-o", "json", *roots, *named]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["discovered"] is None
        skipped = {n["check"]: n["why"] for n in doc["not_checked"]}
        assert skipped["gpu"] == "no --expected-gpus given"
        assert skipped["infiniband"] == "no --ib-ports given"


def _check_parser() -> argparse.ArgumentParser:
    sub = argparse.ArgumentParser(prog="slonkd").add_subparsers(dest="command")
    check.add_parser(sub)
    return sub.choices["check"]


def test_every_option_of_check_has_help_text() -> None:
    """Walk the parser: no option of ``slonkd check`` without help."""
    bare = [
        "/".join(a.option_strings)
        for a in _check_parser()._actions
        if not a.help or a.help == argparse.SUPPRESS
    ]
    assert bare == []


def test_no_discover_and_roots_are_options() -> None:
    """--no-discover and --prolog turn discovery off; --nvlink-links does not."""
    args = _check_parser().parse_args(["--no-discover", "--sysfs-root", "/host/sys"])
    assert args.no_discover
    assert args.sysfs_root == "/host/sys"
    assert not check.discovers(args)
    assert check.discovers(_check_parser().parse_args(["--nvlink-links", "18"]))
    # a prolog's failure drains the node: it checks what the site named, nothing found
    assert not check.discovers(_check_parser().parse_args(["--nvlink-links", "18", "--prolog"]))
