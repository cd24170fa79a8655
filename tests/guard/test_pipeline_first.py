"""The device asked before the drain, and processes the scan could not read as root.

Through the real nvidia-smi backend on a fake nvidia-smi printing the H200
capture's CSV (tests/helpers/nvidia.py). A process the device reports and
this host cannot see, or a device no backend can answer for, vetoes before
anyone is signalled. A process the scan could not read as root leaves the
verdict unknown unless the device's own view answers for every device.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from helpers.holders import Holders
from helpers.nvidia import IDLE_GPUS, Checks, FakeNvidiaSmi, busy_gpus
from helpers.refusing import RefusingFds
from helpers.runners import guard

from suspendguard.config import IdleConfig
from suspendguard.guard.device_view import uninspected
from suspendguard.guard.inventory import FAMILY_NODES
from suspendguard.idle.base import DeviceReading, IdleReport
from suspendguard.system.deadline import Deadline
from suspendguard.system.procfs import ProcAccessError, ProcFS


@pytest.fixture
def smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeNvidiaSmi:
    return FakeNvidiaSmi(tmp_path, monkeypatch)


@pytest.fixture
def gpu(node: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The test node under NVIDIA's built-in node list (guard/inventory.py), so that the
    nvidia-smi view answers for it as for a GPU; the [devices] section that finds it."""
    monkeypatch.setitem(FAMILY_NODES, "nvidia", {"compute": (node,)})
    return {"families": ["nvidia"], "nodes": []}


def gone_pid() -> int:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    return dead.pid


def test_device_process_not_visible_here_vetoes_before_any_signal(
        make_config: Any, node: str, holders: Holders, smi: FakeNvidiaSmi) -> None:
    job, pid = holders.start(node)
    hidden = gone_pid()  # what the device sees in a VM or another PID namespace
    smi.show(busy_gpus(), [pid, hidden])
    check = Checks()
    report = guard(make_config(), idle_check=check)
    assert report.verdict.kind == "veto"
    [why] = [r for r in report.verdict.texts if f"pid {hidden}" in r]
    assert "not visible here" in why and "the guard cannot ask it to stop" in why
    [hr] = report.holders
    assert hr.outcome.kind == "not-signalled" and "veto anyway" in hr.outcome.why
    assert holders.signals() == [] and job.poll() is None
    assert len(check.calls) == 1  # no drain, so no second look
    assert report.to_json()["idle"]["state"] == "busy"


def test_device_reported_visible_process_joins_the_first_drain(
        make_config: Any, node: str, holders: Holders, tmp_path: Path, smi: FakeNvidiaSmi) -> None:
    other = tmp_path / "not-a-node"
    other.write_bytes(b"")
    _job, pid = holders.start(node)
    _seen_by_device, dpid = holders.start(str(other))  # holds nothing the scan knows
    smi.show(busy_gpus(), [pid, dpid])
    check = Checks()

    def after_drain(config: IdleConfig, families: Sequence[str], deadline: Deadline) -> IdleReport:
        if check.calls:
            smi.show(IDLE_GPUS, [])
        return check(config, families, deadline)

    report = guard(make_config(), idle_check=after_drain)
    assert report.verdict.kind == "allow", report.verdict.texts
    assert sorted(holders.signals()) == sorted([f"{pid} SIGINT", f"{dpid} SIGINT"])
    assert {h.decision.holder.pid: h.round for h in report.holders} == {pid: 1, dpid: 1}


def test_every_device_read_before_a_suspend_is_kept_for_the_check_after_resume(
        make_config: Any, node: str, gpu: dict[str, Any], holders: Holders,
        smi: FakeNvidiaSmi) -> None:
    # nvidia-smi reads no health word: the GPU is kept all the same, so that one missing
    # after resume is said (health/model.py's not_listed).
    from suspendguard.store.history import History

    job, pid = holders.start(node)
    smi.show(IDLE_GPUS, [])
    config = make_config(devices=gpu)
    report = guard(config, idle_check=Checks())
    assert report.verdict.kind == "allow", report.verdict.texts
    assert job.wait(timeout=5) is not None and holders.signals() == [f"{pid} SIGINT"]
    with History.open(config.state.dir) as history:
        assert history.health_before(report.attempt.id) == {"gpu 0": ""}


def test_no_backend_vetoes_before_any_signal(
        make_config: Any, node: str, holders: Holders, smi: FakeNvidiaSmi) -> None:
    job, _pid = holders.start(node)
    report = guard(make_config(), idle_check=Checks(tool="/nonexistent/nvidia-smi"))
    assert report.verdict.kind == "veto"
    [why] = report.verdict.texts
    assert why.startswith("nvidia: no idle backend could answer (nvidia-smi: "
                          "/nonexistent/nvidia-smi: not an executable file")
    assert why.endswith("vetoed by [idle] on_unknown = veto")
    assert holders.signals() == [] and job.poll() is None


