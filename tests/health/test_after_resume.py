"""The check, the repairs in their order, and the check again, on fake devices."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import MODPROBE, Gpu, journalctl
from helpers import REPO
from helpers.records import finding
from test_checks import gpu_config, npu_config

from suspendguard.config import defaults
from suspendguard.doctor.units import health_budget_s
from suspendguard.health import resume
from suspendguard.health.resume import AfterResume, Tools, after_resume
from suspendguard.record import FindingRecord
from suspendguard.system.deadline import RESTORE_AFTER_RESUME_S

SINCE = datetime.fromtimestamp(1_700_000_000)


class Steps:
    def __init__(self) -> None:
        self.taken: list[tuple[str, str]] = []

    def __call__(self, name: str, note: str) -> None:
        self.taken.append((name, note))


def run(config: Any, tmp_path: Path, *, blockers: dict[str, list[str]] | None = None,
        findings: tuple[FindingRecord, ...] = (), systemctl: str = "/bin/false",
        pauses: list[float] | None = None,
        before: dict[str, str] | None = None) -> tuple[AfterResume, Steps]:
    steps = Steps()
    tools = Tools(modprobe=str(MODPROBE), systemctl=systemctl,
                  journalctl=journalctl(tmp_path),
                  sleep=(pauses if pauses is not None else []).append)
    outcome = after_resume(config, SINCE, findings, blockers=lambda f: (blockers or {}).get(f, []),
                           step=steps, tools=tools, before=before)
    return outcome, steps


def test_uvm_reloaded_then_persistenced_restarted_then_checked_again(
        gpu: Gpu, tmp_path: Path) -> None:
    outcome, steps = run(gpu_config(gpu), tmp_path, systemctl=gpu.systemctl)
    assert outcome.first.unhealthy() and outcome.final.healthy
    assert outcome.held_reason() == ""
    assert [c for c in gpu.calls() if not c.startswith("cuDevice") and "Ctx" not in c] == [
        "cuInit 0",
        "modprobe -r nvidia_uvm", "modprobe nvidia_uvm",
        "systemctl is-active --quiet nvidia-persistenced.service",
        "systemctl restart nvidia-persistenced.service",
        "cuInit 0",
    ]
    assert [name for name, _ in steps.taken] == ["health", "repair", "repair", "health"]
    assert "CUDA init error 999" in steps.taken[0][1]
    assert steps.taken[1][1].startswith("nvidia: reloaded nvidia_uvm")
    assert steps.taken[3][1] == "nvidia again: gpu 0 healthy"
    assert outcome.repairs == ("reload",)


def test_no_persistenced_is_said_and_not_restarted(gpu: Gpu, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_PERSISTENCED", "absent")
    outcome, steps = run(gpu_config(gpu), tmp_path, systemctl=gpu.systemctl)
    assert outcome.final.healthy
    assert not any("restart" in c for c in gpu.calls())
    assert ("repair", "nvidia: nvidia-persistenced.service does not run here: not restarted") \
        in steps.taken


def test_still_999_after_the_reload_holds_with_the_reason(
        gpu: Gpu, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_CUDA_MODE", "broken")
    outcome, _ = run(gpu_config(gpu), tmp_path)
    assert not outcome.final.healthy
    assert outcome.held_reason() == ("device nvidia unhealthy: CUDA init error 999 "
                                     "(CUDA_ERROR_UNKNOWN) after reload")


def test_nothing_repaired_while_a_process_the_guard_did_not_stop_holds_the_device(
        gpu: Gpu, tmp_path: Path) -> None:
    outcome, steps = run(gpu_config(gpu), tmp_path, blockers={"nvidia": ["pid 4242 python3"]})
    assert not any(c.startswith("modprobe") for c in gpu.calls())
    assert steps.taken[-1] == ("repair", "nvidia: not repaired: the device is held by "
                               "pid 4242 python3, which the guard did not stop")
    assert outcome.held_reason().startswith("device nvidia unhealthy: CUDA init error 999")


def test_a_reload_that_fails_is_recorded(gpu: Gpu, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_MODPROBE_IN_USE", "1")
    outcome, steps = run(gpu_config(gpu), tmp_path)
    assert [c for c in gpu.calls() if c.startswith("modprobe")] == ["modprobe -r nvidia_uvm"]
    assert any("-r nvidia_uvm failed" in note and "in use" in note for _, note in steps.taken)
    assert not outcome.final.healthy and outcome.repairs == ()


def test_repair_off(gpu: Gpu, tmp_path: Path) -> None:
    outcome, steps = run(gpu_config(gpu, repair=False), tmp_path)
    assert not gpu.calls()[1:]  # one cuInit, nothing else
    assert steps.taken[-1] == ("repair", "nvidia: not repaired: [resume] repair is off")
    assert not outcome.final.healthy


def test_an_unknown_failure_is_not_repaired_by_a_reload(gpu: Gpu, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_CUDA_MODE", "ok")
    kernel = journalctl(tmp_path, "NVRM: Xid (PCI:0000:01:00): 79, pid=1, GPU has fallen off "
                                  "the bus.")
    steps = Steps()
    outcome = after_resume(gpu_config(gpu), SINCE, (), blockers=lambda f: [], step=steps,
                           tools=Tools(modprobe=str(MODPROBE), journalctl=kernel))
    assert not any(c.startswith("modprobe") for c in gpu.calls())
    assert "no repair known" in steps.taken[-1][1] and "fallen off the bus" in steps.taken[-1][1]
    assert not outcome.final.healthy


def test_ascend_alarm_then_ok_waits_with_a_growing_pause(npu: Any, tmp_path: Path) -> None:
    npu.alarms(3)
    pauses: list[float] = []
    outcome, steps = run(npu_config(npu), tmp_path, pauses=pauses)
    assert outcome.first.unhealthy() and outcome.final.healthy
    assert pauses == [0.5, 1.0, 2.0]  # the first check and two more answered Alarm
    assert npu.info_calls() == 4
    assert steps.taken[1][0] == "repair" and "(3 checks)" in steps.taken[1][1]


def test_the_ascend_wait_goes_on_whoever_holds_the_device(npu: Any, tmp_path: Path) -> None:
    # A job a user started at once after resume holds the device: waiting touches nothing,
    # and a device that was only slow to come back is healthy after it all the same.
    npu.alarms(2)
    outcome, steps = run(npu_config(npu), tmp_path, blockers={"ascend": ["pid 12 python3"]},
                         pauses=[])
    assert outcome.first.unhealthy() and outcome.final.healthy, steps.taken
    assert not any("not repaired" in note for _, note in steps.taken)


def test_ascend_never_ready_is_held_after_ready_timeout(npu: Any, tmp_path: Path) -> None:
    npu.alarms(1000)
    outcome, _steps = run(npu_config(npu, ready_timeout_s=0.3), tmp_path)
    assert not outcome.final.healthy
    assert outcome.held_reason().startswith("device npu 0 unhealthy: npu-smi health Alarm")
    assert outcome.held_reason().endswith("after waiting 0.3 s for the device")


def test_the_ascend_wait_s_checks_end_with_it(npu: Any, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A check the wait starts near its end gets what is left of it (at least 1 s a probe),
    never a whole health_timeout_s per probe: the unit's TimeoutStartSec is planned so."""
    npu.alarms(1000)
    limits: list[float | None] = []
    real = resume.check

    def check(*args: Any, **kw: Any) -> Any:
        limits.append(kw.get("timeout_s"))
        return real(*args, **kw)

    monkeypatch.setattr(resume, "check", check)
    outcome, _steps = run(npu_config(npu, ready_timeout_s=0.3, health_timeout_s=20), tmp_path)
    assert not outcome.final.healthy
    first, *waited = limits
    assert first is None and waited and all(t == resume.LAST_PROBE_S for t in waited), limits


