"""What the veto of a holder the drain could not signal tells the operator to do.

The drain's time spent before any signal (its round left with less than
NO_WAIT_S) leaves every holder unsignalled, whatever its part in its job: a
worker, a rank whose launcher forwards, a plain process, one an earlier
attempt signalled. The advice follows the job's shape, as a timeout's does:
a second SIGINT, or one beside the launcher's forward, would cost the job
its save.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

from helpers.holders import HOLDER, SLOW_FAMILY, Holders

from suspendguard.config import DevicesConfig
from suspendguard.guard.drain import drain
from suspendguard.guard.inventory import take_inventory
from suspendguard.guard.job_stop import NO_JOBS, JobStop
from suspendguard.guard.jobs import plan
from suspendguard.guard.left_running import left_running
from suspendguard.guard.scan import scan_holders
from suspendguard.model import Decision, Holder, Owner, holder_id
from suspendguard.system.deadline import Deadline
from suspendguard.system.procfs import ProcFS

# torchrun's shape, named as the built-in kind is told: two ranks holding the node.
TORCHRUN = str(Path(__file__).parent.parent / "helpers" / "launcher.py")


def _start(holders: Holders, argv: list[str]) -> list[int]:
    proc = subprocess.Popen([sys.executable, *argv], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    holders.procs.append(proc)
    assert proc.stdout is not None
    return [int(word) for word in proc.stdout.readline().split() if word.isdigit()]


def _scan(node: str) -> list[Holder]:
    return list(scan_holders(take_inventory(DevicesConfig((), (node,), ()))).holders)


def test_a_holder_left_unsignalled_is_told_to_stop_where_the_drain_would_have(
        node: str, holders: Holders, tmp_path: Path) -> None:
    parent, worker = _start(holders, ["-c", SLOW_FAMILY, node])
    shutil.copy(TORCHRUN, tmp_path / "torchrun")
    shutil.copy(HOLDER, tmp_path)  # the launcher's jobs, beside it
    launcher, *ranks = _start(holders, [str(tmp_path / "torchrun"), "--node", node,
                                        "--shape", "torchrun", "--marker", holders.marker])
    found = {h.pid: h for h in _scan(node) if h.pid in (parent, worker, *ranks)}
    assert found.keys() == {parent, worker, *ranks}
    jobs = plan(list(found.values()), ProcFS())
    # The round's time spent before any signal: nobody is signalled, every holder vetoes.
    result = drain(list(found.values()), "SIGINT", 5.0, Deadline(time.monotonic() + 0.05))
    assert holders.signals() == []

    def said(pid: int, stop: JobStop = NO_JOBS) -> str:
        d = Decision(found[pid], "drain", "holds a compute node", "SIGINT", 5.0)
        (reason,) = left_running(d, result, jobs, stop, Owner("plain"), False, "")
        assert reason.code == "unsignallable" and "no time was left" in reason.text, reason
        return reason.text

    # A worker leaves with its parent: never a signal of its own (it breaks the parent's loop).
    text = said(worker)
    assert f"it is a worker of pid {parent} " in text and "leaves with its parent" in text, text
    assert "kill -INT" not in text, text
    # A rank of a launcher that forwards: the launcher gets the one signal, never the rank.
    for rank in ranks:
        text = said(rank)
        assert f"stop the job yourself (kill -INT {launcher})" in text, text
        assert f"kill -INT {rank}" not in text, text
    # A plain holder gets the signal the drain would have sent it.
    assert f"stop it yourself (kill -INT {parent}), then suspend again" in said(parent)
    # One an earlier attempt signalled, still saving: a second SIGINT would lose its save.
    text = said(parent, JobStop(earlier={holder_id(found[parent]): 7}))
    assert "attempt 7 sent it SIGINT, and none is sent again" in text and "kill -INT" not in text
    # A rank an earlier round's forward reached: none again, neither to it nor its launcher.
    key = holder_id(found[ranks[0]])
    text = said(ranks[0], JobStop(quiet={key: f"after the SIGINT torchrun (pid {launcher}) "
                                              "forwarded"}, reached=[key]))
    assert "had its SIGINT earlier in this run" in text and "kill -INT" not in text, text
    assert holders.signals() == []