def test_unreadable_process_as_root_without_a_device_view_is_unknown(
        make_config: Any, node: str, holders: Holders) -> None:
    _job, pid = holders.start(node)
    report = guard(make_config(), proc=RefusingFds(pid))
    assert report.verdict.kind == "unknown"
    [why] = report.verdict.texts
    assert why.startswith(f"1 process could not be inspected as root (pids {pid}), and no "
                          "device view answers for every device")
    assert holders.signals() == []


def test_unreadable_process_as_root_with_a_device_view_is_a_warning(
        make_config: Any, node: str, gpu: dict[str, Any], holders: Holders,
        smi: FakeNvidiaSmi) -> None:
    _job, pid = holders.start(node)
    smi.show(IDLE_GPUS, [])
    report = guard(make_config(devices=gpu), proc=RefusingFds(pid), idle_check=Checks())
    assert report.verdict.kind == "allow", report.verdict.texts
    assert any(w.startswith(f"1 process could not be inspected as root (pids {pid}); the "
                            "devices' own view (nvidia-smi) answers for every device")
               for w in report.verdict.warnings), report.verdict.warnings


def test_unreadable_process_with_a_device_view_and_devices_nodes_is_unknown(
        make_config: Any, node: str, gpu: dict[str, Any], holders: Holders, tmp_path: Path,
        smi: FakeNvidiaSmi) -> None:
    """The GPU's view answers for the GPU, not for a node given in [devices] nodes, which no
    vendor query covers: the process the guard could not read may hold that one."""
    extra = tmp_path / "accel0"
    extra.write_bytes(b"")
    _job, pid = holders.start(node)
    smi.show(IDLE_GPUS, [])
    report = guard(make_config(devices={**gpu, "nodes": [str(extra)]}), proc=RefusingFds(pid),
                   idle_check=Checks())
    assert report.verdict.kind == "unknown", report.verdict.texts
    [reason] = report.verdict.reasons
    assert reason.code == "uninspected"
    assert reason.text.startswith(
        f"1 process could not be inspected as root (pids {pid}), and no device view answers "
        "for every device, process lists included ([devices] nodes, which no device view "
        "covers)"), reason.text
    assert not any("answers for every device" in w for w in report.verdict.warnings)


def test_unreadable_process_the_device_names_is_unknown(
        make_config: Any, node: str, holders: Holders, smi: FakeNvidiaSmi) -> None:
    _job, pid = holders.start(node)
    smi.show(busy_gpus(), [pid])
    report = guard(make_config(), dry_run=True, proc=RefusingFds(pid), idle_check=Checks())
    assert report.verdict.kind == "unknown"
    assert "and the device reports 1 of them" in report.verdict.texts[0]


def test_device_without_process_lists_does_not_answer_for_the_unreadable(
        make_config: Any, node: str, gpu: dict[str, Any], holders: Holders,
        smi: FakeNvidiaSmi) -> None:
    _job, pid = holders.start(node)
    # The utilization query answers, the compute-apps one fails: no process list.
    smi.show(IDLE_GPUS, apps=["gpu_uuid, pid"])
    report = guard(make_config(devices=gpu), proc=RefusingFds(pid), idle_check=Checks())
    assert report.verdict.kind == "unknown"
    assert report.verdict.texts[0].startswith(
        f"1 process could not be inspected as root (pids {pid}), and no device view answers "
        "for every device, process lists included (nvidia)")


def test_an_unknown_known_before_the_drain_signals_nobody(
        make_config: Any, node: str, holders: Holders) -> None:
    """A process the scan could not read, and no device view to answer for it: the suspend
    is refused (unknown) whatever the drain does, so no job is stopped for it."""
    job, pid = holders.start(node)
    _unreadable, other = holders.start(node)
    report = guard(make_config(), proc=RefusingFds(other))
    assert report.verdict.kind == "unknown", report.verdict.texts
    assert holders.signals() == [] and job.poll() is None
    [hr] = report.holders
    assert hr.decision.holder.pid == pid and hr.outcome.kind == "not-signalled"


def test_a_process_the_device_reports_after_a_drain_that_vetoed_is_not_signalled(
        make_config: Any, node: str, holders: Holders, tmp_path: Path, smi: FakeNvidiaSmi) -> None:
    """The drain already vetoed (a holder outlived its wait): a process the device reports
    only afterwards is not stopped for a suspend that will not happen."""
    other = tmp_path / "not-a-node"
    other.write_bytes(b"")
    _slow, pid = holders.start(node, mode="slow")
    late, dpid = holders.start(str(other))  # holds nothing the scan knows
    smi.show(busy_gpus(), [pid])
    check = Checks()

    def after_drain(config: IdleConfig, families: Sequence[str], deadline: Deadline) -> IdleReport:
        if check.calls:
            smi.show(busy_gpus(), [pid, dpid])
        return check(config, families, deadline)

    report = guard(make_config(drain={"timeout_s": 1}), idle_check=after_drain)
    assert report.verdict.kind == "veto", report.verdict.texts
    assert any(f"pid {pid}" in r and "still running" in r for r in report.verdict.texts)
    assert holders.signals() == [f"{pid} SIGINT"] and late.poll() is None


