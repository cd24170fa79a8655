"""A launcher stopped for a drain is always continued: by the run, by its watchdog, or by the next run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.frameworks import state
from helpers.runners import cli
from helpers.wait import wait_for

from suspendguard.guard.held import HELD_FILE, Held, continue_left
from suspendguard.guard.jobs import Launcher
from suspendguard.guard.launchers import BUILTIN
from suspendguard.system.procfs import ProcFS


@pytest.fixture
def sleeper() -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def as_launcher(pid: int) -> Launcher:
    st = ProcFS().stat(pid)
    assert st is not None
    return Launcher(pid, st.start_time, 0, st.comm, "", BUILTIN["mpirun"], "default")


def wait_state(pid: int, want: set[str], timeout: float = 5.0) -> str:
    wait_for(lambda: state(pid) in want, timeout, interval=0.01)
    return state(pid)


def test_hold_stops_and_release_continues(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    held = Held(str(tmp_path))
    assert held.hold([as_launcher(sleeper.pid)])
    assert wait_state(sleeper.pid, {"T"}) == "T"
    entries = json.loads((tmp_path / HELD_FILE).read_text())
    assert [e["pid"] for e in entries] == [sleeper.pid]
    held.release()
    assert wait_state(sleeper.pid, {"S", "R"}) in ("S", "R")
    assert not (tmp_path / HELD_FILE).exists()



def test_a_launcher_its_user_stopped_since_the_plan_is_neither_held_nor_continued(
        tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    """Ctrl-Z'd between the plan (which read it running) and the hold: left as its user left
    it, never continued by the release."""
    launcher = as_launcher(sleeper.pid)
    sleeper.send_signal(signal.SIGSTOP)
    assert wait_state(sleeper.pid, {"T"}) == "T"
    held = Held(str(tmp_path))
    assert held.hold([launcher]) == []
    assert held.warnings == [f"{launcher.label} was stopped already (state T): left stopped, "
                             "not continued"]
    held.release()
    time.sleep(0.1)
    assert state(sleeper.pid) == "T"
    assert not (tmp_path / HELD_FILE).exists()


def test_a_reused_pid_is_never_stopped(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    other = as_launcher(sleeper.pid)
    stale = Launcher(other.pid, other.start_time + 1, 0, other.comm, "", other.kind, "default")
    held = Held(str(tmp_path))
    assert held.hold([stale]) == []
    assert held.warnings and "not stopped" in held.warnings[0]
    time.sleep(0.1)
    assert state(sleeper.pid) != "T"


def test_the_watchdog_continues_when_the_guard_is_gone(tmp_path: Path,
                                                       sleeper: subprocess.Popen[bytes]) -> None:
    # A guard that stops a process and dies at once (SIGKILL: no finally runs).
    st = ProcFS().stat(sleeper.pid)
    assert st is not None
    code = (f"import os, sys; sys.path[:0] = {sys.path!r}\n"
            "from suspendguard.guard.held import Held\n"
            "from suspendguard.guard.jobs import Launcher\n"
            "from suspendguard.guard.launchers import BUILTIN\n"
            f"h = Held({str(tmp_path)!r})\n"
            f"assert h.hold([Launcher({sleeper.pid}, {st.start_time}, 0, 'x', '', "
            "BUILTIN['mpirun'], 'default')])\n"
            "os.kill(os.getpid(), 9)\n")
    subprocess.run([sys.executable, "-c", code], check=False)
    assert wait_state(sleeper.pid, {"S", "R"}) in ("S", "R")


def test_the_next_run_continues_what_a_killed_run_left(tmp_path: Path, node: str,
                                                       sleeper: subprocess.Popen[bytes]) -> None:
    # Guard and watchdog both gone (a unit's cgroup killed whole): only the note is left.
    launcher = as_launcher(sleeper.pid)
    sleeper.send_signal(19)  # SIGSTOP, as the killed run had
    assert wait_state(sleeper.pid, {"T"}) == "T"
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)
    (state_dir / HELD_FILE).write_text(json.dumps(
        [{"pid": launcher.pid, "start_time": launcher.start_time, "name": "mpirun"}]))
    conf = tmp_path / "config.toml"
    conf.write_text(f'[devices]\nfamilies = []\nnodes = ["{node}"]\n[state]\ndir = "{state_dir}"\n'
                    '[idle]\nbackends = []\n')
    code, _out, err = cli("--config", str(conf), "restore")
    assert code == 0, err
    assert f"continued mpirun (pid {sleeper.pid})" in err
    assert wait_state(sleeper.pid, {"S", "R"}) in ("S", "R")
    assert not (state_dir / HELD_FILE).exists()


def test_a_note_about_another_process_continues_nothing(tmp_path: Path,
                                                        sleeper: subprocess.Popen[bytes]) -> None:
    launcher = as_launcher(sleeper.pid)
    sleeper.send_signal(19)
    (tmp_path / HELD_FILE).write_text(json.dumps(
        [{"pid": launcher.pid, "start_time": launcher.start_time + 7, "name": "mpirun"}]))
    assert continue_left(str(tmp_path)) == []
    time.sleep(0.1)
    assert state(sleeper.pid) == "T"  # not the process the note is about: left as it is
    sleeper.send_signal(18)


def test_a_note_that_names_no_launcher_is_said_and_the_rest_still_continued(
        tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    launcher = as_launcher(sleeper.pid)
    sleeper.send_signal(19)
    wait_state(sleeper.pid, {"T"})
    (tmp_path / HELD_FILE).write_text(json.dumps([
        {"pid": 99999999999999999999, "start_time": 1},  # out of any pid's range
        {"pid": 5},  # no start time
        "mpirun",
        {"pid": launcher.pid, "start_time": launcher.start_time, "name": "mpirun"},
    ]))
    said = continue_left(str(tmp_path))
    assert [line.split(" (", 1)[0] for line in said] == (
        [f"{tmp_path / HELD_FILE}: an entry that names no launcher"] * 3 + ["continued mpirun"])
    assert all("kill -CONT PID" in line for line in said[:3]), said
    assert wait_state(sleeper.pid, {"S", "R"}) in ("S", "R")
    assert not (tmp_path / HELD_FILE).exists()


def test_a_note_that_is_no_list_is_said(tmp_path: Path) -> None:
    (tmp_path / HELD_FILE).write_text('{"pid": 5}')
    [said] = continue_left(str(tmp_path))
    assert said.startswith(f"{tmp_path / HELD_FILE}: an entry that names no launcher"), said


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")
def test_a_launcher_that_could_not_be_continued_is_said_and_kept_for_the_next_run(
        tmp_path: Path) -> None:
    # Another user's launcher, and a run without CAP_KILL: the kernel refuses the SIGCONT.
    theirs = subprocess.Popen(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                               "sleep", "60"], start_new_session=True)
    try:
        wait_for(lambda: (st := ProcFS().stat(theirs.pid)) is not None and st.comm == "sleep", 10)
        launcher = as_launcher(theirs.pid)
        theirs.send_signal(19)
        wait_state(theirs.pid, {"T"})
        note = [{"pid": launcher.pid, "start_time": launcher.start_time, "name": "mpirun"}]
        (tmp_path / HELD_FILE).write_text(json.dumps(note))
        code = ("import json, sys; from suspendguard.guard.held import continue_left; "
                "print(json.dumps(continue_left(sys.argv[1])))")
        run = subprocess.run(["setpriv", "--bounding-set=-kill", "--inh-caps=-kill",
                              sys.executable, "-c", code, str(tmp_path)],
                             capture_output=True, text=True, timeout=60)
        assert json.loads(run.stdout) == [
            f"could not continue mpirun (pid {theirs.pid}), which an earlier guard run stopped: "
            f"Operation not permitted; continue it yourself (kill -CONT {theirs.pid})"], run.stderr
        assert state(theirs.pid) == "T"
        assert json.loads((tmp_path / HELD_FILE).read_text()) == note  # kept
        # The next run that may (the resume unit has CAP_KILL) continues it.
        assert continue_left(str(tmp_path))[0].startswith(f"continued mpirun (pid {theirs.pid})")
        assert wait_state(theirs.pid, {"S", "R"}) in ("S", "R")
        assert not (tmp_path / HELD_FILE).exists()
    finally:
        theirs.kill()
        theirs.wait()