def test_the_resume_unit_as_shipped_has_time_for_the_default_check() -> None:
    unit = (REPO / "systemd" / "suspendguard-resume.service").read_text()
    [timeout] = [line.split("=", 1)[1] for line in unit.splitlines()
                 if line.startswith("TimeoutStartSec=")]
    assert float(timeout) >= health_budget_s(defaults())
    assert health_budget_s(defaults()) >= resume.plan(defaults())[1] + RESTORE_AFTER_RESUME_S


def test_ascend_alarm_as_before_the_suspend_holds_nothing_back(npu: Any, tmp_path: Path) -> None:
    npu.alarms(1000)
    pauses: list[float] = []
    outcome, steps = run(npu_config(npu, ready_timeout_s=5), tmp_path, pauses=pauses,
                         before={"npu 0": "Alarm", "npu 1": "Alarm"})
    assert outcome.first.healthy and outcome.final.healthy and pauses == []
    assert [s for s, _ in steps.taken] == ["health"]
    outcome, _ = run(npu_config(npu, ready_timeout_s=0.3), tmp_path,
                     before={"npu 0": "Alarm", "npu 1": "OK"})
    assert outcome.held_reason().startswith(
        "device npu 1 unhealthy: npu-smi health Alarm (before the suspend: OK)")


def test_ascend_busy_finding_waits_then_asks_the_device_again(npu: Any, tmp_path: Path) -> None:
    # Not ready yet when the logs were read: the wait is what answers it.
    outcome, _steps = run(npu_config(npu), tmp_path, findings=(finding("device-busy"),))
    assert [d.source for d in outcome.first.unhealthy()] == ["catalog"]
    assert outcome.final.healthy
    assert [d.describe() for d in outcome.final.devices] == [
        "npu 0 healthy", "npu 1 healthy", "device 0 healthy", "device 1 healthy"]


def test_a_lost_heartbeat_stays_after_the_wait_though_the_chips_read_healthy(
        npu: Any, tmp_path: Path) -> None:
    """The chip reset while asleep, and npu-smi and pyACL read it healthy again: no wait undoes
    what the logs recorded. The wait ends once the finding alone is left."""
    pauses: list[float] = []
    outcome, steps = run(npu_config(npu, ready_timeout_s=30), tmp_path, pauses=pauses,
                         findings=(finding("device-busy"), finding("heartbeat-lost")))
    assert [d.reason for d in outcome.first.unhealthy()] == [
        "the device answered busy (not ready after resume) (the device-busy finding)"]
    assert [d.reason for d in outcome.final.unhealthy()] == [
        "the host lost the device's heartbeat (the device reset) (the heartbeat-lost finding)"]
    assert pauses == [0.5], steps.taken  # one check: the chips answered
    reason = outcome.held_reason()
    assert reason.startswith("device ascend unhealthy: the host lost the device's heartbeat")
    assert reason.endswith(" s for the device") and "after waiting 30 s" not in reason


def test_healthy_host_takes_no_step_but_the_check(gpu: Gpu, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_CUDA_MODE", "ok")
    outcome, steps = run(gpu_config(gpu), tmp_path)
    assert steps.taken == [("health", "gpu 0 healthy")]
    assert outcome.final.healthy and outcome.repairs == ()
