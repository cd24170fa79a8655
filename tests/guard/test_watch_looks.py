"""The watch's looks: what happens while one runs is looked at again, and what changes no verdict
lets the looks back off.

Real parts: the guard's own dry run as the look (real scan of real holder processes), real
inotify on the test node, real pidfds. A look is wrapped only to act at a chosen moment: a job
opens the node, or a holder lets it go, after the scan has passed it. The bounded look is at
600 s, so whatever the watch sees within a test, it saw through inotify and pidfds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.dbus import PrivateBus
from helpers.holders import Holders
from helpers.wait import wait_for

from suspendguard.config import Config
from suspendguard.guard.watch import MIN_GAP_S, Sight, Watch, dry_look
from suspendguard.system.dbus.logind import logind_info
from suspendguard.system.deadline import Cancel
from suspendguard.system.log import Logger
from suspendguard.system.procfs import ProcFS
from suspendguard.system.sdnotify import Notifier

# A job that ignores SIGINT (a certain veto), lets the node go when told on stdin and keeps
# running: a holder that stops using the device without exiting.
LETS_GO = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
fd = os.open(sys.argv[1], os.O_RDONLY)
print("ready", flush=True)
sys.stdin.readline()
os.close(fd)
print("closed", flush=True)
sys.stdin.readline()
"""

# `suspendguard watch` itself, its first look wrapped: once the real look is done, it says so
# (argv[1] made) and waits for argv[2] before it returns, while the test starts a job.
FIRST_LOOK_WAITS = """
import os, sys, time
from suspendguard.guard import watch as w
looked, go = sys.argv[1], sys.argv[2]
real = w.dry_look

def dry_look(config, environ, proc):
    look = real(config, environ, proc)
    looks = []

    def wrapped(cancel):
        sight = look(cancel)
        looks.append(sight)
        if len(looks) == 1:
            open(looked, "w").close()
            while not os.path.exists(go):
                time.sleep(0.01)
        return sight
    return wrapped

w.dry_look = dry_look
from suspendguard.cli import main
sys.exit(main(sys.argv[3:]))
"""


class Looks:
    """The guard's dry run as the look, counted, with ``then`` run after the ``at``-th one
    (the scan done: what it does, this look did not see)."""

    def __init__(self, config: Config) -> None:
        self.real = dry_look(config, dict(os.environ), ProcFS())
        self.sights: list[Sight] = []
        self.at, self.then = 0, (lambda: None)

    def __call__(self, cancel: Cancel) -> Sight:
        sight = self.real(cancel)
        self.sights.append(sight)
        if len(self.sights) == self.at:
            self.then()
        return sight


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Callable[[Looks], Watch]]:
    """Starts the watch loop on a look, a block being an fd on /dev/null; stops it after."""
    started: list[tuple[Watch, Cancel, threading.Thread]] = []

    def start(look: Looks) -> Watch:
        stream = (tmp_path / "watch.err").open("w")
        watch = Watch(look, lambda _why: os.open(os.devnull, os.O_RDONLY), Notifier({}),
                      Logger(stream, {}), ProcFS(), recheck_s=600)
        cancel = Cancel()
        loop = threading.Thread(target=watch.run, args=(cancel,))
        started.append((watch, cancel, loop))
        loop.start()
        wait_for(lambda: look.sights, 30, message="no first look")
        return watch

    yield start
    for watch, cancel, loop in started:
        cancel.cancel("test over")
        loop.join(timeout=30)
        watch.close()
        cancel.close()


def tool_opens(node: str) -> None:
    """A tool opens the node and lets it go (nvidia-smi, say): a look, which finds nothing new
    and so doubles the gap."""
    os.close(os.open(node, os.O_RDONLY))


def test_a_job_that_opens_the_node_during_a_look_is_looked_at_again(
        make_config: Any, holders: Holders, node: str,
        running: Callable[[Looks], Watch]) -> None:
    look = Looks(make_config())
    watch = running(look)
    assert watch.held is None
    jobs: list[int] = []
    # The tool's open brings the second look; a job that ignores SIGINT opens the node while
    # that look runs, after its scan.
    look.at, look.then = 2, lambda: jobs.append(holders.start(node, mode="deaf")[1])
    tool_opens(node)
    wait_for(lambda: jobs, 30, message="the open brought no look")
    wait_for(lambda: watch.held is not None, 10,
             message=lambda: f"no block after {len(look.sights)} looks (gap {watch.gap})")
    assert len(look.sights) >= 3
    assert f"pid {jobs[0]} " in watch.held[1], watch.held


