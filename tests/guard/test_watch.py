"""``suspendguard watch``: a logind block while the guard would veto, gone once it would not.

Real parts: the watch runs as its own process (``python -m suspendguard
watch``) against fake logind on a private dbus-daemon, which logs every lock
it hands out and every one dropped; the holders are real processes holding
the test node (a deaf one ignores SIGINT: a certain veto). systemd's side is
a datagram socket of the test's, named in ``NOTIFY_SOCKET`` (abstract, as
systemd's own is). The bounded look is set to 600 s: whatever the watch
sees within the test, it saw through inotify and pidfds.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.dbus import PrivateBus
from helpers.holders import Holders
from helpers.wait import wait_for

from suspendguard.system.dbus.logind import Inhibitor, logind_info
from suspendguard.system.inotify import (
    FOLDER_EVENTS,
    IN_CLOSE_NOWRITE,
    IN_DELETE,
    IN_MOVED_TO,
    IN_OPEN,
    Inotify,
)
from suspendguard.system.sdnotify import Notifier

RELEASE_S = 2.0  # a holder gone, the block gone within this


class Systemd:
    """The notification socket a service manager listens on; what the service said."""

    def __init__(self) -> None:
        self.name = f"@suspendguard-test-{os.getpid()}-{time.monotonic_ns()}"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(b"\0" + self.name[1:].encode())
        self.sock.settimeout(0.1)
        self.messages: list[dict[str, str]] = []

    def read(self) -> None:
        while True:
            try:
                data = self.sock.recv(4096)
            except (TimeoutError, BlockingIOError):
                return
            self.messages.append(dict(line.split("=", 1) for line in data.decode().splitlines()))

    def said(self, key: str) -> list[str]:
        self.read()
        return [m[key] for m in self.messages if key in m]


def ours() -> list[Inhibitor]:
    info = logind_info()
    assert not hasattr(info, "reason"), info
    return [i for i in info.inhibitors if i.who == "suspendguard"]  # type: ignore[union-attr]


def events(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def start_watch(conf: Path, tmp_path: Path, systemd: Systemd) -> subprocess.Popen[bytes]:
    """``suspendguard watch`` (its bounded look at 600 s), once it said READY; its stderr
    in tmp_path/watch.err."""
    env = {**os.environ, "NOTIFY_SOCKET": systemd.name, "PYTHONUNBUFFERED": "1"}
    with open(tmp_path / "watch.err", "w") as err:
        watch = subprocess.Popen(
            [sys.executable, "-m", "suspendguard", "--config", str(conf), "watch",
             "--recheck", "600"], env=env, stderr=err)
    try:
        wait_for(lambda: systemd.said("READY"), 30, message=lambda: (tmp_path / "watch.err")
                 .read_text())
    except BaseException:
        watch.kill()
        watch.wait()
        raise
    return watch


@pytest.fixture
def systemd() -> Iterator[Systemd]:
    s = Systemd()
    yield s
    s.sock.close()


def test_the_block_follows_the_holders(
        bus: PrivateBus, fakes: Callable[..., Any], holders: Holders, node: str,
        conf: Path, tmp_path: Path, systemd: Systemd) -> None:
    log = tmp_path / "inhibit.log"
    fakes({"inhibit_log": str(log)}, services=("logind",))
    holders.start(node, mode="graceful")  # drained at a suspend: no veto, no block
    watch = start_watch(conf, tmp_path, systemd)
    try:
        assert ours() == []
        assert systemd.said("STATUS")[-1].startswith("no block"), systemd.messages

        # Two jobs that ignore SIGINT open the node: inotify's IN_OPEN brings a look.
        deaf = [holders.start(node, mode="deaf") for _ in range(2)]
        locks = wait_for(ours, 5, message="no block taken")
        assert [(i.what, i.mode, i.pid) for i in locks] == [("sleep", "block", watch.pid)]
        first = locks[0].why
        named = [(p, pid) for p, pid in deaf if str(pid) in first]
        assert len(named) == 1, first
        assert "SIGINT" in first, first
        assert wait_for(lambda: any(s.startswith("blocking sleep: ") and first in s
                                    for s in systemd.said("STATUS")), 5), systemd.messages

        # The job the block names ends: the other's reason, taken before the first goes.
        proc, pid = named[0]
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        switched = wait_for(lambda: [i for i in ours() if i.why != first], 5,
                            message=lambda: f"no new block: {ours()}")
        other = next(p for _, p in deaf if p != pid)
        assert str(other) in switched[0].why
        wait_for(lambda: len(ours()) == 1, 5, message=lambda: f"the old block stays: {ours()}")
        order = [(e["event"], e["why"]) for e in events(log)]
        assert order.index(("taken", switched[0].why)) < order.index(("released", first)), order

        # The last deaf job ends: the block goes at once, not at the 600 s look.
        last = next(p for p, q in deaf if q == other)
        last.send_signal(signal.SIGKILL)
        ended = time.monotonic()
        last.wait()
        wait_for(lambda: ours() == [], RELEASE_S, interval=0.02,
                 message=lambda: f"still blocked {time.monotonic() - ended:.2f} s on: {ours()}")
        assert all(e["what"] == "sleep" and e["mode"] == "block" for e in events(log))
    finally:
        watch.send_signal(signal.SIGTERM)
        rc = watch.wait(10)
    assert rc == 0, (tmp_path / "watch.err").read_text()
    assert systemd.said("STOPPING") == ["1"]
    assert ours() == []
    assert "Traceback" not in (tmp_path / "watch.err").read_text()


def test_observe_and_off_hold_no_block_and_a_switch_takes_effect_at_once(
        bus: PrivateBus, fakes: Callable[..., Any], holders: Holders, node: str,
        conf: Path, tmp_path: Path, systemd: Systemd) -> None:
    """suspendguard mode off is the guard switched off at once: the watch's block too."""
    fakes({}, services=("logind",))
    holders.start(node, mode="deaf")

    def mode(name: str) -> None:
        done = subprocess.run([sys.executable, "-m", "suspendguard", "--config", str(conf),
                               "mode", name], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr

    watch = start_watch(conf, tmp_path, systemd)
    try:
        [held] = wait_for(ours, 5, message="no block taken")
        # No mode was ever set: the state folder the switch makes is not there yet.
        assert not (conf.parent / "state").exists()
        for name in ("off", "observe"):
            mode(name)
            said = (f"no block: the guard's mode is {name} (suspendguard mode); enforced, it "
                    f"would block: {held.why}")
            wait_for(lambda: ours() == [], RELEASE_S + 1, interval=0.02,
                     message=lambda: f"still blocked: {ours()}")
            wait_for(lambda: systemd.said("STATUS")[-1] == said,  # noqa: B023 (waited here)
                     5, message=lambda: systemd.messages)
            mode("enforce")
            wait_for(lambda: [i.why for i in ours()] == [held.why], RELEASE_S + 1,
                     interval=0.02, message=lambda: f"not blocked again: {ours()}")
    finally:
        watch.send_signal(signal.SIGTERM)
        rc = watch.wait(10)
    log = (tmp_path / "watch.err").read_text()
    assert rc == 0 and "Traceback" not in log, log
    assert "watch: the guard's mode is off (suspendguard mode): no sleep is blocked" in log, log


def test_a_block_that_logind_refuses_is_said_and_tried_again(
        no_bus: str, holders: Holders, node: str, conf: Path, tmp_path: Path,
        systemd: Systemd) -> None:
    holders.start(node, mode="deaf")
    env = {**os.environ, "NOTIFY_SOCKET": systemd.name}
    watch = subprocess.Popen(
        [sys.executable, "-m", "suspendguard", "--config", str(conf), "watch"],
        env=env, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: systemd.said("READY"), 30)
        status = systemd.said("STATUS")[-1]
        assert status.startswith("the guard would veto, but logind refused the block"), status
    finally:
        watch.send_signal(signal.SIGTERM)
        _, err = watch.communicate(timeout=10)
    assert watch.returncode == 0, err
    assert "cannot take the sleep block" in err, err


def test_a_refused_retake_keeps_the_old_block_and_the_status_says_both(
        bus: PrivateBus, fakes: Callable[..., Any], holders: Holders, node: str,
        conf: Path, tmp_path: Path, systemd: Systemd) -> None:
    """logind at its InhibitorsMax refuses the new block, taken before the old one goes."""
    fakes({"inhibitors_max": 1}, services=("logind",))
    deaf = [holders.start(node, mode="deaf") for _ in range(2)]
    watch = start_watch(conf, tmp_path, systemd)
    try:
        [held] = ours()
        [(proc, pid)] = [(p, q) for p, q in deaf if f"pid {q} " in held.why]
        [other] = [q for _, q in deaf if q != pid]
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        status = wait_for(lambda: [s for s in systemd.said("STATUS") if f"pid {other} " in s],
                          5, message=lambda: systemd.messages)[-1]
        assert [i.why for i in ours()] == [held.why]  # the old block stays: sleep is blocked
        assert status.startswith(f"blocking sleep: pid {other} "), status
        assert "logind refused the new block" in status and "Maximum number" in status, status
        assert status.endswith(f"the one held still says: {held.why})"), status
    finally:
        watch.send_signal(signal.SIGTERM)
        rc = watch.wait(10)
    log = (tmp_path / "watch.err").read_text()
    assert rc == 0 and "Traceback" not in log, log
    assert f"the block taken earlier stays: {held.why}" in log, log


def test_inotify_sees_an_open_and_a_close(tmp_path: Path) -> None:
    path = tmp_path / "node"
    path.write_bytes(b"")
    watcher = Inotify()
    try:
        assert watcher.watch([str(path), str(tmp_path / "absent")]) == [
            f"{tmp_path / 'absent'}: No such file or directory"]
        with open(path, "rb"):
            pass
        seen = watcher.read()
        assert [m & (IN_OPEN | IN_CLOSE_NOWRITE) for p, m in seen] == [IN_OPEN, IN_CLOSE_NOWRITE]
        assert {p for p, _ in seen} == {str(path)}
        assert watcher.read() == []
        folder = Inotify(FOLDER_EVENTS)  # a folder's events name the file
        try:
            folder.watch([str(tmp_path)])
            (tmp_path / "mode.tmp").write_text("off\n")
            (tmp_path / "mode.tmp").replace(tmp_path / "mode")
            (tmp_path / "mode").unlink()
            mode = str(tmp_path / "mode")
            assert [(p, m & (IN_MOVED_TO | IN_DELETE)) for p, m in folder.read()
                    if p == mode] == [(mode, IN_MOVED_TO), (mode, IN_DELETE)]
        finally:
            folder.close()
        path.unlink()  # the kernel drops the watch; the next watch() adds it again
        watcher.read()
        assert watcher.watches == {}
    finally:
        watcher.close()


def test_notifier_speaks_to_abstract_and_path_sockets(tmp_path: Path, systemd: Systemd) -> None:
    n = Notifier({"NOTIFY_SOCKET": systemd.name, "WATCHDOG_USEC": "4000000",
                  "WATCHDOG_PID": str(os.getpid())})
    assert n.watchdog_s == 4.0
    assert n.send(READY="1", STATUS="two\nlines")
    assert systemd.said("STATUS") == ["two lines"] and systemd.said("READY") == ["1"]
    n.close()
    assert Notifier({"WATCHDOG_USEC": "1", "WATCHDOG_PID": "1"}).watchdog_s is None
    assert not Notifier({}).send(READY="1")


def test_the_watchdog_is_pinged_before_each_look(
        bus: PrivateBus, fakes: Callable[..., Any], holders: Holders, node: str,
        conf: Path, tmp_path: Path, systemd: Systemd) -> None:
    # A look may take all of its bound, which the watchdog (deadline_s + 20 s) covers once
    # only if pinged right before it: between looks, at half the watchdog, is too late.
    fakes({"inhibit_log": str(tmp_path / "inhibit.log")}, services=("logind",))
    env = {**os.environ, "NOTIFY_SOCKET": systemd.name, "PYTHONUNBUFFERED": "1",
           "WATCHDOG_USEC": str(600 * 1_000_000)}  # its own pings: 300 s apart
    with open(tmp_path / "watch.err", "w") as err:
        watch = subprocess.Popen(
            ["sh", "-c", 'WATCHDOG_PID=$$ exec "$@"', "sh", sys.executable, "-m",
             "suspendguard", "--config", str(conf), "watch", "--recheck", "600"],
            env=env, stderr=err)
    try:
        wait_for(lambda: systemd.said("READY"), 30,
                 message=lambda: (tmp_path / "watch.err").read_text())
        first = len(systemd.said("WATCHDOG"))
        assert first >= 1  # the first look's
        holders.start(node, mode="deaf")  # an open: another look
        wait_for(lambda: len(systemd.said("WATCHDOG")) > first, 30,
                 message=lambda: (tmp_path / "watch.err").read_text())
    finally:
        watch.terminate()
        watch.wait(timeout=30)


def test_a_busy_device_whose_load_changes_is_the_same_veto(tmp_path: Path) -> None:
    """The device reads busy at each look, each time with another figure: one block held
    throughout, and the looks back off as for any veto that does not change."""
    from suspendguard.guard.watch import MIN_GAP_S, Sight, Watch
    from suspendguard.system.deadline import Cancel
    from suspendguard.system.log import Logger
    from suspendguard.system.procfs import ProcFS
    from suspendguard.verdict import Reason, Verdict

    loads = iter([37, 41, 12, 55])
    taken: list[str] = []

    def look(_cancel: Cancel) -> Sight:
        why = f"npu 0 (npu-smi): aicore {next(loads)}% > 5% after 3.0 s settle"
        return Sight(Verdict("veto", (Reason("device-busy", why, device="npu 0"),)), (), ())

    def take(why: str) -> int:
        taken.append(why)
        return os.open(os.devnull, os.O_RDONLY)

    err = tmp_path / "watch.err"
    with err.open("w") as stream:
        watch = Watch(look, take, Notifier({}), Logger(stream, {}), ProcFS())
        cancel = Cancel()
        try:
            for _ in range(4):
                watch.step(cancel, by_event=True)
            assert len(taken) == 1 and "aicore 37%" in taken[0], taken
            assert watch.gap == MIN_GAP_S * 8  # doubled at each look that found nothing new
            # Another device busy is another veto: its own block.
            watch.look = lambda _c: Sight(Verdict("veto", (Reason(
                "device-busy", "npu 1 (npu-smi): aicore 90% > 5%", device="npu 1"),)), (), ())
            watch.step(cancel, by_event=True)
            assert len(taken) == 2 and watch.gap == MIN_GAP_S
        finally:
            watch.hold(None)
            cancel.close()


def test_a_holder_that_exits_during_a_look_ends_the_block_within_the_gap(
        tmp_path: Path, holders: Holders, node: str) -> None:
    """The holder goes while a look (brought by an open) still sees it: its exit, read after
    that look, brings the next one at once, not the bounded look 600 s later."""
    import threading

    from suspendguard.guard.watch import Sight, Watch
    from suspendguard.system.deadline import Cancel
    from suspendguard.system.log import Logger
    from suspendguard.system.procfs import ProcFS
    from suspendguard.verdict import Reason, Verdict

    proc, pid = holders.start(node, mode="deaf")
    st = ProcFS().stat(pid)
    assert st is not None
    seen = Sight(Verdict("veto", (Reason("sigint-ignored", f"pid {pid} ignores SIGINT",
                                         pid=pid),)), (node,), ((pid, st.start_time),))
    looks: list[str] = []

    def look(_cancel: Cancel) -> Sight:
        looks.append("look")
        if len(looks) == 2:  # the open's look: the holder goes as it looks
            proc.kill()
            proc.wait()
            return seen
        return seen if proc.poll() is None else Sight(Verdict("allow", ()), (node,), ())

    def take(_why: str) -> int:
        return os.open(os.devnull, os.O_RDONLY)

    with (tmp_path / "watch.err").open("w") as stream:
        watch = Watch(look, take, Notifier({}), Logger(stream, {}), ProcFS(), recheck_s=600)
        cancel = Cancel()
        loop = threading.Thread(target=watch.run, args=(cancel,))
        loop.start()
        try:
            # Blocked, and the node and the holder followed (after the block is taken).
            wait_for(lambda: watch.held is not None and watch.pidfds, 30, message="no block")
            os.close(os.open(node, os.O_RDONLY))  # an open: the second look
            wait_for(lambda: len(looks) >= 2, 30, message="the open brought no look")
            wait_for(lambda: watch.held is None, 10, message=lambda: f"{len(looks)} looks")
            assert len(looks) == 3
        finally:
            cancel.cancel("test over")
            loop.join(timeout=30)
            watch.close()
            cancel.close()
