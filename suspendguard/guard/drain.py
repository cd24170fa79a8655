"""Ask holders to stop, race-free, and wait for each exit as it happens.

A pidfd is opened per holder and the start time re-read through /proc after
it: if it differs from the scanned one the PID was recycled and the process
behind it is never signalled. The wait is one poll() over every pidfd (and
the guard's own wake-up pipe), so an exit is seen the moment it happens.
"""

from __future__ import annotations

import errno
import os
import select
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from suspendguard.config import EscalationStep
from suspendguard.model import Holder, HolderId, Outcome, holder_id
from suspendguard.system.cancel import Cancel
from suspendguard.system.procfs import ProcAccessError, ProcFS

Log = Callable[[str], None]


@dataclass
class _Target:
    holder: Holder
    pidfd: int
    signalled_at: float
    last_signal: str
    escalated: bool = False


@dataclass
class DrainResult:
    outcomes: dict[HolderId, Outcome] = field(default_factory=dict)

    def still_running(self) -> list[HolderId]:
        return [k for k, o in self.outcomes.items() if o.kind == "timeout"]


# Kernels before 5.3 (still shipped by distributions the Ascend driver
# supports) have no pidfd_open: there the guard re-checks the start time
# right before kill() and watches /proc for the exit, every POLL_S.
NO_PIDFD = -1
POLL_S = 0.01


def _pidfd_open(pid: int) -> int:
    if not hasattr(os, "pidfd_open"):
        raise OSError(errno.ENOSYS, "pidfd_open is not available")
    return os.pidfd_open(pid)


def open_pidfd(holder: Holder, proc: ProcFS,
               opener: Callable[[int], int] = _pidfd_open) -> tuple[int | None, Outcome | None]:
    """A pidfd for ``holder`` if it is still the process that was scanned.

    Returns NO_PIDFD (and no outcome) where the kernel has no pidfds.
    """
    try:
        fd = opener(holder.pid)
    except ProcessLookupError:
        return None, Outcome("gone-before-signal", why="exited before the signal")
    except OSError as exc:
        if exc.errno == errno.ENOSYS:
            fd = NO_PIDFD
        else:
            return None, Outcome("not-signalled", why=f"pidfd_open failed: {exc.strerror}")
    try:
        st = proc.stat(holder.pid)
    except ProcAccessError:
        st = None
    if st is None:
        _close(fd)
        return None, Outcome("gone-before-signal", why="exited before the signal")
    if st.start_time != holder.start_time:
        _close(fd)
        return None, Outcome(
            "not-signalled",
            why=f"pid {holder.pid} was reused by another process (start time changed)",
        )
    return fd, None


def _close(fd: int) -> None:
    if fd >= 0:
        os.close(fd)


def _send(target: _Target, signum: int, proc: ProcFS) -> bool:
    try:
        if target.pidfd >= 0:
            signal.pidfd_send_signal(target.pidfd, signum)
        elif _same_process(target.holder, proc):
            os.kill(target.holder.pid, signum)
        else:
            return False
    except ProcessLookupError:
        return False
    return True


def _same_process(holder: Holder, proc: ProcFS) -> bool:
    """Without a pidfd: the pid still names the scanned, living process."""
    try:
        st = proc.stat(holder.pid)
    except ProcAccessError:
        return True  # still there, only unreadable: it has not been replaced
    return st is not None and st.start_time == holder.start_time and st.state != "Z"


