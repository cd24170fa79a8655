"""Issue 15 item 9: every attempt is recorded as it went, holders included, full disk or SIGKILL."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from helpers.holders import Holders
from helpers.isolation import needs_root

from suspendguard.store.history import History

from .helpers import guard_mid_drain

HERE = Path(__file__).resolve().parent


@needs_root
def test_an_allowed_attempt_is_recorded_when_the_drain_fills_the_disk(
        node: str, tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable,
                           str(HERE / "scene_disk_full.py"), node, str(state)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["verdict"] == "allow", result
    assert result["reserve_left"] is False  # the disk was full: the verdict used the room kept
    recorded = result["recorded"]
    assert recorded["verdict"] == "allow", recorded
    assert [(h["pid"], h["outcome"]["kind"]) for h in recorded["holders"]] == [(result["job"], "exited")]


def test_a_guard_killed_mid_drain_leaves_whom_it_signalled(
        tmp_path: Path, node: str, holders: Holders) -> None:
    guard, pid, state = guard_mid_drain(tmp_path, node, holders)
    try:
        assert holders.signals() == [f"{pid} SIGINT"]
        assert guard.stderr is not None
        for line in guard.stderr:  # said once the signal is written down, the wait to begin
            if "sent SIGINT to 1 holder(s)" in line:
                break
    finally:
        guard.send_signal(signal.SIGKILL)
        guard.wait()
    with History.open(str(state)) as h:
        [attempt] = h.attempts()
    assert attempt.result == "interrupted"
    [row] = attempt.holders
    assert (row.holder.pid, row.outcome.kind, row.outcome.signalled) == (pid, "signalled", True)
    assert row.outcome.why == ("the signal reached it (the guard's, or its launcher's forward); "
                               "the guard ended before it recorded the outcome")


def full_at_start(node: str, tmp_path: Path, kept: bool) -> dict[str, Any]:
    state = tmp_path / "state"
    state.mkdir()
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable,
                           str(HERE / "scene_full_at_start.py"), node, str(state),
                           str(tmp_path / "marks"), "kept" if kept else "none"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


@needs_root
def test_an_attempt_begun_on_a_full_disk_writes_down_whom_it_signalled(
        node: str, tmp_path: Path) -> None:
    """The room kept takes the attempt's first row and its signal: the next attempt, which
    cannot write at all, reads them and sends the job still saving no second SIGINT."""
    result = full_at_start(node, tmp_path, kept=True)
    assert result["signals"] == ["SIGINT"], result
    assert any(f"attempt {result['attempt']} (begun " in n for n in result["notes"]), result
    assert not any("gets the signal again" in w for w in result["first"]), result


@needs_root
def test_an_attempt_that_cannot_begin_says_its_signal_comes_again(
        node: str, tmp_path: Path) -> None:
    """No room kept left: nothing of the attempt is written, and its warning says that the
    job it signalled, still saving, gets the signal again from the next attempt (it does)."""
    result = full_at_start(node, tmp_path, kept=False)
    assert any(w.startswith("history: whom this run signals is not recorded (cannot open ")
               and w.endswith("gets the signal again from the next attempt")
               for w in result["first"]), result["first"]
    assert result["signals"] == ["SIGINT", "SIGINT"], result
