"""A run's stop order numbers: never one given twice in a run, so each stop's row gets its own
result after a supervisor refused a keep-down and its job was kept down in a later round.

The rounds' own keep-down (``rounds.keep_down``) and the run's ledger write into a real
history; only the supervisors' answers are made up: no systemd runs here whose manager
refuses a stop once and takes the next.
"""

from __future__ import annotations

import io
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from suspendguard.guard.ledger import Ledger
from suspendguard.guard.rounds import keep_down
from suspendguard.guard.run_state import RunOptions, RunState
from suspendguard.model import HeldNode, Holder, Node, Owner
from suspendguard.store.history import History
from suspendguard.supervise.managers import ManagersAndEngines
from suspendguard.system.deadline import Deadline
from suspendguard.system.log import Logger
from suspendguard.system.procfs import ProcFS

COMPUTE = Node("/dev/davinci0", "ascend", "compute", ("char", 1))
A = Owner("systemd-service", "a.service", restart="always", activity="active")
B = Owner("systemd-service", "b.service", restart="always", activity="active")


def holder(pid: int) -> Holder:
    return Holder(pid=pid, start_time=pid, ppid=1, uid=0, user="root", comm="python3",
                  exe="/usr/bin/python3", cmdline=("python3", "train.py"), unit=None,
                  container=None, nspid=(pid,), nodes=(HeldNode(COMPUTE, COMPUTE.path, "fd"),),
                  sigint="caught")


class BusyOnce(ManagersAndEngines):
    """a.service's manager refuses the first keep-down (busy), and takes every later one."""

    def __init__(self, owners: dict[int, Owner], state_dir: str) -> None:
        super().__init__(environ={}, state_dir=state_dir, dropin_root=state_dir)
        self.by_pid = owners
        self.refused: set[str] = set()

    def owner(self, holder: Holder) -> Owner:
        return self.by_pid[holder.pid]

    def stop(self, owners: Sequence[Owner], signame: str,
             timeout_s: float = 10.0) -> dict[str, str]:
        answers = {}
        for o in owners:
            first = o is A and o.key not in self.refused
            self.refused |= {o.key} if first else set()
            answers[o.key] = "the manager was busy" if first else ""
        return answers


def test_a_job_kept_down_after_a_refused_stop_gets_its_own_row(
        make_config: Any, tmp_path: Path) -> None:
    """Round 1 plans a.service and b.service, a.service's manager refuses; a.service's job
    comes back and round 2 keeps it down: its number is not b.service's, and each stop's
    result goes into its own row."""
    config = make_config()
    state = str(tmp_path / "state")
    control = BusyOnce({11: A, 12: B, 13: A}, state)
    options = RunOptions(dry_run=False, action="suspend", origin="test", proc=ProcFS(),
                         idle_check=None, log=Logger(io.StringIO(), {}), record=True,
                         supervisors=control, confirmed=None)
    with History.open(state) as h:
        attempt = h.begin("suspend", "test", False, "digest")
        r = RunState(config.policy, config.drain, options, transient="veto", state_dir=state,
                     never=frozenset(), deadline=Deadline(time.monotonic() + 30),
                     ledger=Ledger(h, attempt, h))
        said = keep_down(r, [holder(11), holder(12)])
        assert any("a.service: could not keep it" in w for w in said.warnings), said
        assert [s.owner.key for s in r.stops] == [B.key]
        keep_down(r, [holder(13)])  # a.service's job, started again by its manager
        assert [s.owner.key for s in r.stops] == [B.key, A.key]
        for s in r.stops:
            r.ledger.restored(s, "started", f"{s.owner.name} started")
        rows = h.conn.execute("SELECT id, owner, seq, result, why FROM stops"
                              " WHERE attempt_id = ? ORDER BY id", (attempt,)).fetchall()
        ids = {s.owner.key: r.ledger.row(s) for s in r.stops}
    assert [(owner, result, why) for _, owner, _, result, why in rows] == [
        (B.key, "started", "b.service started"), (A.key, "started", "a.service started")], rows
    assert ids == {owner: row for row, owner, *_ in rows}  # the attempt's own stops name them
    assert len({seq for _, _, seq, *_ in rows}) == 2, rows