def drain(
    holders: Sequence[Holder],
    signame: str,
    timeout_s: float,
    deadline: float,
    escalate: Sequence[EscalationStep] = (),
    *,
    proc: ProcFS | None = None,
    cancel: Cancel | None = None,
    log: Log = lambda _msg: None,
    progress_every_s: float = 5.0,
    clock: Callable[[], float] = time.monotonic,
    opener: Callable[[int], int] = _pidfd_open,
) -> DrainResult:
    """Signal every holder at once, then wait until all exit or time runs out.

    ``deadline`` is a ``clock()`` value the whole drain must end before,
    escalation included.
    """
    proc = proc or ProcFS()
    result = DrainResult()
    # Keyed by pidfd; holders without one get negative keys of their own.
    targets: dict[int, _Target] = {}
    for holder in holders:
        fd, outcome = open_pidfd(holder, proc, opener)
        if outcome is not None:
            result.outcomes[holder_id(holder)] = outcome
        elif fd is not None:
            key = fd if fd >= 0 else -1 - len(targets)
            targets[key] = _Target(holder, fd, 0.0, signame)
    signum = int(signal.Signals[signame])
    try:
        for key, target in list(targets.items()):
            target.signalled_at = clock()
            if not _send(target, signum, proc):
                result.outcomes[holder_id(target.holder)] = Outcome(
                    "gone-before-signal", why="exited before the signal"
                )
                _close(target.pidfd)
                del targets[key]
        if targets:
            names = ", ".join(f"{t.holder.pid} {t.holder.comm}" for t in targets.values())
            log(f"sent {signame} to {len(targets)} holder(s): {names}")
        _wait(targets, result, min(clock() + timeout_s, deadline), cancel, log,
              progress_every_s, clock, proc)
        for step in escalate:
            if not targets or (cancel and cancel.cancelled) or clock() >= deadline:
                break
            stepnum = int(signal.Signals[step.signal])
            for target in targets.values():
                target.last_signal = step.signal
                target.escalated = True
                _send(target, stepnum, proc)
            log(f"escalating: sent {step.signal} to {len(targets)} holder(s) still running")
            _wait(targets, result, min(clock() + step.wait_s, deadline), cancel, log,
                  progress_every_s, clock, proc)
        for target in targets.values():
            waited = clock() - target.signalled_at
            why = f"still running {waited:.1f} s after {target.last_signal}"
            if cancel and cancel.cancelled:
                why += f" ({cancel.reason})"
            result.outcomes[holder_id(target.holder)] = Outcome("timeout", round(waited, 3), why)
    finally:
        for target in targets.values():
            _close(target.pidfd)
    return result


def _wait(
    targets: dict[int, _Target],
    result: DrainResult,
    until: float,
    cancel: Cancel | None,
    log: Log,
    progress_every_s: float,
    clock: Callable[[], float],
    proc: ProcFS,
) -> None:
    poller = select.poll()
    for key in targets:
        if key >= 0:
            poller.register(key, select.POLLIN)
    if cancel is not None:
        poller.register(cancel.fd, select.POLLIN)
    next_progress = clock() + progress_every_s
    while targets:
        if cancel is not None and cancel.cancelled:
            return
        now = clock()
        if now >= until:
            return
        wake = min(until, next_progress)
        if any(key < 0 for key in targets):
            wake = min(wake, now + POLL_S)  # no pidfd to wake us: look in /proc
        events = poller.poll(max(0, int((wake - now) * 1000) + 1))
        now = clock()
        ended = [fd for fd, _mask in events if fd in targets]
        ended += [key for key, t in targets.items() if key < 0 and not _same_process(t.holder, proc)]
        for key in ended:
            target = targets.pop(key)
            if key >= 0:
                poller.unregister(key)
                os.close(key)
            seconds = round(now - target.signalled_at, 3)
            why = f"after escalation to {target.last_signal}" if target.escalated else ""
            result.outcomes[holder_id(target.holder)] = Outcome("exited", seconds, why)
            log(f"pid {target.holder.pid} {target.holder.comm} exited after {seconds:.2f} s")
        if now >= next_progress and targets:
            waiting = ", ".join(
                f"pid {t.holder.pid} {t.holder.comm} ({now - t.signalled_at:.0f} s)"
                for t in targets.values()
            )
            log(f"still waiting for {len(targets)} holder(s): {waiting}")
            next_progress = now + progress_every_s
