"""One holder the guard cannot take (its pidfd, its start time) makes the veto certain before
any signal: nobody is signalled, the others' jobs are not ended for a suspend refused anyway.

The fd table full (EMFILE) is real in a child of its own, whose limit on open files leaves the
second holder's start time unreadable; the whole run takes pidfd_open's EMFILE for one holder,
raised by os.pidfd_open (nothing else makes it fail on cue for one process).
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.holders import Holders
from helpers.refusing import descriptors_left
from helpers.runners import guard

from suspendguard.guard.drain import VETO_ANYWAY

# Two holders drained in a child whose limit on open files leaves two descriptors free: the
# first holder's pidfd takes one (its start time read through the other, closed after), the
# second's pidfd the last, so that its start time cannot be read (EMFILE).
TWO_LEFT = """
import json, sys, time
from suspendguard.guard.drain import drain
from suspendguard.model import Holder
from suspendguard.system.deadline import Deadline
from suspendguard.system.procfs import ProcFS
proc = ProcFS()
holders = [Holder(pid=pid, start_time=proc.stat(pid).start_time, ppid=1, uid=0, user="root",
                  comm="python3", exe=sys.executable, cmdline=("python3",), unit=None,
                  container=None, nspid=(pid,), nodes=(), sigint="caught")
           for pid in map(int, sys.argv[1:3])]
deadline = Deadline(time.monotonic() + 10)
""" + descriptors_left(2) + """
result = drain(holders, "SIGINT", 2.0, deadline)
print(json.dumps({str(pid): [o.kind, o.why] for (pid, _at), o in result.outcomes.items()}))
"""


def _start_two(holders: Holders, node: str, tmp_path: Path) -> list[tuple[Any, int, Path]]:
    """Two graceful holders of ``node``, each with a marker of its own: job, pid, marker."""
    started = []
    for name in ("first", "second"):
        marker = tmp_path / f"{name}.log"
        holders.marker = str(marker)
        job, pid = holders.start(node, delay=0.1)
        started.append((job, pid, marker))
    return started


def test_a_holder_out_of_descriptors_leaves_the_other_unsignalled(
        node: str, holders: Holders, tmp_path: Path) -> None:
    (first, first_pid, first_log), (second, second_pid, second_log) = _start_two(
        holders, node, tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", TWO_LEFT, str(first_pid), str(second_pid)],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    outcomes = json.loads(done.stdout)
    kind, why = outcomes[str(second_pid)]
    assert kind == "not-signalled" and why.startswith(
        "could not be signalled: its start time could not be read (Too many open files"), why
    assert outcomes[str(first_pid)] == ["not-signalled", VETO_ANYWAY], outcomes
    time.sleep(0.3)  # a SIGINT sent would have been marked by now
    assert not first_log.exists() and not second_log.exists()
    assert first.poll() is None and second.poll() is None


def test_a_run_with_a_holder_it_cannot_take_vetoes_and_signals_nobody(
        make_config: Any, node: str, holders: Holders, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    (first, first_pid, first_log), (second, second_pid, second_log) = _start_two(
        holders, node, tmp_path)
    real = os.pidfd_open

    def full_table_for_second(pid: int, flags: int = 0) -> int:
        if pid == second_pid:
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        return real(pid, flags)

    monkeypatch.setattr(os, "pidfd_open", full_table_for_second)
    report = guard(make_config(drain={"timeout_s": 2}))
    assert report.verdict.kind == "veto", report.verdict
    [reason] = report.verdict.reasons
    assert (reason.code, reason.pid) == ("unsignallable", second_pid), reason
    assert "pidfd_open failed: Too many open files" in reason.text
    outcomes = {h.decision.holder.pid: h.outcome for h in report.holders}
    assert (outcomes[first_pid].kind, outcomes[first_pid].why) == ("not-signalled", VETO_ANYWAY)
    assert not outcomes[first_pid].signalled
    time.sleep(0.3)
    assert not first_log.exists() and not second_log.exists()
    assert first.poll() is None and second.poll() is None