def test_a_holder_that_lets_go_during_a_look_ends_the_block(
        make_config: Any, node: str, children: list[subprocess.Popen[str]],
        running: Callable[[Looks], Watch]) -> None:
    job = subprocess.Popen([sys.executable, "-c", LETS_GO, node], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    children.append(job)
    assert job.stdin is not None and job.stdout is not None
    assert job.stdout.readline() == "ready\n"
    look = Looks(make_config())
    closed: list[str] = []

    def let_go() -> None:
        assert job.stdin is not None and job.stdout is not None
        job.stdin.write("\n")
        job.stdin.flush()
        closed.append(job.stdout.readline())

    look.at, look.then = 2, let_go
    watch = running(look)
    assert watch.held is not None and f"pid {job.pid} " in watch.held[1], watch.held
    tool_opens(node)  # the second look, during which the job lets go
    wait_for(lambda: closed, 30, message="the open brought no look")
    assert closed == ["closed\n"]
    wait_for(lambda: watch.held is None, 10,
             message=lambda: f"still blocked after {len(look.sights)} looks (gap {watch.gap})")
    assert job.poll() is None  # it let go of the node, and still runs: no exit told of it


def test_a_job_that_opens_the_node_during_the_first_look_is_seen(
        bus: PrivateBus, fakes: Callable[..., Any], holders: Holders, node: str,
        conf: Path, tmp_path: Path) -> None:
    """`suspendguard watch` watches the nodes before its first look, not after it."""
    fakes({}, services=("logind",))
    looked, go = tmp_path / "looked", tmp_path / "go"
    with (tmp_path / "watch.err").open("w") as err:
        watch = subprocess.Popen(
            [sys.executable, "-c", FIRST_LOOK_WAITS, str(looked), str(go), "--config",
             str(conf), "watch", "--recheck", "600"], stderr=err)
    try:
        wait_for(looked.exists, 30, message=lambda: (tmp_path / "watch.err").read_text())
        _, pid = holders.start(node, mode="deaf")
        go.touch()

        def ours() -> list[str]:
            info = logind_info()
            assert not hasattr(info, "reason"), info
            return [i.why for i in info.inhibitors if i.who == "suspendguard"]  # type: ignore[union-attr]

        [why] = wait_for(ours, 10, message="the job's open during the first look went unseen")
        assert f"pid {pid} " in why, why
    finally:
        watch.send_signal(signal.SIGTERM)
        rc = watch.wait(30)
    log = (tmp_path / "watch.err").read_text()
    assert rc == 0 and "Traceback" not in log, log


def test_a_holder_the_policy_leaves_alone_is_not_followed(
        make_config: Any, holders: Holders, node: str) -> None:
    """A management-only holder (a monitoring tool) changes no verdict: not a holder of the
    look's sight, so no pidfd on it and no reason to look again; a job that vetoes is."""
    cancel = Cancel()
    try:
        _, tool = holders.start(node)
        st = ProcFS().stat(tool)
        assert st is not None
        managed = dry_look(make_config(devices={"nodes": [], "management": [node]}),
                           dict(os.environ), ProcFS())(cancel)
        assert managed.verdict.kind != "veto" and managed.holders == (), managed
        compute = dry_look(make_config(), dict(os.environ), ProcFS())(cancel)
        assert compute.holders == ((tool, st.start_time),), compute  # drained: followed
    finally:
        cancel.close()


def test_a_monitoring_agent_run_anew_each_time_lets_the_looks_back_off(
        make_config: Any, node: str, children: list[subprocess.Popen[str]],
        running: Callable[[Looks], Watch]) -> None:
    """An exporter runs a tool every second, a new process each time, on a management node:
    every open finds nothing new, so the gap doubles and the looks grow few."""
    look = Looks(make_config(devices={"nodes": [], "management": [node]}))
    watch = running(look)
    agent = "import os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY); time.sleep(0.6)"
    runs = 12
    for _ in range(runs):
        time.sleep(1.0)
        children.append(subprocess.Popen([sys.executable, "-c", agent, node]))
    for child in children:
        child.wait()
    looks = len(look.sights)
    # Each run a new holder, followed and its exit told: a look after nearly every run
    # (12 or more). Left alone: the first look, and those at gaps of 1, 2, 4, 8 s.
    assert looks <= 6, f"{looks} looks for {runs} runs"
    assert watch.gap > MIN_GAP_S and not watch.pidfds, (watch.gap, watch.pidfds)
