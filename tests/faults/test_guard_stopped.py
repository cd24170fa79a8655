"""Issue 15 item 8: stopped and cgroup-v1-frozen holders are never signalled, and say why."""

from __future__ import annotations

import io
import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from helpers.cgroups import control, freezing
from helpers.holders import Holders
from helpers.nvidia import IDLE_GPUS, Checks, FakeNvidiaSmi
from helpers.runners import quick_veto
from helpers.wait import wait_for

from suspendguard.config import IdleConfig
from suspendguard.guard.pipeline import run
from suspendguard.guard.report import Report
from suspendguard.idle.base import IdleReport
from suspendguard.system.deadline import Deadline
from suspendguard.system.log import Logger
from suspendguard.system.procfs import ProcFS


def guard(config: Any, idle_check: Any = None, **kw: Any) -> Report:
    return run(config, dry_run=False, action="suspend", origin="test", idle_check=idle_check,
               log=Logger(io.StringIO(), {}), record=False, **kw)


def state_of(pid: int) -> str:
    stat = ProcFS().stat(pid)
    assert stat is not None
    return stat.state


def test_a_stopped_holder_vetoes_unsignalled_and_lives_on_when_continued(
        make_config: Any, node: str, holders: Holders) -> None:
    job, pid = holders.start(node)
    os.kill(pid, signal.SIGSTOP)
    wait_for(lambda: state_of(pid) == "T", interval=0.02, message="the holder never stopped")
    # no wait for a job that cannot answer
    report = quick_veto(lambda: guard(make_config(drain={"timeout_s": 2})), 1.5)
    [reason] = report.verdict.texts
    assert f"pid {pid}" in reason and "stopped (SIGSTOP, state T)" in reason
    assert f"kill -CONT {pid}" in reason
    [result] = report.holders
    assert result.decision.kind == "veto-stopped" and result.outcome.why == "stopped"
    os.kill(pid, signal.SIGCONT)
    time.sleep(0.3)
    assert job.poll() is None and holders.signals() == []  # no SIGINT was left pending


@pytest.fixture
def v1_freezer() -> Iterator[Callable[[int], str]]:
    """A cgroup of this test's own in the v1 freezer hierarchy, frozen with the holder in it."""
    root = "/sys/fs/cgroup/freezer"
    if os.geteuid() != 0 or not os.path.exists(os.path.join(root, "tasks")):
        pytest.skip("needs root and a cgroup v1 freezer hierarchy (a hybrid host)")
    with freezing(root, "a freezer cgroup", "freezer.state", "FROZEN", "THAWED",
                  lambda path: control(path, "freezer.state").strip() == "FROZEN") as freeze:
        yield freeze


def test_a_holder_frozen_by_the_v1_freezer_vetoes_unsignalled(
        make_config: Any, node: str, holders: Holders, v1_freezer: Any) -> None:
    job, pid = holders.start(node)
    state = v1_freezer(pid)
    report = quick_veto(lambda: guard(make_config(drain={"timeout_s": 2})), 1.5)
    [reason] = report.verdict.texts
    assert f"pid {pid}" in reason and "frozen cgroup" in reason
    assert f"echo THAWED > {state}" in reason
    with open(state, "w") as f:
        f.write("THAWED")
    time.sleep(0.3)
    assert job.poll() is None and holders.signals() == []


def pending_sigint(pid: int) -> bool:
    """Whether SIGINT is pending for ``pid``, to one thread or the whole process."""
    with open(f"/proc/{pid}/status") as f:
        masks = [int(line.split()[1], 16) for line in f
                 if line.startswith(("SigPnd:", "ShdPnd:"))]
    return any(m & (1 << (signal.SIGINT - 1)) for m in masks)


def test_a_holder_stopped_after_the_scan_vetoes_and_nobody_is_signalled(
        make_config: Any, node: str, holders: Holders, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Stopped while the device is read, between the scan and the signal: the veto is as
    certain as for one stopped when scanned, so no SIGINT is left pending in it, to end it
    once it continues, and the other job is not stopped for nothing."""
    smi = FakeNvidiaSmi(tmp_path, monkeypatch)
    smi.show(IDLE_GPUS, [])
    check = Checks()
    other, opid = holders.start(node)
    job, pid = holders.start(node)

    def stop_then_ask(config: IdleConfig, families: Sequence[str],
                      deadline: Deadline) -> IdleReport:
        if not check.calls:  # the device's view before the drain
            os.kill(pid, signal.SIGSTOP)
            wait_for(lambda: state_of(pid) == "T", interval=0.02, message="never stopped")
        return check(config, families, deadline)

    report = guard(make_config(drain={"timeout_s": 30}), idle_check=stop_then_ask)
    assert report.verdict.kind == "veto"
    [reason] = report.verdict.reasons
    assert reason.code == "stopped" and reason.pid == pid
    assert reason.text.startswith(f"pid {pid} python was stopped (SIGSTOP, state T) when the "
                                  "signal was due: a signal would stay pending"), reason.text
    assert f"continue it (kill -CONT {pid})" in reason.text
    outcomes = {h.decision.holder.pid: h.outcome for h in report.holders}
    assert outcomes[pid].why == "stopped (state T) since the scan"
    assert outcomes[opid].why == "veto anyway: nobody is signalled"
    assert not pending_sigint(pid) and holders.signals() == []
    os.kill(pid, signal.SIGCONT)
    assert job.poll() is None and other.poll() is None
