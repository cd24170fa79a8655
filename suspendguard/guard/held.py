"""Launchers stopped (SIGSTOP) while their ranks take the drain signal, and always continued.

A launcher that kills or restarts the other ranks when one leaves (mpirun,
DeepSpeed's launcher, msrun) is stopped while its ranks handle their own
SIGINT, and continued once they left (guard/jobs.py). A stopped process
must never outlive the guard that stopped it, so each stop is covered
twice before it is made:

- written ahead into ``held-launchers.json`` in the state folder (pid and
  start time, fsync'd): the next guard run, and ``restore``, continue what
  a killed run left (``continue_left``);
- a watchdog child holds a pidfd of each launcher and one end of a pipe
  whose other end only the guard holds: when the guard ends, however it
  ends, the pipe closes and the watchdog continues the launchers (it does
  the same on SIGTERM, which systemd sends a unit's processes first).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from suspendguard.guard.describe import stopped_now
from suspendguard.guard.jobs import Launcher
from suspendguard.guard.launchers import LauncherKind
from suspendguard.system import runner
from suspendguard.system.procfs import ProcAccessError, ProcFS

HELD_FILE = "held-launchers.json"
PID_MAX_LIMIT = 1 << 22  # the kernel's highest pid_max (include/linux/threads.h)
# What a launcher read back from the file is known as (its name comes from the file).
_KIND = LauncherKind("launcher", "hold")

# The watchdog: argv[1] is the pipe's read end, the rest pidfds. It waits
# for the pipe to close (the guard ended, or released the launchers), then
# continues each launcher through its pidfd, which names the process taken
# and no other even if its pid was reused meanwhile.
_WATCHDOG = """
import os, signal, sys
def stop(*_):
    raise SystemExit(0)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, signal.SIG_IGN)
try:
    while os.read(int(sys.argv[1]), 64):
        pass
finally:
    for fd in sys.argv[2:]:
        try:
            signal.pidfd_send_signal(int(fd), signal.SIGCONT)
        except OSError:
            pass
