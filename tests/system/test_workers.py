"""Forked workers: results in order, and a failed worker's share done in-process."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from suspendguard.system.workers import run_shares


def test_results_come_back_in_order_from_forked_workers() -> None:
    # In a fresh interpreter: other tests may leave threads behind (a hung
    # backend call is abandoned in one), and then nothing forks, by design.
    code = """
import os
from suspendguard.system.workers import can_fork, run_shares
parent = os.getpid()
pids = []
def from_wire(wire):
    pids.append(wire[-1])
    return wire[:-1]
assert can_fork()
out = run_shares([[1, 2], [3], [4, 5, 6]], lambda share: [x * x for x in share],
                 lambda result: [*result, os.getpid()], from_wire)
assert out == [[1, 4], [9], [16, 25, 36]], out
assert len(pids) == 2 and parent not in pids, pids
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_a_failing_worker_share_is_done_here() -> None:
    code = """
import os
from suspendguard.system.workers import can_fork, run_shares
parent = os.getpid()
def work(share):
    if os.getpid() != parent:
        raise RuntimeError("this worker breaks")
    return sum(share)
assert can_fork()
assert run_shares([[1], [2, 3], [4]], work, lambda r: r, int) == [1, 5, 4]
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_no_fork_from_a_threaded_process() -> None:
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        parent = os.getpid()
        seen: list[int] = []

        def work(share: list[int]) -> int:
            seen.append(os.getpid())
            return len(share)

        assert run_shares([[1], [2]], work, lambda r: r, lambda w: int(w)) == [1, 1]
        assert seen == [parent, parent]
    finally:
        stop.set()
        t.join()


def test_a_bounded_run_keeps_its_bound_in_a_threaded_process() -> None:
    # A hung NVML or DCMI call stays in a thread (idle/base.py), and nothing forks from then
    # on: the bounded rescan ran in-process, unbounded, behind a /proc read that blocks.
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        def work(share: str) -> str:
            if share == "stuck":
                stop.wait(1.0)  # a read blocked behind a process stuck in the driver
            return share

        began = time.monotonic()
        done = run_shares(["quick", "stuck", "also quick"], work, lambda r: r, str,
                          until=began + 0.2, late=lambda share: f"late: {share}")
        took = time.monotonic() - began
        assert done == ["quick", "late: stuck", "also quick"]
        assert 0.15 < took < 0.8, took
    finally:
        stop.set()
        t.join()


def test_an_error_in_this_process_s_share_leaves_no_worker_behind() -> None:
    # The scan's own share raised (the guard out of fds): its forked workers were never
    # waited for, zombies with their pipes open for the rest of the run.
    code = """
import os, time
from suspendguard.system.workers import can_fork, run_shares
parent = os.getpid()
def work(share):
    if os.getpid() == parent and share == [1]:
        raise OSError(24, "Too many open files")
    time.sleep(0.2)
    return share
assert can_fork()
try:
    run_shares([[1], [2], [3]], work, lambda r: r, lambda w: w)
except OSError as exc:
    assert exc.errno == 24
else:
    raise AssertionError("no error")
try:
    os.waitpid(-1, os.WNOHANG)
except ChildProcessError:
    print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", (proc.stdout, proc.stderr)
