"""Holders that change what they hold while the guard drains: the rescan after the wait."""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.isolation import needs_root
from helpers.runners import guard

from suspendguard.system.procfs import ProcAccessError, ProcFS

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


class RefusingNewMaps(ProcFS):
    """As root without CAP_SYS_ADMIN: map_files refused, here to the processes started since
    this /proc was made (the look's are read)."""

    def __init__(self) -> None:
        super().__init__()
        self.before = set(self.pids())

    def map_file_stat(self, pid: int, *parts: str) -> os.stat_result | None:
        if pid not in self.before:
            raise ProcAccessError(f"/proc/{pid}/map_files: refused")
        return super().map_file_stat(pid, *parts)


@needs_root
def test_a_child_forked_during_the_drain_whose_mapping_cannot_be_followed_is_unknown(
        tmp_path: Path, make_config: Any, racers: Start) -> None:
    """As the child above, but its mapping is of a /dev file that is not the node's own
    (a container's own node) and map_files refuses the guard: the rescan could not read it,
    as the look could not, and the verdict is unknown, not allow."""
    zero = tmp_path / "zero0"  # the node: /dev/zero's rdev, mapped through /dev/zero
    os.mknod(zero, 0o666 | stat.S_IFCHR, os.makedev(1, 5))
    forker, forker_pid = racers("map-forker", "/dev/zero")
    report = guard(make_config(devices={"nodes": [str(zero)]}), proc=RefusingNewMaps())
    assert forker.stdout is not None
    child_pid = int(forker.stdout.readline().split()[1])
    came = {h.decision.holder.pid: (h.outcome.kind, h.round) for h in report.holders}
    assert came == {forker_pid: ("exited", 1)}
    assert report.verdict.kind == "unknown", report.verdict.texts
    [why] = report.verdict.texts
    assert why.startswith(f"1 process could not be inspected as root (pids {child_pid})"), why
    assert any(w.startswith("1 process map a device file whose /proc/PID/map_files link")
               and f"(pids {child_pid})" in w for w in report.verdict.warnings), report.verdict