"""


@dataclass
class Held:
    """The launchers this run stopped; ``release`` continues them all."""

    state_dir: str
    proc: ProcFS = field(default_factory=ProcFS)
    launchers: list[tuple[Launcher, int]] = field(default_factory=list)  # with a pidfd each
    warnings: list[str] = field(default_factory=list)
    _pipe: int = -1
    _watchdog: runner.Background | None = None

    def hold(self, launchers: Sequence[Launcher]) -> list[Launcher]:
        """Stop each launcher that is still the process scanned; those stopped.

        One that cannot be covered (no pidfd, the state file cannot be
        written, no watchdog) is not stopped: its ranks are signalled all
        the same, with a warning.
        """
        taken = []
        for launcher in launchers:
            # Stopped by its user, or a debugger, when planned or since: left so, never
            # continued here.
            if state := launcher.stopped or stopped_now(self.proc, launcher.pid,
                                                          launcher.start_time):
                self.warnings.append(f"{launcher.label} was stopped already (state "
                                     f"{state}): left stopped, not continued")
                continue
            fd = _pidfd(launcher, self.proc)
            if fd is None:
                self.warnings.append(f"{launcher.label} was not stopped while its ranks left "
                                     "(gone, reused, or no pidfd on this kernel): it may act "
                                     "on its ranks as they exit")
                continue
            taken.append((launcher, fd))
        if not taken:
            return []
        try:
            _write(self.state_dir, [lr for lr, _fd in self.launchers + taken])
            self._start_watchdog([fd for _lr, fd in self.launchers + taken])
        except OSError as exc:
            for _lr, fd in taken:
                os.close(fd)
            self.warnings.append("launchers not stopped while their ranks left: "
                                 f"{exc.strerror or exc}: "
                                 + ", ".join(lr.label for lr, _fd in taken))
            return []
        for _launcher, fd in taken:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(fd, signal.SIGSTOP)
        self.launchers += taken
        return [lr for lr, _fd in taken]

    def release(self, until: float | None = None, clock: Callable[[], float] = time.monotonic,
                cancel: int | None = None) -> list[Launcher]:
        """Continue every launcher stopped here; the watchdog and the state file go.

        With ``until`` (on ``clock``), each is waited for until then, or until ``cancel``
        (an fd) reads: those still running are returned. Its ranks gone, a launcher that
        does not exit may start them again (an elastic one restarts them after its
        monitor's interval, past any rescan).
        """
        self.resume()
        running = [lr for lr, fd in self.launchers
                   if until is not None and not _exited(fd, until, clock, cancel)]
        for _launcher, fd in self.launchers:
            os.close(fd)
        self.launchers = []
        if self._pipe >= 0:
            os.close(self._pipe)
            self._pipe = -1
        if self._watchdog is not None:
            self._watchdog.wait(1.0)
            self._watchdog = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self.state_dir, HELD_FILE))
        return running

    def resume(self) -> None:
        """Continue every launcher stopped here, each kept (its pidfd, the watchdog, the
        file) for ``release`` to wait for: one continued early, to act on its own signal,
        must not take the others out of the wait for those still running."""
        for _launcher, fd in self.launchers:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(fd, signal.SIGCONT)

    def _start_watchdog(self, fds: list[int]) -> None:
        if self._pipe >= 0:  # one watchdog per run: the new one covers every launcher
            os.close(self._pipe)
            self._pipe = -1
        r, w = os.pipe2(os.O_CLOEXEC)
        try:
            self._watchdog = runner.start_background(
                [sys.executable, "-I", "-S", "-c", _WATCHDOG, str(r), *map(str, fds)],
                (r, *fds))
        except OSError:
            os.close(w)
            raise
        finally:
            os.close(r)
        self._pipe = w


def _exited(pidfd: int, until: float, clock: Callable[[], float],
            cancel: int | None = None) -> bool:
    """Whether the process of ``pidfd`` exits by ``until`` (a pidfd polls readable then);
    a readable ``cancel`` ends the wait."""
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    if cancel is not None:
        poller.register(cancel, select.POLLIN)
    while (left := until - clock()) > 0:
        ready = {fd for fd, _ in poller.poll(max(1, int(left * 1000)))}
        if pidfd in ready:
            return True
        if ready:
            break  # the guard was stopped
    return any(fd == pidfd for fd, _ in poller.poll(0))


def _pidfd(launcher: Launcher, proc: ProcFS) -> int | None:
    if not hasattr(os, "pidfd_open"):
        return None
    try:
        fd = os.pidfd_open(launcher.pid)
    except OSError:
        return None
    try:
        st = proc.stat(launcher.pid)
    except ProcAccessError:
        st = None
    if st is None or st.start_time != launcher.start_time:
        os.close(fd)
        return None
    return fd


def _write(state_dir: str, launchers: Sequence[Launcher]) -> None:
    _write_entries(state_dir, [{"pid": lr.pid, "start_time": lr.start_time,
                                "name": lr.kind.name, "since": time.time()} for lr in launchers])


def _write_entries(state_dir: str, data: list[Any]) -> None:
    path = os.path.join(state_dir, HELD_FILE)
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        os.write(fd, json.dumps(data).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def continue_left(state_dir: str, proc: ProcFS | None = None) -> list[str]:
    """Continue the launchers a killed run left stopped; a line for each one continued.

    Only a process that is still the one written down (the same start time)
    and still stopped is continued; the file goes once read.
    """
    proc = proc or ProcFS()
    path = os.path.join(state_dir, HELD_FILE)
    try:
        with open(path, "rb") as f:
            entries = json.loads(f.read(1 << 20) or b"[]")
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        return [f"{path}: unreadable ({exc}): continue any launcher left stopped yourself "
                "(kill -CONT PID)"]
    out: list[str] = []
    kept: list[Any] = []  # what could not be continued: written back
    if not isinstance(entries, list):
        entries = [entries]
    for entry in entries:
        try:
            pid, start = int(entry["pid"]), int(entry["start_time"])
            if not (0 < pid <= PID_MAX_LIMIT and start >= 0):
                raise ValueError(f"no process of this kernel: pid {pid}, start time {start}")
            name = str(entry.get("name", "launcher"))
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            out.append(f"{path}: an entry that names no launcher ({exc!r:.100}): continue any "
                       "launcher left stopped yourself (kill -CONT PID)")
            continue
        fake = Launcher(pid, start, -1, name, "", _KIND, "unknown")
        fd = _pidfd(fake, proc)
        if fd is None:
            continue
        try:
            st = proc.stat(pid)
            if st is not None and st.state in ("T", "t"):
                signal.pidfd_send_signal(fd, signal.SIGCONT)
                out.append(f"continued {name} (pid {pid}), which an earlier guard run had "
                           "stopped while its ranks left and did not continue")
        except ProcAccessError:
            pass
        except OSError as exc:  # kept for the next run: none may stay stopped unsaid
            kept.append(entry)
            out.append(f"could not continue {name} (pid {pid}), which an earlier guard run "
                       f"stopped: {exc.strerror or exc}; continue it yourself (kill -CONT {pid})")
        finally:
            os.close(fd)
    if kept:
        _write_entries(state_dir, kept)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    return out

