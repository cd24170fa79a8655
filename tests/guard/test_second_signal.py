"""One SIGINT per process across attempts: the next attempt never signals a job still saving.

A job whose save outlasts ``[drain] timeout_s`` makes the attempt veto while it saves on. The
next attempt (logind asking again, the user pressing suspend again) finds it still holding
the device: a second SIGINT would raise inside its save and lose the checkpoint.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from helpers.records import ended
from helpers.runners import guard
from test_policy import holder

from suspendguard.errors import HistoryError
from suspendguard.guard.ledger import Earlier
from suspendguard.model import Decision, Holder, Outcome
from suspendguard.record import HolderRecord
from suspendguard.store.history import History
from suspendguard.system.boot import ticks_now
from suspendguard.system.procfs import ProcFS

# Counts every SIGINT it gets; the first starts a 3 s save, which a second one interrupts
# (Python's own KeyboardInterrupt inside it): the checkpoint is then never written.
SAVER = r'''
import os, signal, sys, time
node, out = sys.argv[1], sys.argv[2]
held = open(node, "rb")
def on_sigint(signum, frame):
    fd = os.open(os.path.join(out, "signals.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.write(fd, b"SIGINT\n")
    os.close(fd)
    raise KeyboardInterrupt
signal.signal(signal.SIGINT, on_sigint)
print("ready", flush=True)
try:
    while True:
        time.sleep(3600)
except KeyboardInterrupt:
    pass
part = os.path.join(out, "checkpoint.part")
with open(part, "w") as f:
    for step in range(30):
        f.write(f"step {step}\n")
        f.flush()
        time.sleep(0.1)
os.rename(part, os.path.join(out, "checkpoint"))
'''


@contextlib.contextmanager
def saving_job(node: str, out: Path, script: str = SAVER) -> Iterator[subprocess.Popen[str]]:
    """SAVER (or ``script``) started and ready; at the end, its own result: it exited 0 after
    one SIGINT, its checkpoint whole."""
    job = subprocess.Popen([sys.executable, "-c", script, node, str(out)],
                           stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert job.stdout is not None and job.stdout.readline() == "ready\n"
        yield job
        assert job.wait(timeout=20) == 0
    finally:
        job.kill()
        job.wait()
    assert (out / "signals.log").read_text() == "SIGINT\n"
    assert (out / "checkpoint").read_text().splitlines()[-1] == "step 29"


def test_a_job_still_saving_after_one_attempt_gets_no_second_sigint_from_the_next(
        make_config: Any, node: str, tmp_path: Path) -> None:
    # A 7.5 s save: past two guard runs and a dry run, each with its 1 s wait, on a loaded machine.
    with saving_job(node, tmp_path, SAVER.replace("time.sleep(0.1)", "time.sleep(0.25)")) as job:
        config = make_config(drain={"timeout_s": 1})
        first = guard(config)
        assert [r.code for r in first.verdict.reasons] == ["timeout-after-sigint"]
        # the look of the dry run says it before anything is asked
        look = guard(config, dry_run=True)
        [seen] = [h for h in look.holders if h.holder.pid == job.pid]
        assert any(f"attempt {first.attempt.id} (begun " in n and "sent SIGINT already" in n
                   for n in seen.decision.notes), seen.decision.notes
        assert seen.outcome.why.startswith(
            f"not signalled again: attempt {first.attempt.id} sent it SIGINT"), seen.outcome
        second = guard(config)
        [reason] = second.verdict.reasons
        assert reason.code == "timeout-after-sigint"
        assert f"attempt {first.attempt.id} sent it SIGINT, and none is sent again" in reason.text



def test_a_job_that_sets_sigint_aside_for_its_save_is_waited_for_not_vetoed_as_deaf(
        make_config: Any, node: str, tmp_path: Path) -> None:
    """Its handler ignores SIGINT while it saves ("so that a second Ctrl-C cannot cut it"): the
    next attempt reads it as ignoring SIGINT, which an earlier attempt's signal explains."""
    aside = SAVER.replace("    raise KeyboardInterrupt",
                          "    signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                          "    raise KeyboardInterrupt")
    with saving_job(node, tmp_path, aside):
        first = guard(make_config(drain={"timeout_s": 1}))
        assert [r.code for r in first.verdict.reasons] == ["timeout-after-sigint"]
        second = guard(make_config(drain={"timeout_s": 10}))
        assert second.verdict.kind == "allow", second.verdict
        [row] = second.holders
        assert row.outcome.kind == "exited", row.outcome
        assert any(f"attempt {first.attempt.id} (begun " in n for n in row.decision.notes)



def test_the_worker_of_a_job_that_sets_sigint_aside_leaves_with_it(
        make_config: Any, node: str, tmp_path: Path) -> None:
    """Its worker (forked, the node inherited) ignores SIGINT as a DataLoader worker does: it
    leaves with its parent, which the next attempt waits for; neither vetoes as deaf."""
    family = SAVER.replace('print("ready", flush=True)', (
        "worker = os.fork()\n"
        "if worker == 0:\n"
        "    signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "    time.sleep(3600)\n"
        "    os._exit(0)\n"
        'print("ready", flush=True)')).replace(
        "    raise KeyboardInterrupt",
        "    signal.signal(signal.SIGINT, signal.SIG_IGN)\n    raise KeyboardInterrupt").replace(
        'os.rename(part, os.path.join(out, "checkpoint"))',
        'os.rename(part, os.path.join(out, "checkpoint"))\n'
        "os.kill(worker, signal.SIGKILL)\nos.waitpid(worker, 0)")
    with saving_job(node, tmp_path, family):
        first = guard(make_config(drain={"timeout_s": 1}))  # the job and its worker
        assert {r.code for r in first.verdict.reasons} == {"timeout-after-sigint"}
        second = guard(make_config(drain={"timeout_s": 10}))
        assert second.verdict.kind == "allow", second.verdict
        assert sorted(r.outcome.kind for r in second.holders) == ["exited", "exited"]


def test_a_run_that_cannot_write_its_history_still_reads_whom_an_earlier_attempt_signalled(
        make_config: Any, node: str, tmp_path: Path) -> None:
    """A full disk refuses the attempt's row: the run reads the history all the same, and the
    job still saving gets no second SIGINT."""
    def full_disk(state_dir: str, readonly: bool = False, **kw: Any) -> History:
        if not readonly:
            raise HistoryError(f"cannot write {state_dir}/history.db: database or disk is full")
        return History.open(state_dir, True, **kw)

    with saving_job(node, tmp_path):
        first = guard(make_config(drain={"timeout_s": 1}))
        assert [r.code for r in first.verdict.reasons] == ["timeout-after-sigint"]
        second = guard(make_config(drain={"timeout_s": 10}), history=full_disk)
        assert second.verdict.kind == "allow", second.verdict
        assert any(w.startswith("history not recorded") for w in second.verdict.warnings)
        [row] = second.holders
        assert any(f"attempt {first.attempt.id} (begun " in n for n in row.decision.notes)


def test_a_guard_killed_in_its_wait_leaves_the_signal_written_down_and_no_second_one_follows(
        conf: Path, make_config: Any, node: str, tmp_path: Path) -> None:
    """TimeoutStartSec, an OOM kill or an operator's SIGKILL ends the guard after its SIGINT:
    the next attempt waits for the job's save instead of cutting it short."""
    with saving_job(node, tmp_path), subprocess.Popen(
            [sys.executable, "-m", "suspendguard", "--config", str(conf), "drain", "--yes"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as killed:
        assert killed.stderr is not None
        for line in killed.stderr:  # the guard says it, the wait about to begin
            if "sent SIGINT to 1 holder(s)" in line:
                break
        else:
            raise AssertionError(f"the guard ended without the signal: {killed.wait()}")
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        second = guard(make_config(drain={"timeout_s": 10}))
        assert second.verdict.kind == "allow", second.verdict
        [row] = second.holders
        assert row.outcome.kind == "exited" and not row.outcome.signalled, row.outcome
        assert any("sent SIGINT already" in n for n in row.decision.notes), row.decision.notes


def _timed_out(h: Holder, signalled: bool) -> HolderRecord:
    return HolderRecord(Decision(h, "drain", "holds a compute node", "SIGINT", 30.0),
                        Outcome("timeout", 30.0, "still running", signalled))


def test_only_a_holder_the_signal_reached_in_this_boot_counts_as_signalled(
        tmp_path: Path) -> None:
    """A worker, or a Jupyter kernel whose shutdown_request waited on its cells, ran out the
    wait without a signal: it is sent one next time. So is a holder of an earlier boot."""
    rank, worker = replace(holder(pid=11), start_time=5), replace(holder(pid=12), start_time=6)
    with History.open(str(tmp_path)) as h:
        attempt = h.begin("suspend", "unit", False, "digest")
        h.finish(ended(attempt, "veto", ["pid 11 python3 still running"],
                       holders=[_timed_out(rank, True), _timed_out(worker, False)]))
        kept = h.attempt(attempt)
        assert kept is not None
        me = ProcFS().stat(os.getpid())  # the guard that began it: this process
        assert me is not None
        assert h.signalled_since([rank, worker], but=attempt + 1) == {
            (11, 5): (attempt, kept.started, me.start_time)}
        assert h.signalled_since([rank, worker], but=attempt) == {}  # the run's own attempt
    with contextlib.closing(sqlite3.connect(tmp_path / "history.db")) as db, db:
        db.execute("UPDATE attempts SET boot_id = '1700000000.42 "
                   "d0b3f8a4-0000-4000-8000-000000000000'")
    with History.open(str(tmp_path)) as h:
        assert h.signalled_since([rank, worker], but=attempt + 1) == {}


def test_an_earlier_attempt_begins_no_sooner_than_its_guard_after_the_clock_is_set_on() -> None:
    """The wall clock set forward an hour since (time synced after boot, an RTC read at
    resume): read through it alone, the attempt began an hour before its guard even started,
    and every rank the launcher's forward reached would look started since, and get a second
    SIGINT."""
    guard_start = ticks_now(2.0)  # its guard started 2 s ago
    began = time.time() - 1.5 - 3600  # it began 1.5 s ago, a step of an hour ago
    stepped = Earlier(7, began, guard_start)
    assert stepped.ticks() == guard_start
    # unstepped, the wall clock says it, after its guard's start
    assert guard_start < Earlier(7, time.time() - 1.5, guard_start).ticks() <= ticks_now()
    assert Earlier(7, began).ticks() < guard_start  # what the wall clock alone said


def test_a_killed_attempts_rows_say_whom_the_signal_reached(tmp_path: Path) -> None:
    """Written ahead, one reached and one not (a worker, a rank whose launcher forwards): read
    back from the history of an attempt whose guard was killed, they say which is which."""
    rank, worker = replace(holder(pid=11), start_time=5), replace(holder(pid=12), start_time=6)
    ahead = Outcome("signalled", why="not yet sent SIGINT when this was written; the guard "
                                     "ended before it recorded the outcome")
    with History.open(str(tmp_path)) as h:
        attempt = h.begin("suspend", "unit", False, "digest")
        h.signalling(attempt, [
            HolderRecord(Decision(x, "drain", "holds a compute node", "SIGINT", 30.0), ahead)
            for x in (rank, worker)])
        h.reached(attempt, [rank])
        kept = h.attempt(attempt)
        assert kept is not None
    by_pid = {r.holder.pid: r.outcome for r in kept.holders}
    assert (by_pid[11].signalled, by_pid[12].signalled) == (True, False)
    assert by_pid[11].why.startswith("the signal reached it")
    assert by_pid[12].why.startswith("not yet sent SIGINT")
