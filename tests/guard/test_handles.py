"""The handle on a holder and the signal through it (guard/handles.py), on real processes.

A holder whose start time the guard may not read once its handle is taken
cannot be told from a process that took its PID: it is never signalled, and
vetoes, named. Without pidfd_open the signal still goes through the fd on
/proc/PID (pidfd_send_signal takes one from Linux 5.1), by PID only where the
kernel lacks that call.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from helpers.holders import Holders
from helpers.nvidia import Checks, FakeNvidiaSmi
from helpers.runners import guard

from suspendguard.config import DevicesConfig, EscalationStep, IdleConfig
from suspendguard.guard.drain import drain
from suspendguard.guard.inventory import take_inventory
from suspendguard.guard.scan import scan_holders
from suspendguard.idle.base import IdleReport
from suspendguard.model import Holder
from suspendguard.system.deadline import Deadline
from suspendguard.system.procfs import ProcAccessError, ProcFS, Stat


def _no_pidfd(_pid: int, _flags: int = 0) -> int:
    """A kernel before 5.3."""
    raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))


def scanned(node: str, pid: int) -> Holder:
    [holder] = [h for h in scan_holders(take_inventory(DevicesConfig((), (node,), ()))).holders
                if h.pid == pid]
    return holder


class Refusing(ProcFS):
    """A /proc that, once ``armed``, refuses one process's ``stat`` or its folder itself (a
    security module's rule, say): the process is there, its start time unreadable."""

    def __init__(self, pid: int, entry: str) -> None:
        super().__init__()
        self.pid, self.entry, self.armed = pid, entry, False

    def _refuse(self, pid: int, entry: str) -> None:
        if self.armed and pid == self.pid and entry == self.entry:
            raise ProcAccessError(f"/proc/{pid}: refused")

    def stat(self, pid: int, at: int | None = None) -> Stat | None:
        self._refuse(pid, "stat")
        return super().stat(pid, at)

    def open_dir(self, pid: int) -> int | None:
        self._refuse(pid, "folder")
        return super().open_dir(pid)


@pytest.mark.parametrize(("pidfds", "entry", "refused"), [
    (True, "stat", "/stat"), (False, "stat", "/stat"), (False, "folder", "")])
def test_a_holder_whose_start_time_is_refused_at_the_signal_vetoes_unsignalled(
        pidfds: bool, entry: str, refused: str, make_config: Any, node: str, holders: Holders,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Refused between the scan and the signal (while the device is read): the process
    is still there, so it is no "exited before the signal", which would let it go."""
    if not pidfds:
        monkeypatch.setattr(os, "pidfd_open", _no_pidfd)
    FakeNvidiaSmi(tmp_path, monkeypatch)
    check = Checks()
    job, pid = holders.start(node)
    proc = Refusing(pid, entry)

    def refuse_then_ask(config: IdleConfig, families: Sequence[str],
                        deadline: Deadline) -> IdleReport:
        proc.armed = True  # after the scan, before the signal
        return check(config, families, deadline)

    report = guard(make_config(), idle_check=refuse_then_ask, proc=proc)
    [result] = report.holders
    why = f"could not be signalled: its start time could not be read (/proc/{pid}{refused} "
    assert result.outcome.kind == "not-signalled", result.outcome
    assert result.outcome.why == why + "refused to the guard)"
    assert report.verdict.kind == "veto", report.verdict
    [reason] = report.verdict.reasons
    assert reason.code == "unsignallable" and reason.pid == pid
    assert reason.text.startswith(f"pid {pid} python {why}"), reason.text
    assert f"it still holds the device; stop it yourself (kill -INT {pid})" in reason.text
    time.sleep(0.3)
    assert holders.signals() == [] and job.poll() is None


def test_without_pidfd_open_the_signal_goes_through_the_proc_fd_not_by_pid(
        node: str, holders: Holders, monkeypatch: pytest.MonkeyPatch) -> None:
    """kill(PID) could reach a process that took the PID after the holder was reaped."""
    graceful, gpid = holders.start(node, delay=0.1)
    stubborn, spid = holders.start(node, mode="stubborn")
    found = [scanned(node, gpid), scanned(node, spid)]

    def by_pid(pid: int, signum: int) -> None:
        raise AssertionError(f"signal {signum} sent to pid {pid} by its number")

    with monkeypatch.context() as m:
        m.setattr(os, "kill", by_pid)
        result = drain(found, "SIGINT", 0.5, Deadline(time.monotonic() + 10),
                       (EscalationStep("SIGTERM", 0.3), EscalationStep("SIGKILL", 5)),
                       opener=_no_pidfd)
    outcomes = {h.pid: result.outcomes[(h.pid, h.start_time)] for h in found}
    assert outcomes[gpid].kind == "exited" and outcomes[spid].kind == "exited", outcomes
    assert "SIGKILL" in outcomes[spid].why  # the escalation went the same way
    assert graceful.wait(timeout=5) == 0 and stubborn.wait(timeout=5) == -signal.SIGKILL
    assert holders.signals() == [f"{gpid} SIGINT", f"{spid} SIGTERM"]


@pytest.mark.parametrize("error", [errno.ENOSYS, errno.EBADF])
def test_a_kernel_without_pidfd_send_signal_has_the_signal_go_by_pid(
        error: int, node: str, holders: Holders, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before Linux 5.1 (ENOSYS), or with a /proc that is no procfs (EBADF: the fd is no
    process's), kill() is the only way left."""
    graceful, pid = holders.start(node, delay=0.1)
    holder = scanned(node, pid)
    sent: list[tuple[int, int]] = []
    kill = os.kill

    def no_call(_fd: int, _signum: int, *_args: object) -> None:
        raise OSError(error, os.strerror(error))

    def by_pid(target: int, signum: int) -> None:
        sent.append((target, signum))
        kill(target, signum)

    with monkeypatch.context() as m:
        m.setattr(signal, "pidfd_send_signal", no_call)
        m.setattr(os, "kill", by_pid)
        result = drain([holder], "SIGINT", 5.0, Deadline(time.monotonic() + 10), opener=_no_pidfd)
    assert result.outcomes[(pid, holder.start_time)].kind == "exited"
    assert sent == [(pid, signal.SIGINT)] and graceful.wait(timeout=5) == 0
