"""The guard's own child stuck in the kernel: scanned as the holder it is, and never exempt.

A child killed at its timeout that does not go (state D: in a driver call that
does not return, which SIGKILL waits out) is given up on by the runner. It was
left out of every later scan, and the verdict could allow. Here the group
kill is stubbed out, so that a real ``sleep`` holding the node outlives its
timeout as such a child does; a real process in state D is a vfork parent
(the kernel waits for its child in TASK_KILLABLE, which /proc shows as D).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.isolation import needs_root
from helpers.runners import guard
from helpers.wait import wait_for

from suspendguard.guard.identity import vouch
from suspendguard.guard.inventory import take_inventory
from suspendguard.guard.policy import decide
from suspendguard.guard.scan import scan_holders
from suspendguard.model import holder_id
from suspendguard.store import lock as guard_lock
from suspendguard.system import runner
from suspendguard.system.procfs import ProcFS

pytestmark = needs_root

PROBE = "suspendguard.idle.acl_probe"

# Holds the node (its last argument), says "ready PID", then vforks: the parent waits for
# its child in the kernel, in state D, until the child ends (60 s at most).
VFORK_HOLDER = r"""
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (open(argv[argc - 1], O_RDONLY) < 0) { perror("open"); return 1; }
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    if (vfork() == 0) { sleep(60); _exit(0); }
    return 0;
}
"""


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


@pytest.fixture
def stuck_child(node: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """A child of the runner, holding ``node``, that its timeout's kill did not end."""
    monkeypatch.setattr(runner, "_kill_group", lambda pid: None)  # as SIGKILL waits on a D state
    monkeypatch.setattr(runner, "KILLED_GRACE_S", 0.2)
    pid_file = tmp_path / "stuck.pid"
    result = runner.run(["sh", "-c", 'echo $$ >"$1"; exec sleep 60 <"$2"', "sh", str(pid_file),
                         node], 1.0)
    assert result.timed_out
    pid = int(pid_file.read_text())
    try:
        yield pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)  # started by this test, through the runner
        wait_for(lambda: not runner.abandoned(), timeout=10.0,
                 message="the killed child was never reaped")


def test_a_child_that_outlives_its_kill_is_scanned_and_vetoes(
        make_config: Any, stuck_child: int) -> None:
    report = guard(make_config())
    assert report.verdict.kind == "veto", report.verdict.texts
    [why] = [r for r in report.verdict.reasons if r.pid == stuck_child]
    assert why.code == "device-busy"
    assert why.text.startswith(f"the guard's own sh (pid {stuck_child}) did not exit "
                               "after SIGKILL (")
    assert "stuck in the driver" in why.text
    # The scan saw it as the holder it is; refused already, nobody is signalled.
    [held] = [hr for hr in report.holders if hr.holder.pid == stuck_child]
    assert held.outcome.kind == "not-signalled"
    assert stuck_child not in runner.active_children()
    assert [a.pid for a in runner.abandoned()] == [stuck_child]  # still there: not signalled
    assert [a.command for a in runner.abandoned()] == ["sh"]  # no name given: its program


def test_abandoned_lists_only_those_not_reaped(stuck_child: int) -> None:
    os.kill(stuck_child, signal.SIGKILL)
    wait_for(lambda: not runner.abandoned(), timeout=10.0)
    assert stuck_child not in runner.active_children()


@pytest.fixture
def vfork_holder(tmp_path: Path) -> Path:
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("no C compiler (gcc) to build the vfork holder")
    source, out = tmp_path / "vfork_holder.c", tmp_path / "vfork_holder"
    source.write_text(VFORK_HOLDER)
    subprocess.run([gcc, "-Wall", "-o", str(out), str(source)], check=True, timeout=120)
    return out


def test_a_runs_own_probe_in_state_d_is_not_exempt(
        make_config: Any, node: str, vfork_holder: Path) -> None:
    config = make_config()
    probing = guard_lock.take(config.state.dir, 0.0)  # this process: the run that probes
    token = probing.token()
    assert token is not None
    # Its command line names the probe's module, and its parent (this process) holds the lock.
    proc = subprocess.Popen([str(vfork_holder), PROBE, node], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        assert line[:1] == ["ready"], line
        pid = int(line[1])
        wait_for(lambda: _state(pid) == "D", timeout=10.0, message=f"pid {pid} never in state D")
        [probe] = [h for h in scan_holders(take_inventory(config.devices)).holders if h.pid == pid]
        vouched = vouch([probe], ProcFS(), token)
        assert vouched.probes == frozenset()
        assert holder_id(probe) in vouched.stuck_probes
        [d] = decide([probe], config.policy, config.drain, vouched=vouched)
        assert d.action == "drain"
        assert d.notes[0] == ("suspendguard's own pyACL probe, but it is in uninterruptible "
                              "sleep (state D): stuck in the driver, it does not exit by "
                              "itself, so not exempt")
    finally:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: it and its vfork child
        proc.wait()
        probing.release()