class RefusingNewFds(ProcFS):
    """/proc as it is, but the fd table of every process started after this one was made
    refuses even root: a job that starts during the drain and cannot be read."""

    def __init__(self) -> None:
        super().__init__()
        self.known = set(self.pids())

    def open_paths(self, pid: int, *args: Any, **kw: Any) -> list[tuple[str, str]]:
        if pid not in self.known:
            raise ProcAccessError(f"/proc/{pid}/fd: Permission denied")
        return super().open_paths(pid, *args, **kw)


def test_a_process_the_rescan_could_not_read_leaves_the_verdict_unknown(
        make_config: Any, node: str, holders: Holders) -> None:
    # The job's supervisor starts it again after its SIGINT; the rescan cannot
    # read the new process, which may hold the node as its first one did.
    _sup, _supervisor = holders.start(node, mode="supervisor")
    report = guard(make_config(drain={"rounds": 2}), proc=RefusingNewFds())
    assert report.verdict.kind == "unknown", report.verdict.texts
    [why] = report.verdict.texts
    assert why.startswith("1 process could not be inspected as root (pids ")
    assert "no device view answers for every device" in why
    assert [s for s in holders.signals() if s.endswith("SIGINT")] != []


@pytest.mark.skipif(os.geteuid() != 0, reason="as root, an unread process may be vouched for")
def test_a_process_list_of_fewer_devices_than_the_host_has_vouches_for_none() -> None:
    """nvidia-smi lists the processes of one GPU of two; NVML reads both idle but lists no
    process: no view answers for the GPU nvidia-smi left out, so an unread process there
    leaves the verdict unknown, as the idle state alone would let the suspend go."""
    def gpu(n: int, source: str, lists: bool) -> DeviceReading:
        return DeviceReading(f"gpu {n}", "nvidia", "idle", source, {"gpu_util_pct": 0.0},
                             lists_processes=lists)

    report = IdleReport("idle", (gpu(0, "nvidia-smi", True), gpu(0, "nvml", False),
                                 gpu(1, "nvml", False)), ())
    assert report.process_view("nvidia", 1) == "nvidia-smi"
    assert report.process_view("nvidia", 2) == ""
    said = uninspected([4242], report, ("nvidia", "nvidia"))
    [reason] = said.reasons
    assert reason.code == "uninspected" and "no device view answers for every device" in reason.text
    assert said.warnings == ()
    # Both GPUs listed with their processes: the unread process is vouched for.
    whole = IdleReport("idle", (gpu(0, "nvidia-smi", True), gpu(1, "nvidia-smi", True)), ())
    assert uninspected([4242], whole, ("nvidia", "nvidia")).reasons == ()


@pytest.mark.skipif(os.geteuid() != 0, reason="as root, an unread process may be vouched for")
def test_no_device_view_or_a_devices_node_vouches_for_none() -> None:
    """No reading at all (a dry run that asks no device: status with an untrusted config), or
    a node from [devices] nodes beside the GPUs: nothing answers for the unread process."""
    gpu = DeviceReading("gpu 0", "nvidia", "idle", "nvml", {"gpu_util_pct": 0.0},
                        lists_processes=True)
    whole = IdleReport("idle", (gpu,), ())
    assert uninspected([4242], whole, ("nvidia",)).reasons == ()
    for first, families in ((None, ("nvidia",)), (None, ("extra",)), (whole, ("nvidia", "extra")),
                            (IdleReport("idle", (), ()), ("extra",))):
        said = uninspected([4242], first, families)
        [reason] = said.reasons
        assert reason.code == "uninspected", (first, families)
        assert "no device view answers for every device" in reason.text
        assert said.warnings == ()


def test_a_device_still_busy_after_the_drain_is_named_in_its_reason(
        make_config: Any, node: str, holders: Holders, smi: FakeNvidiaSmi) -> None:
    """The device the reason is about travels with it (reason_details' device), so that a
    repeat whose figures changed is known for the same refusal."""
    job, pid = holders.start(node)
    smi.show(busy_gpus(), [pid])
    check = Checks()

    def after_drain(config: IdleConfig, families: Sequence[str], deadline: Deadline) -> IdleReport:
        if check.calls:
            smi.show(busy_gpus(util="97 %"), [])  # the job left; the GPU still works
        return check(config, families, deadline)

    report = guard(make_config(), idle_check=after_drain)
    assert report.verdict.kind == "veto", report.verdict.texts
    assert job.wait(timeout=5) == 0 and holders.signals() == [f"{pid} SIGINT"]
    [busy] = [r for r in report.verdict.reasons if r.code == "device-busy"]
    assert busy.device == "gpu 0" and busy.text.startswith("gpu 0 (nvidia-smi): "), busy
