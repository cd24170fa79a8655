"""Issue 15 items 2, 3, 4: races around who holds the node, and who may signal it."""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.holders import Holders
from helpers.isolation import needs_root
from helpers.wait import wait_for

from suspendguard.guard.pipeline import run
from suspendguard.store import lock as guard_lock
from suspendguard.system.log import Logger

from .helpers import cli

HERE = Path(__file__).resolve().parent


def scene(script: str, *args: str) -> dict[str, object]:
    """Run a scene as PID 1 of a PID namespace (and /proc) of its own; its JSON line."""
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child",
         sys.executable, str(HERE / script), *args],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


# -- item 3: a recycled PID never gets the signal ------------------------------

@needs_root
def test_a_pid_taken_over_mid_scan_is_not_signalled(node: str, tmp_path: Path) -> None:
    result = scene("scene_pid_reuse.py", node, str(tmp_path / "marks"))
    assert result["marks"] == [], result
    assert result["holders"] == [], result  # the holder was gone; the innocent holds nothing
    assert result["verdict"] == "allow"


# -- item 2: holders whose fds only a thread's own table shows -----------------

@pytest.fixture(scope="module")
def threads_bin(tmp_path_factory: pytest.TempPathFactory) -> str:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed (tools/test installs it)")
    out = tmp_path_factory.mktemp("bin") / "threads"
    subprocess.run(["gcc", "-O1", "-pthread", "-o", str(out), str(HERE / "threads.c")],
                   check=True)
    return str(out)


