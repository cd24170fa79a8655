"""One SIGINT per launcher, and a veto while a held launcher still runs.

Small stand-ins for the launchers' shapes, named as the built-in kinds are told
(``deepspeed`` and ``msrun``: held; ``torchrun``: forwards), each started here.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.runners import guard

from suspendguard.guard import held as held_module

# A rank: holds the node, says it is ready, leaves on SIGINT.
RANK = """
import os, signal, sys, time
node, out, tag = sys.argv[1:4]
held = open(node, "rb")
signal.signal(signal.SIGINT, lambda *a: sys.exit(0))
open(os.path.join(out, "ready-" + tag), "w").close()
time.sleep(3600)
"""
# DeepSpeed's shape: held; holds the node itself when its last argument is "1".
DEEPSPEED = """
import os, signal, subprocess, sys, time
node, rank, out, hold = sys.argv[1:5]
if hold == "1":
    held = open(node, "rb")
signal.signal(signal.SIGINT, lambda *a: sys.exit(0))
p = subprocess.Popen([sys.executable, rank, node, out, "ds"])
time.sleep(3600)
"""
# msrun's shape: held, holds no node, stays up once its rank left (an elastic one starts it
# again later).
MSRUN = """
import subprocess, sys, time
node, rank, out = sys.argv[1:4]
subprocess.Popen([sys.executable, rank, node, out, "ms"]).wait()
time.sleep(3600)
"""
# torchrun's shape: forwards SIGINT to its rank (logging each it gets), then opens the node
# while it shuts down.
TORCHRUN = """
import os, signal, subprocess, sys, time
node, rank, out = sys.argv[1:4]
got = []
def on(sig, frame):
    with open(os.path.join(out, "launcher.log"), "a") as f:
        f.write("SIGINT\\n")
    got.append(1)
    os.kill(child.pid, signal.SIGINT)
signal.signal(signal.SIGINT, on)
child = subprocess.Popen([sys.executable, rank, node, out, "tr"], start_new_session=True)
while not got:
    time.sleep(0.05)
held = open(node, "rb")
child.wait()
time.sleep(30)
"""


def start(tmp_path: Path, children: list[subprocess.Popen[bytes]], name: str, text: str,
          *args: str) -> subprocess.Popen[bytes]:
    (tmp_path / name).write_text(text)
    (tmp_path / "rank.py").write_text(RANK)
    p = subprocess.Popen([sys.executable, str(tmp_path / name), *args], start_new_session=True)
    children.append(p)
    return p


def wait_ready(out: Path, *tags: str) -> None:
    end = time.monotonic() + 20
    while not all((out / f"ready-{t}").exists() for t in tags):
        assert time.monotonic() < end, "the job never became ready"
        time.sleep(0.05)


@pytest.mark.parametrize("holds", ["1", "0"], ids=["deepspeed-holds-a-node", "neither-holds"])
def test_a_held_launcher_still_running_vetoes_beside_one_that_holds_a_node(
        make_config: Any, node: str, tmp_path: Path, children: list[subprocess.Popen[bytes]],
        holds: str) -> None:
    """DeepSpeed's launcher holding a node is continued early to act on its own signal: msrun,
    held beside it and still running once continued, vetoes all the same."""
    rank = str(tmp_path / "rank.py")
    start(tmp_path, children, "deepspeed", DEEPSPEED, node, rank, str(tmp_path), holds)
    msrun = start(tmp_path, children, "msrun", MSRUN, node, rank, str(tmp_path))
    wait_ready(tmp_path, "ds", "ms")
    report = guard(make_config(drain={"timeout_s": 5}))
    assert msrun.poll() is None
    assert report.verdict.kind == "veto", report.verdict
    running = [r for r in report.verdict.reasons if r.code == "launcher-running"]
    assert [r.pid for r in running if r.pid == msrun.pid] == [msrun.pid], report.verdict.reasons


def test_a_launcher_that_forwarded_and_holds_a_node_since_gets_no_second_sigint(
        make_config: Any, node: str, tmp_path: Path, children: list[subprocess.Popen[bytes]]
        ) -> None:
    """Found holding a node at the rescan after it forwarded, it is waited for, never
    signalled again as a new holder; still running, it vetoes."""
    launcher = start(tmp_path, children, "torchrun", TORCHRUN, node, str(tmp_path / "rank.py"),
                     str(tmp_path))
    wait_ready(tmp_path, "tr")
    report = guard(make_config(drain={"timeout_s": 2}))
    assert (tmp_path / "launcher.log").read_text() == "SIGINT\n"
    assert report.verdict.kind == "veto", report.verdict
    [reason] = report.verdict.reasons
    assert (reason.code, reason.pid) == ("timeout-after-sigint", launcher.pid), reason
    assert "after this round began (sent SIGINT earlier in this run" in reason.text, reason.text
    [row] = [h for h in report.holders if h.holder.pid == launcher.pid]
    assert row.outcome.signalled, row.outcome  # written down: the next attempt sends none
    second = guard(make_config(drain={"timeout_s": 1}))
    assert (tmp_path / "launcher.log").read_text() == "SIGINT\n"
    assert second.verdict.kind == "veto", second.verdict


def test_a_launcher_the_hold_could_not_stop_gets_its_one_sigint_once_its_ranks_left(
        make_config: Any, node: str, tmp_path: Path, children: list[subprocess.Popen[bytes]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No pidfd to stop it by (a kernel before 5.3, which this one is not): DeepSpeed's launcher,
    holding a node, gets its SIGINT once its rank left, as a held one does, and leaves."""
    monkeypatch.setattr(held_module, "_pidfd", lambda _launcher, _proc: None)
    rank = str(tmp_path / "rank.py")
    launcher = start(tmp_path, children, "deepspeed", DEEPSPEED, node, rank, str(tmp_path), "1")
    wait_ready(tmp_path, "ds")
    report = guard(make_config(drain={"timeout_s": 3}))
    assert report.verdict.kind == "allow", report.verdict
    assert any("deepspeed (pid" in w and "was not stopped" in w for w in report.verdict.warnings)
    [row] = [h for h in report.holders if h.holder.pid == launcher.pid]
    assert (row.outcome.kind, row.outcome.signalled) == ("exited", True), row.outcome
