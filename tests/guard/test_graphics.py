"""NVIDIA graphics clients on real processes: the display server's nodes are kept, CUDA's drained.

The nodes are the suite's test nodes (as root, character devices of major 1
that no process of the private PID namespace holds otherwise; plain files
when not root), put in an inventory under NVIDIA's names and roles
(guard/inventory.py), and scanned as the guard scans.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from helpers import FAKES
from helpers.isolation import NODE_RDEV, ROOT
from helpers.runners import guard

from suspendguard.config import IdleConfig, defaults
from suspendguard.guard import inventory
from suspendguard.guard.inventory import FAMILY_NODES, device_families, identity
from suspendguard.guard.policy import decide
from suspendguard.guard.scan import scan_holders
from suspendguard.idle.nvml import NvmlBackend
from suspendguard.idle.sampler import check_idle
from suspendguard.model import Inventory, Node, Role
from suspendguard.system.deadline import Deadline
from suspendguard.system.procfs import ProcFS, Stat

# The display server's three nodes, and CUDA's own: name, role, rdev as root.
NODES: dict[str, tuple[Role, int]] = {
    "nvidia0": ("graphics", NODE_RDEV),
    "nvidiactl": ("management", os.makedev(1, 8)),
    "nvidia-modeset": ("management", os.makedev(1, 9)),
    "nvidia-uvm": ("compute", os.makedev(1, 5)),
}
DISPLAY_SERVER = ("nvidia0", "nvidiactl", "nvidia-modeset")

HOLD = """
import os, sys, time
held = [open(p, "rb") for p in sys.argv[1:]]
print("ready", os.getpid(), flush=True)
time.sleep(3600)
"""


@pytest.fixture
def nvidia(tmp_path: Path) -> Inventory:
    nodes = []
    for name, (role, rdev) in NODES.items():
        path = tmp_path / name
        if ROOT:
            os.mknod(path, 0o666 | 0o020000, rdev)
        else:
            path.write_bytes(b"\0")
        st = os.stat(path)
        nodes.append(Node(str(path), "nvidia", role, identity(st), (st.st_dev, st.st_ino)))
    return Inventory(tuple(nodes))


def start(procs: list[subprocess.Popen[str]], paths: list[str]) -> int:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, *paths], stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    procs.append(proc)
    assert proc.stdout is not None and proc.stdout.readline().split()[0] == "ready"
    return proc.pid


def test_the_roles_are_nvidias_own_names() -> None:
    roles = {role: globs for role, globs in FAMILY_NODES["nvidia"].items()}
    assert roles["compute"] == ("/dev/nvidia-uvm",)
    assert roles["graphics"] == ("/dev/nvidia[0-9]*",)
    assert {"/dev/nvidiactl", "/dev/nvidia-modeset"} <= set(roles["management"])


def test_display_servers_nodes_are_kept_and_uvm_is_drained(
        nvidia: Inventory, children: list[subprocess.Popen[str]]) -> None:
    paths = {Path(n.path).name: n.path for n in nvidia.nodes}
    display = start(children, [paths[n] for n in DISPLAY_SERVER])
    cuda = start(children, [paths[n] for n in (*DISPLAY_SERVER, "nvidia-uvm")])
    scan = scan_holders(nvidia)
    config = defaults()
    decisions = {d.holder.pid: d for d in decide(scan.holders, config.policy, config.drain)}

    kept = decisions[display]
    assert sorted(Path(p).name for p in kept.holder.node_paths()) == sorted(DISPLAY_SERVER)
    assert (kept.action, kept.kind, kept.signals, kept.vetoes) == ("keep", "leave", False, False)
    assert kept.rule == ("graphics client: holds NVIDIA nodes but not /dev/nvidia-uvm (no CUDA); "
                         "the driver's own suspend path keeps its state")
    drained = decisions[cuda]
    assert (drained.action, drained.kind, drained.rule) == \
        ("drain", "drain", "holds a compute node")


@pytest.fixture
def as_nvidia(tmp_path: Path, nvidia: Inventory, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The built-in NVIDIA node list pointed at the test nodes, so the whole guard sees them."""
    paths = {Path(n.path).name: n.path for n in nvidia.nodes}
    monkeypatch.setitem(FAMILY_NODES, "nvidia", {
        "compute": (paths["nvidia-uvm"],),
        "graphics": (str(tmp_path / "nvidia[0-9]*"),),
        "management": (paths["nvidiactl"], paths["nvidia-modeset"]),
    })
    return paths


