"""A real Open MPI job (Debian's openmpi-bin, python3-mpi4py) drained as its launcher needs.

mpirun turns SIGINT into SIGTERM for its ranks, so it never gets the
signal: each rank gets SIGINT from the guard, and mpirun is left running
(stopped, it would hold its ranks in MPI_Finalize). The job's own record
says what it got (helpers/mpi_job.py): one SIGINT per rank, no SIGTERM,
both checkpoints complete. A guard killed in the middle leaves mpirun
running, never stopped.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from helpers.frameworks import Job, mpirun, state, wait_gone
from helpers.runners import cli
from helpers.wait import wait_for

from suspendguard.guard.held import HELD_FILE


def saved(job: Job) -> list[str]:
    return sorted(p.name for p in job.out.glob("rank-*.ckpt"))


def drained_once(job: Job, job_config: Path, ranks: list[int]) -> None:
    """``drain --yes``: allowed, one SIGINT for each rank and no SIGTERM, both checkpoints
    whole."""
    _code, out, err = cli("--config", str(job_config), "drain", "--yes", "--json")
    report = json.loads(out)
    assert report["verdict"] == "allow", (report, err)
    signals = job.signals()
    got = sorted(int(line.split()[1]) for line in signals if line.startswith("sigint"))
    assert got == sorted(ranks), signals
    assert not any(line.startswith("sigterm") for line in signals), signals
    assert saved(job) == ["rank-0.ckpt", "rank-1.ckpt"], signals


def test_ranks_save_and_mpirun_is_never_signalled(tmp_path: Path, node: str, job_config: Path,
                                                 jobs: list[Job]) -> None:
    job = mpirun(node, tmp_path / "job", save_s=2.0)
    jobs.append(job)
    ranks = job.wait_ready()
    _code, out, _err = cli("--config", str(job_config), "check", "--json")
    by_pid = {h["pid"]: h for h in json.loads(out)["holders"]}
    assert all("mpirun (pid" in by_pid[r]["outcome"]["why"] and "never signalled"
               in by_pid[r]["outcome"]["why"] for r in ranks), by_pid
    # Open MPI's own SIGSEGV, SIGBUS, SIGFPE and SIGABRT handlers print a stack trace: no note.
    assert not any("catches fatal signals" in n for r in ranks for n in by_pid[r]["notes"]), by_pid
    drained_once(job, job_config, ranks)
    assert wait_gone(job.pid, 10), state(job.pid)  # continued, it saw its ranks leave
    assert not (tmp_path / "state" / HELD_FILE).exists()


def test_a_guard_killed_mid_drain_leaves_mpirun_running(tmp_path: Path, node: str,
                                                        job_config: Path, jobs: list[Job]) -> None:
    job = mpirun(node, tmp_path / "job", save_s=3.0)
    jobs.append(job)
    job.wait_ready()
    ranks = job.wait_ready()
    guard = subprocess.Popen([sys.executable, "-m", "suspendguard", "--config", str(job_config),
                              "drain", "--yes"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        # Killed once both ranks have their SIGINT, in the middle of their saves.
        def both_signalled() -> bool:
            if len([s for s in job.signals() if s.startswith("sigint")]) >= 2:
                return True
            assert state(job.pid) not in ("T", "t"), "mpirun was stopped"
            return False

        wait_for(both_signalled, 30.0, interval=0.02)
        assert len(job.signals()) >= 2, job.signals()
        os.kill(guard.pid, signal.SIGKILL)
        guard.wait()
        assert state(job.pid) not in ("T", "t"), "mpirun was left stopped"
        assert not saved(job)  # the saves were still running when the guard died
    finally:
        if guard.poll() is None:
            guard.kill()
            guard.wait()
    # The ranks had their SIGINT before the guard died: they save and leave.
    assert wait_gone(job.pid, 15)
    assert saved(job) == ["rank-0.ckpt", "rank-1.ckpt"], job.signals()
    assert sorted(int(s.split()[1]) for s in job.signals() if s.startswith("sigint")) \
        == sorted(ranks)
    # The next run (here: restore) finds the note and has nothing left to continue.
    code, _out, err = cli("--config", str(job_config), "restore")
    assert code == 0, err
    assert not (tmp_path / "state" / HELD_FILE).exists()


def test_mpirun_holding_a_node_itself_is_never_signalled(tmp_path: Path, node: str,
                                                         job_config: Path,
                                                         jobs: list[Job]) -> None:
    """A job script that opened the device before it ran mpirun (exec 3<NODE; exec mpirun):
    mpirun is a holder too, and was signalled as one, turning SIGINT into SIGTERM for its
    ranks in their save. It is the launcher of ranks the guard signals: never signalled."""
    job = mpirun(node, tmp_path / "job", save_s=2.0, holding=True)
    jobs.append(job)
    ranks = job.wait_ready()
    _code, out, _err = cli("--config", str(job_config), "check", "--json")
    by_pid = {h["pid"]: h for h in json.loads(out)["holders"]}
    assert by_pid[job.pid]["outcome"]["why"].startswith("not signalled: the launcher of its "
                                                        "ranks"), by_pid[job.pid]
    drained_once(job, job_config, ranks)
    assert wait_gone(job.pid, 10), state(job.pid)


def test_a_rank_that_fails_on_its_sigint_makes_mpirun_end_the_other(
        tmp_path: Path, node: str, job_config: Path, jobs: list[Job]) -> None:
    """Open MPI's own behaviour, measured here: a rank that leaves with an error and no
    MPI_Finalize makes mpirun SIGTERM the others, in their save. The guard still sends one
    SIGINT per rank and none to mpirun; the SIGTERM is mpirun's (docs/ai-frameworks.md)."""
    job = mpirun(node, tmp_path / "job", save_s=3.0, fail_rank=1)
    jobs.append(job)
    ranks = job.wait_ready()
    _code, out, err = cli("--config", str(job_config), "drain", "--yes", "--json")
    assert json.loads(out)["verdict"] == "allow", err
    signals = job.signals()
    assert sorted(int(s.split()[1]) for s in signals if s.startswith("sigint")) == sorted(ranks)
    failed = next(int(s.split()[1]) for s in signals if s.startswith("failed"))
    [ended] = [int(s.split()[1]) for s in signals if s.startswith("sigterm")]
    assert {failed, ended} == set(ranks), signals
    assert saved(job) == [], signals  # rank 0's save was cut: rank-0.tmp is all there is
    assert wait_gone(job.pid, 10), state(job.pid)


def test_ranks_of_a_stopped_mpirun_veto_before_any_signal(
        tmp_path: Path, node: str, job_config: Path, jobs: list[Job]) -> None:
    """Ctrl-Z'd mpirun: signalled, its ranks would save and then wait for it in MPI_Finalize,
    the job ended for a suspend refused all the same. Nobody is signalled."""
    job = mpirun(node, tmp_path / "job", save_s=1.0)
    jobs.append(job)
    ranks = job.wait_ready()
    os.kill(job.pid, signal.SIGSTOP)
    try:
        assert wait_for(lambda: state(job.pid) == "T", 5)
        _code, out, err = cli("--config", str(job_config), "drain", "--yes", "--json")
        report = json.loads(out)
        assert report["verdict"] == "veto", (report, err)
        assert {d["code"] for d in report["reason_details"]} == {"stopped"}, report
        assert all(f"is a rank of mpirun (pid {job.pid}), which is stopped (state T)" in r
                   for r in report["reasons"]), report["reasons"]
        assert len(report["reasons"]) == len(ranks)
        assert job.signals() == []
    finally:
        os.kill(job.pid, signal.SIGCONT)
