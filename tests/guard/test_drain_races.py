"""Holders that change what they hold while the guard drains: the rescan after the wait."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.runners import guard

RACER = str(Path(__file__).parents[1] / "helpers" / "drain_race.py")

Start = Callable[..., tuple[subprocess.Popen[str], int]]


@pytest.fixture
def racers() -> Iterator[Start]:
    """Starts helpers/drain_race.py jobs, each in a session of its own, all killed after."""
    procs: list[subprocess.Popen[str]] = []

    def start(mode: str, node: str, **opts: str) -> tuple[subprocess.Popen[str], int]:
        argv = [sys.executable, RACER, "--mode", mode, "--node", node]
        for key, value in opts.items():
            argv += [f"--{key}", value]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, start_new_session=True)
        procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        assert line[:1] == ["ready"], f"{mode} did not start: {line}"
        return proc, int(line[1])

    yield start
    for proc in procs:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_a_holder_that_opens_a_compute_node_during_the_drain_is_drained(
        tmp_path: Path, make_config: Any, node: str, racers: Start) -> None:
    """At the look it held a management node only (a job starting: Ascend's open
    davinci_manager before davinci0); while the guard waited for another holder it
    opened the compute node. The rescan sees the same process, now a holder to drain."""
    mgmt = tmp_path / "manager"
    mgmt.write_bytes(b"")
    go, done = tmp_path / "go", tmp_path / "done"
    os.mkfifo(go)
    os.mkfifo(done)
    opener, opener_pid = racers("opener", str(mgmt), also=node, go=str(go), done=str(done))
    _, trigger_pid = racers("trigger", node, go=str(go), done=str(done))
    report = guard(make_config(devices={"management": [str(mgmt)]}))
    came = {h.decision.holder.pid: (h.decision.kind, h.outcome.kind, h.round)
            for h in report.holders}
    assert came[trigger_pid] == ("drain", "exited", 1)
    assert came[opener_pid] == ("drain", "exited", 2), report.verdict.texts
    assert [h.respawned for h in report.holders if h.decision.holder.pid == opener_pid] == [""]
    assert report.verdict.kind == "allow", report.verdict.texts
    assert opener.wait(timeout=10) == -signal.SIGINT


def test_a_child_forked_during_the_drain_keeping_a_mapping_vetoes(
        tmp_path: Path, make_config: Any, racers: Start) -> None:
    """The holder held the node through a mapping alone (its fd closed); on SIGINT it
    forked a child that keeps the mapping, and left. The rescan reads the mappings
    of the processes the look did not list, and finds the child."""
    mapped = tmp_path / "mapped"  # a plain file: every process may map it, none does
    mapped.write_bytes(b"\0" * 4096)
    forker, forker_pid = racers("map-forker", str(mapped))
    report = guard(make_config(devices={"nodes": [str(mapped)]}))
    assert forker.stdout is not None
    child_pid = int(forker.stdout.readline().split()[1])
    assert report.verdict.kind == "veto", report.verdict.texts
    [why] = [r for r in report.verdict.texts if r.startswith(f"pid {child_pid} ")]
    assert "ignores SIGINT" in why, report.verdict.texts
    came = {h.decision.holder.pid: (h.outcome.kind, h.round) for h in report.holders}
    assert came == {forker_pid: ("exited", 1), child_pid: ("not-signalled", 2)}