def nvml_check(monkeypatch: pytest.MonkeyPatch, compute: list[int],
               graphics: Sequence[int] = ()) -> Any:
    """An idle check through the NVML backend and the suite's fake pynvml: an idle GPU
    whose compute and graphics process lists are these."""
    monkeypatch.syspath_prepend(str(FAKES / "idle" / "nvml"))
    sys.modules.pop("pynvml", None)
    pynvml = importlib.import_module("pynvml")
    monkeypatch.setitem(sys.modules, "pynvml", pynvml)
    pynvml.SCRIPT[:] = [{"gpu": 0, "memory": 0, "used": 0,
                         "compute": [(pid, None) for pid in compute],
                         "graphics": [(pid, None) for pid in graphics]}]

    def check(config: IdleConfig, families: Sequence[str], deadline: Deadline) -> Any:
        cfg = replace(config, backends=("nvml",), samples=1, interval_ms=10, settle_s=0.1)
        return check_idle(cfg, families, deadline, backends=[NvmlBackend(cfg)])

    return check


def test_the_guard_never_signals_a_graphics_client_and_drains_cuda(
        make_config: Any, as_nvidia: dict[str, str], children: list[subprocess.Popen[str]]) -> None:
    display = start(children, [as_nvidia[n] for n in DISPLAY_SERVER])
    cuda = start(children, [as_nvidia[n] for n in (*DISPLAY_SERVER, "nvidia-uvm")])
    report = guard(make_config(devices={"families": ["nvidia"], "nodes": []}))
    assert report.verdict.kind == "allow", report.verdict.texts
    by_pid = {h.decision.holder.pid: h for h in report.holders}
    assert (by_pid[display].decision.action, by_pid[display].outcome.kind) == \
        ("keep", "not-signalled")
    assert children[0].poll() is None  # the display server runs on
    assert by_pid[cuda].outcome.kind == "exited" and children[1].wait(timeout=5) != 0


