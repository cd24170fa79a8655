"""Ask holders to stop, race-free, and wait for each exit as it happens.

A pidfd is opened per holder and the start time re-read through /proc after
it: if it differs from the scanned one the PID was recycled and the process
behind it is never signalled. The wait is one poll() over every pidfd (and
the guard's own wake-up pipe), so an exit is seen the moment it happens.
"""

from __future__ import annotations

import os
import select
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .cancel import Cancel
from .config import EscalationStep
from .model import Holder, HolderId, Outcome, holder_id
from .procfs import ProcAccessError, ProcFS

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


def open_pidfd(holder: Holder, proc: ProcFS) -> tuple[int | None, Outcome | None]:
    """A pidfd for ``holder`` if it is still the process that was scanned."""
    try:
        fd = os.pidfd_open(holder.pid)
    except ProcessLookupError:
        return None, Outcome("gone-before-signal", why="exited before the signal")
    except OSError as exc:
        return None, Outcome("not-signalled", why=f"pidfd_open failed: {exc.strerror}")
    try:
        st = proc.stat(holder.pid)
    except ProcAccessError:
        st = None
    if st is None:
        os.close(fd)
        return None, Outcome("gone-before-signal", why="exited before the signal")
    if st.start_time != holder.start_time:
        os.close(fd)
        return None, Outcome(
            "not-signalled",
            why=f"pid {holder.pid} was reused by another process (start time changed)",
        )
    return fd, None


def _send(fd: int, signum: int) -> bool:
    try:
        signal.pidfd_send_signal(fd, signum)
    except ProcessLookupError:
        return False
    return True


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
) -> DrainResult:
    """Signal every holder at once, then wait until all exit or time runs out.

    ``deadline`` is a ``clock()`` value the whole drain must end before,
    escalation included.
    """
    proc = proc or ProcFS()
    result = DrainResult()
    targets: dict[int, _Target] = {}
    for holder in holders:
        fd, outcome = open_pidfd(holder, proc)
        if outcome is not None:
            result.outcomes[holder_id(holder)] = outcome
        elif fd is not None:
            targets[fd] = _Target(holder, fd, 0.0, signame)
    signum = int(signal.Signals[signame])
    try:
        for fd, target in list(targets.items()):
            target.signalled_at = clock()
            if not _send(fd, signum):
                result.outcomes[holder_id(target.holder)] = Outcome(
                    "gone-before-signal", why="exited before the signal"
                )
                os.close(fd)
                del targets[fd]
        if targets:
            names = ", ".join(f"{t.holder.pid} {t.holder.comm}" for t in targets.values())
            log(f"sent {signame} to {len(targets)} holder(s): {names}")
        _wait(targets, result, min(clock() + timeout_s, deadline), cancel, log,
              progress_every_s, clock)
        for step in escalate:
            if not targets or (cancel and cancel.cancelled) or clock() >= deadline:
                break
            stepnum = int(signal.Signals[step.signal])
            for fd, target in list(targets.items()):
                target.last_signal = step.signal
                target.escalated = True
                _send(fd, stepnum)
            log(f"escalating: sent {step.signal} to {len(targets)} holder(s) still running")
            _wait(targets, result, min(clock() + step.wait_s, deadline), cancel, log,
                  progress_every_s, clock)
        for target in targets.values():
            waited = clock() - target.signalled_at
            why = f"still running {waited:.1f} s after {target.last_signal}"
            if cancel and cancel.cancelled:
                why += f" ({cancel.reason})"
            result.outcomes[holder_id(target.holder)] = Outcome("timeout", round(waited, 3), why)
    finally:
        for fd in targets:
            os.close(fd)
    return result


def _wait(
    targets: dict[int, _Target],
    result: DrainResult,
    until: float,
    cancel: Cancel | None,
    log: Log,
    progress_every_s: float,
    clock: Callable[[], float],
) -> None:
    poller = select.poll()
    for fd in targets:
        poller.register(fd, select.POLLIN)
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
        events = poller.poll(max(0, int((wake - now) * 1000) + 1))
        now = clock()
        for fd, _mask in events:
            target = targets.pop(fd, None)
            if target is None:
                continue  # the cancel pipe
            poller.unregister(fd)
            os.close(fd)
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