@pytest.mark.parametrize("how", ["leader-exit", "unshare-files"])
def test_a_node_held_by_a_thread_only_is_found_and_drained(
        how: str, threads_bin: str, node: str, make_config: Any) -> None:
    job = subprocess.Popen([threads_bin, node, how], stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout is not None
        assert job.stdout.readline().split() == ["ready", str(job.pid)]
        report = run(make_config(), dry_run=False, action="suspend", origin="test",
                     idle_check=None, log=Logger(io.StringIO(), {}), record=False)
        found = {h.decision.holder.pid: h.outcome.kind for h in report.holders}
        assert found == {job.pid: "exited"}, report.verdict
        assert report.verdict.kind == "allow"
        assert job.wait(timeout=5) == 0
    finally:
        job.kill()
        job.wait()


# -- item 4: one guard at a time -----------------------------------------------

def _conf(tmp_path: Path, node: str, state: Path, **drain: float) -> Path:
    path = tmp_path / f"guard-{len(list(tmp_path.glob('guard-*.toml')))}.toml"
    keys = "".join(f"{k} = {v}\n" for k, v in drain.items())
    path.write_text(f'[devices]\nfamilies = []\nnodes = ["{node}"]\n[state]\ndir = "{state}"\n'
                    f'[idle]\nbackends = []\n[drain]\n{keys}')
    return path


def test_a_second_guard_signals_nobody_while_the_first_drains(
        tmp_path: Path, node: str, holders: Holders) -> None:
    state = tmp_path / "state"
    _slow, spid = holders.start(node, mode="slow")
    first = subprocess.Popen(
        [sys.executable, "-m", "suspendguard", "--config",
         str(_conf(tmp_path, node, state, timeout_s=20)), "drain", "--yes", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: holders.signals() == [f"{spid} SIGINT"], 10.0, interval=0.02,
                 message=holders.signals)
        second_conf = _conf(tmp_path, node, state, timeout_s=2, deadline_s=6)
        start = time.monotonic()
        status, out, err = cli("--config", str(second_conf), "drain", "--yes", "--json")
        waited = time.monotonic() - start
        assert out, err
        report = json.loads(out)
        assert status != 0 and report["verdict"] == "veto"
        assert any(f"another suspendguard run (pid {first.pid}) is draining" in r
                   and "signalled nobody" in r for r in report["reasons"]), report
        assert 1.5 <= waited < 5  # waited a third of its deadline, no more
        _, dry_out, _ = cli("--config", str(second_conf), "check", "--dry-run", "--json")
        assert any(f"pid {first.pid}" in w and "is draining now" in w
                   for w in json.loads(dry_out)["warnings"])
        time.sleep(0.2)
        assert holders.signals() == [f"{spid} SIGINT"]  # once, by the first run only
    finally:
        first.kill()
        first.wait()
    assert stat.S_IMODE((state / "guard.lock").stat().st_mode) == 0o600


def test_a_planted_lock_symlink_is_not_followed(tmp_path: Path, node: str,
                                                 holders: Holders) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    target = tmp_path / "precious"
    target.write_text("keep\n")
    target.chmod(0o644)
    (state / "guard.lock").symlink_to(target)
    graceful, pid = holders.start(node)
    status, out, _ = cli("--config", str(_conf(tmp_path, node, state)), "drain", "--yes", "--json")
    report = json.loads(out)
    # Like the history, a lock that cannot be had never costs the verdict.
    assert status == 0 and report["verdict"] == "allow", report
    assert any("no guard lock" in w and "symlink; not followed" in w for w in report["warnings"])
    assert target.read_text() == "keep\n" and stat.S_IMODE(target.stat().st_mode) == 0o644
    assert holders.signals() == [f"{pid} SIGINT"] and graceful.wait(timeout=5) == 0


def _drained_despite(tmp_path: Path, node: str, holders: Holders) -> dict[str, Any]:
    """``drain --yes`` of one graceful holder, with the state folder's fault in place: an
    allow, the holder drained, no traceback; the JSON report."""
    graceful, pid = holders.start(node)
    status, out, err = cli("--config", str(_conf(tmp_path, node, tmp_path / "state")), "drain",
                           "--yes", "--json")
    assert "Traceback" not in err
    report: dict[str, Any] = json.loads(out)
    assert status == 0 and report["verdict"] == "allow", report
    assert holders.signals() == [f"{pid} SIGINT"] and graceful.wait(timeout=5) == 0
    return report


def test_a_state_folder_that_cannot_be_locked_costs_no_verdict(
        tmp_path: Path, node: str, holders: Holders, monkeypatch: pytest.MonkeyPatch) -> None:
    """flock's ENOLCK (an NFS mount with no lock manager, which this host lacks) is a
    warning, as an unusable lock file is: not a traceback in the suspend's way."""
    import errno
    import fcntl

    def no_locks(fd: int, op: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    state = tmp_path / "state"
    monkeypatch.setattr(fcntl, "flock", no_locks)
    report = _drained_despite(tmp_path, node, holders)
    assert any("no guard lock" in w and "cannot lock it" in w for w in report["warnings"])
    assert any("cannot lock" in w and "history" in w for w in report["warnings"]), report
    # A dry run cannot tell who drains then: it says nothing of it, and keeps its token.
    looking = guard_lock.peek(str(state))
    assert looking.fd >= 0 and not looking.busy
    looking.release()


def test_a_lock_whose_pid_cannot_be_written_still_locks_and_costs_no_verdict(
        tmp_path: Path, node: str, holders: Holders, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full or failing state disk (ENOSPC, EDQUOT, EIO) after the flock was had: the lock
    holds, a warning says its holder is not named, and the drain and restore go on."""
    import errno

    def full(fd: int, data: bytes, offset: int) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    state = tmp_path / "state"
    monkeypatch.setattr(os, "pwrite", full)
    report = _drained_despite(tmp_path, node, holders)
    assert any("this run's pid not written (No space left on device)" in w
               for w in report["warnings"]), report["warnings"]
    held = guard_lock.take(str(state), 0.0)
    try:
        assert held.fd >= 0 and held.unnamed and not held.refused
        assert guard_lock.take(str(state), 0.0).refused  # another run is kept out
    finally:
        held.release()
    status, _, err = cli("--config", str(_conf(tmp_path, node, state)), "restore")
    assert "Traceback" not in err and "pid not written" in err
    assert status == 0, err


def test_a_dry_runs_open_lock_file_never_keeps_a_drain_out(tmp_path: Path) -> None:
    """A peek keeps guard.lock open (its probes' token) but holds no lock on it."""
    state = str(tmp_path / "state")
    assert guard_lock.peek(state).fd == -1  # no lock file yet: nothing to keep open
    first = guard_lock.take(state, 0.0)
    first.release()
    looking = guard_lock.peek(state)
    try:
        assert looking.fd >= 0
        drain = guard_lock.take(state, 0.0)  # not refused: the peek holds no lock
        try:
            assert drain.fd >= 0 and not drain.refused
            # Both name the same file, as another run sees it through /proc/PID/fd.
            assert looking.token() == drain.token() == (
                os.path.realpath(os.path.join(state, guard_lock.LOCK_NAME)),
                (os.stat(os.path.join(state, guard_lock.LOCK_NAME)).st_dev,
                 os.stat(os.path.join(state, guard_lock.LOCK_NAME)).st_ino))
            busy = guard_lock.peek(state)
            assert busy.busy_pid == os.getpid() and busy.fd >= 0
            busy.release()
        finally:
            drain.release()
    finally:
        looking.release()
    assert looking.token() is None


# -- a process left alone for its nodes that takes a compute node meanwhile -----

@pytest.mark.parametrize("rounds", [2, 1])
def test_a_holder_that_takes_a_compute_node_during_the_drain_is_decided_again(
        rounds: int, tmp_path: Path, node: str, make_config: Any) -> None:
    """Held only a management node when the guard looked (left alone), then opened the
    compute node while the first job left: drained in the next round, or a veto naming
    it once there is none; never an allow while it holds the node."""
    management = tmp_path / "manager0"
    management.write_bytes(b"\0" * 16)
    marker = str(tmp_path / "marks")
    script = str(HERE / "late_holder.py")
    jobs = []
    try:
        for argv in (["first", node, marker], ["late", str(management), node, marker]):
            jobs.append(subprocess.Popen([sys.executable, script, *argv], stdout=subprocess.PIPE,
                                         text=True, start_new_session=True))
            assert jobs[-1].stdout is not None
            assert jobs[-1].stdout.readline().split() == ["ready", str(jobs[-1].pid)]
        first, late = jobs
        report = run(make_config(devices={"management": [str(management)]},
                                 drain={"rounds": rounds}),
                     dry_run=False, action="suspend", origin="test", idle_check=None,
                     log=Logger(io.StringIO(), {}), record=False)
        assert first.wait(timeout=5) == 0
        outcomes = {h.decision.holder.pid: (h.decision.kind, h.outcome.kind, h.round)
                    for h in report.holders}
        marks = Path(marker).read_text().split("\n")
        if rounds == 2:
            assert report.verdict.kind == "allow", report.verdict
            assert outcomes[late.pid] == ("drain", "exited", 2)
            assert f"{late.pid} late SIGINT" in marks
            assert late.wait(timeout=5) == 0
        else:
            assert report.verdict.kind == "veto"
            [reason] = report.verdict.texts
            assert reason.startswith(f"pid {late.pid} python took a compute node after 1 drain "
                                     "round(s), having held none when the guard looked"), reason
            assert outcomes[late.pid] == ("drain", "not-signalled", 2)
            assert late.poll() is None and f"{late.pid} late SIGINT" not in marks
    finally:
        for job in jobs:
            job.kill()
            job.wait()