def test_a_kept_process_the_device_lists_as_compute_is_drained(
        make_config: Any, as_nvidia: dict[str, str], children: list[subprocess.Popen[str]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Vulkan compute, say: no /dev/nvidia-uvm, but NVML lists it among compute processes.
    job = start(children, [as_nvidia[n] for n in DISPLAY_SERVER])
    report = guard(make_config(devices={"families": ["nvidia"], "nodes": []}),
                   idle_check=nvml_check(monkeypatch, [job]))
    [hr] = [h for h in report.holders if h.decision.holder.pid == job]
    assert (hr.decision.action, hr.decision.rule) == ("drain", "reported by the device (nvml)")
    assert hr.outcome.kind == "exited", hr.outcome
    assert report.verdict.kind == "allow", report.verdict.texts


class Reused(ProcFS):
    """/proc as it is, but once ``reuse`` is set the process at that pid has another start
    time: the kept process exited and a new one took its pid (pid reuse inside one run,
    which no test can bring about on a real host in time)."""

    reuse = 0

    def stat(self, pid: int, at: int | None = None) -> Stat | None:
        st = super().stat(pid, at)
        return replace(st, start_time=st.start_time + 1) if st and pid == self.reuse else st


def test_a_kept_pid_another_process_took_is_decided_as_that_process(
        make_config: Any, as_nvidia: dict[str, str], children: list[subprocess.Popen[str]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The display client the look kept is gone; a CUDA job has its pid when NVML lists it
    # as compute. That job is someone the run never saw: decided and drained as itself, not
    # taken for the kept client (whose start time its drain would find changed, and skip).
    job = start(children, [as_nvidia[n] for n in DISPLAY_SERVER])
    proc = Reused()
    check = nvml_check(monkeypatch, [job])

    pynvml = sys.modules["pynvml"]

    def reading(config: IdleConfig, families: Sequence[str], deadline: Deadline) -> Any:
        if proc.reuse:  # read again after the drain: the job has left
            pynvml.SCRIPT[0]["compute"] = []
        proc.reuse = job
        return check(config, families, deadline)

    report = guard(make_config(devices={"families": ["nvidia"], "nodes": []}),
                   idle_check=reading, proc=proc)
    records = [h for h in report.holders if h.decision.holder.pid == job]
    assert [(h.decision.action, h.outcome.kind) for h in records] == [
        ("keep", "not-signalled"), ("drain", "exited")], records
    assert records[1].decision.holder.start_time == records[0].decision.holder.start_time + 1
    assert children[0].wait(timeout=5) != 0  # the process with the pid now got the signal
    assert report.verdict.kind == "allow", report.verdict.texts


def test_a_compute_process_the_device_lists_only_after_that_drain_vetoes_unsignalled(
        make_config: Any, as_nvidia: dict[str, str], children: list[subprocess.Popen[str]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The kept Vulkan job is drained for NVML's word; NVML read again then lists another
    # compute process (a job its loop started again, one that started meanwhile) at 0 %.
    job = start(children, [as_nvidia[n] for n in DISPLAY_SERVER])
    late = start(children, [])  # seen by the device only: the scan finds it holding nothing
    check = nvml_check(monkeypatch, [job])
    pynvml = sys.modules["pynvml"]
    calls: list[int] = []

    def reading(config: IdleConfig, families: Sequence[str], deadline: Deadline) -> Any:
        if calls:
            pynvml.SCRIPT[0]["compute"] = [(late, None)]
        calls.append(1)
        return check(config, families, deadline)

    report = guard(make_config(devices={"families": ["nvidia"], "nodes": []}), idle_check=reading)
    assert len(calls) == 2
    by_pid = {h.decision.holder.pid: h for h in report.holders}
    assert by_pid[job].outcome.kind == "exited", by_pid[job].outcome
    assert report.verdict.kind == "veto", report.verdict.texts
    [reason] = report.verdict.reasons
    assert reason.code == "appeared" and reason.pid == late, reason
    assert reason.text.startswith(f"the device (nvml) reports pid {late} ") and \
        "appeared after the drain" in reason.text, reason.text
    assert (by_pid[late].outcome.kind, by_pid[late].outcome.why) == \
        ("not-signalled", "appeared after the drain")
    assert children[1].poll() is None  # never signalled


def test_a_graphics_process_only_the_device_reports_is_named_not_signalled(
        make_config: Any, as_nvidia: dict[str, str], children: list[subprocess.Popen[str]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Seen by NVML as a graphics process, by the scan not at all (think: another PID
    # namespace): it holds none of the nodes here.
    unseen = start(children, [])
    check = nvml_check(monkeypatch, [], graphics=[unseen])
    report = guard(make_config(devices={"families": ["nvidia"], "nodes": []}), idle_check=check)
    assert report.verdict.kind == "allow", report.verdict.texts
    assert all(h.decision.holder.pid != unseen for h in report.holders)
    assert any(w.startswith(f"the device (nvml) reports pid {unseen} ") and
               w.endswith("as a graphics process, which the scan did not see: kept, not "
                          "signalled") for w in report.verdict.warnings), report.verdict.warnings
    assert children[0].poll() is None


def test_a_device_view_that_lists_fewer_gpus_than_the_host_has_is_no_idle(
        make_config: Any, as_nvidia: dict[str, str], tmp_path: Path,
        children: list[subprocess.Popen[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    # A second GPU's node, which NVML does not list (fallen off the bus, say): the one it
    # lists reads idle, and says nothing of the other.
    second = tmp_path / "nvidia1"
    if ROOT:
        os.mknod(second, 0o666 | 0o020000, os.makedev(1, 4))
    else:
        second.write_bytes(b"\0")
    job = start(children, [as_nvidia[n] for n in (*DISPLAY_SERVER, "nvidia-uvm")])
    report = guard(make_config(devices={"families": ["nvidia"], "nodes": []}),
                   idle_check=nvml_check(monkeypatch, []))
    assert report.verdict.kind == "veto", report.verdict.texts
    [reason] = report.verdict.reasons
    assert reason.code == "device-unknown"
    assert "nvml reports 1 of the 2 devices found" in reason.text, reason.text
    # Known before anyone was signalled: the job was spared.
    assert children[0].poll() is None
    [hr] = [h for h in report.holders if h.decision.holder.pid == job]
    assert hr.outcome.kind == "not-signalled", hr.outcome


def test_a_gpu_node_the_driver_no_longer_has_is_no_device_to_answer_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # /dev/nvidia1 made by nvidia-modprobe stays when its GPU is passed through to a VM:
    # NVML lists one GPU, and counting the node left every suspend refused as unknown.
    nodes = Inventory(tuple(Node(f"/dev/nvidia{m}", "nvidia", "graphics",
                                 ("char", os.makedev(195, m))) for m in (0, 1)))
    monkeypatch.setattr(inventory, "NVIDIA_GPUS", str(tmp_path / "no-driver"))
    assert device_families(nodes) == ("nvidia", "nvidia")  # the driver cannot say: each node
    gpu = tmp_path / "gpus" / "0000:01:00.0"
    gpu.mkdir(parents=True)
    (gpu / "information").write_text("Model: \t\t NVIDIA H200\nDevice Minor: \t 0\n"
                                     "GPU Excluded:\t No\n")
    monkeypatch.setattr(inventory, "NVIDIA_GPUS", str(tmp_path / "gpus"))
    assert device_families(nodes) == ("nvidia",)
