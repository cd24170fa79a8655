"""Waiting, bounded, until the guard would let a suspend go: ``suspend --when-ready`` and ``retry``.

A look is the guard's dry run (signals nobody, records nothing). While it
says veto for causes that can end by themselves (a protected job still
running, a job that ignores SIGINT, the device still busy ...), the wait
sleeps in poll(2) on a pidfd of each holder the reasons name: a holder's
exit wakes it at once, and a look every ``rescan_s`` sees what no pidfd
shows (a new holder, a changed disposition, the device's own state). A
veto no wait can clear (no idle backend for a family, with ``[idle]
on_unknown = "veto"``) and an ``unknown`` verdict end the wait at once.
Holders the drain would stop are not waited for: the suspend itself drains
them, as without the wait. Those an earlier attempt signalled that still run
(a save longer than that attempt's wait) are: the drain would send them no
second signal and only wait for them, within its own timeout.
"""

from __future__ import annotations

import contextlib
import os
import select
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from suspendguard.config import Config
from suspendguard.guard.pipeline import run
from suspendguard.guard.report import Report
from suspendguard.guard.run import OnDemandOwnerControl, open_history
from suspendguard.guard.watch import pidfd_of as pidfd_on
from suspendguard.model import holder_id
from suspendguard.system.log import Logger
from suspendguard.system.procfs import ProcFS
from suspendguard.verdict import Reason, Verdict

# The default bound of ``suspend --when-ready`` (seconds).
WHEN_READY_S = 600.0
# A look at least this often while waiting, pidfd or not (new holders, the device).
RESCAN_S = 5.0
# Vetoes that waiting cannot clear: the configuration makes them, not a process.
NOT_BY_WAITING = frozenset({"device-unknown"})

Look = Callable[[], Report]


def dry_look(config: Config, environ: Mapping[str, str], proc: ProcFS | None = None) -> Look:
    """The guard's dry run as a look: signals nobody, records nothing, logs nothing."""
    control = OnDemandOwnerControl(environ, config.state.dir)

    def look() -> Report:
        # The history read (never written): the holders an earlier attempt signalled.
        return run(config, dry_run=True, record=False, proc=proc, supervisors=control,
                   log=Logger(quiet=True), history=open_history)

    return look


def waitable(verdict: Verdict) -> bool:
    """A veto that may clear by itself: not ``unknown``, no reason the configuration makes."""
    return verdict.kind == "veto" and not any(r.code in NOT_BY_WAITING for r in verdict.reasons)


def named(reasons: Sequence[Reason]) -> list[Reason]:
    """The reasons about one holder, each holder once (its first reason)."""
    seen: set[int] = set()
    out = []
    for r in reasons:
        if r.pid is not None and r.pid not in seen:
            seen.add(r.pid)
            out.append(r)
    return out


def still_there(verdict: Verdict) -> str:
    """What still stands in the way, in one line: the holders the reasons name, or the reasons."""
    who = [f"pid {r.pid} {r.comm or '?'} ({r.code})" for r in named(verdict.reasons)]
    others = [r.text for r in verdict.reasons if r.pid is None]
    return "; ".join(who + others) or "; ".join(verdict.texts) or verdict.kind


def _still_saving(report: Report) -> tuple[Reason, ...]:
    """The holders an earlier attempt signalled, still running: the suspend's drain would
    wait for them and send none a second signal, so they are waited for here first."""
    return tuple(
        Reason("timeout-after-sigint", (
            f"pid {h.holder.pid} {h.holder.comm} still runs after the drain of attempt "
            f"{report.signalled_before[holder_id(h.holder)]} (its save, perhaps): it gets no "
            "second signal"), h.holder.pid, h.holder.comm)
        for h in report.holders if holder_id(h.holder) in report.signalled_before)


def wait_for_exits(proc: ProcFS, holders: Sequence[tuple[int, int]], timeout: float,
                   wake: Callable[[], bool] | None = None) -> list[int]:
    """Sleep until one of ``holders`` (pid, start time) exits or ``timeout`` passes; the pids
    found gone. A holder already gone (or its pid now another process's) counts as gone at
    once. ``wake``: asked about once a second, True ends the wait early."""
    fds: dict[int, int] = {}
    try:
        for pid, start in holders:
            # Readable at once when that process is gone; None: no pidfd here (the bound
            # and the next look cover it).
            fd = pidfd_on(proc, pid, start)
            if fd is not None:
                fds[fd] = pid
        until = time.monotonic() + max(0.0, timeout)
        while True:
            left = until - time.monotonic()
            if left <= 0:
                return []
            step = min(left, 1.0) if wake is not None else left
            ready, _, _ = select.select(list(fds), [], [], step)
            if ready:
                return [fds[fd] for fd in ready]
            if wake is not None and wake():
                return []
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


@dataclass(frozen=True, slots=True)
class Ready:
    """How a wait ended: ``ready`` True when the last look would allow."""

    ready: bool
    report: Report
    waited_s: float
    why: str  # when not ready: what ended the wait, in words
    stopped: bool = False  # ``stop`` ended it: its last answer, after the last look


def wait_ready(look: Look, bound_s: float, say: Callable[[str], None],
               proc: ProcFS | None = None, rescan_s: float = RESCAN_S,
               stop: Callable[[], str | None] | None = None,
               starts: Mapping[int, int] | None = None) -> Ready:
    """Look, and wait while the look vetoes for causes that may clear, at most ``bound_s``.

    ``say``: one line of progress (what is waited for, each holder that left).
    ``stop``: asked after each look that vetoes and about once a second while
    waiting; a string ends the wait (not ready, ``stopped``) with that as its why. Said
    while waiting, it only cuts the wait short: the look that follows asks it again, and
    that answer counts (the lid opened and closed again within a second ends nothing).
    ``starts``: the start time of pids known from earlier (to confirm a pidfd names the
    same process).
    """
    proc = proc or ProcFS()
    begun = time.monotonic()
    until = begun + bound_s
    shown: tuple[str, ...] | None = None
    while True:
        report = look()
        verdict = report.verdict
        if verdict.kind == "allow" and (saving := _still_saving(report)):
            verdict = Verdict("veto", saving)  # waited for as a veto that may clear
        waited = time.monotonic() - begun
        if verdict.kind == "allow":
            return Ready(True, report, waited, "")
        if not waitable(verdict):
            word = "cannot tell" if verdict.kind == "unknown" else "would veto"
            return Ready(False, report, waited,
                         f"the guard {word}, and waiting cannot change it: {still_there(verdict)}")
        why = stop() if stop is not None else None
        if why:
            return Ready(False, report, waited, why, stopped=True)
        left = until - time.monotonic()
        if left <= 0:
            return Ready(False, report, waited,
                         f"still there after {bound_s:g} s: {still_there(verdict)}")
        holders = named(verdict.reasons)
        now = tuple(str(r.pid) for r in holders) or tuple(r.code for r in verdict.reasons)
        if now != shown:
            say(f"waiting (up to {left:.0f} s more) for: {still_there(verdict)}")
            shown = now
        known = {**(starts or {}), **{h.holder.pid: h.holder.start_time for h in report.holders}}
        pids = [(r.pid, known[r.pid]) for r in holders if r.pid is not None and r.pid in known]
        gone = wait_for_exits(proc, pids, min(rescan_s, left),
                              wake=None if stop is None else lambda: bool(stop()))
        for pid in gone:
            comm = next((r.comm for r in holders if r.pid == pid), None) or "?"
            say(f"pid {pid} {comm} has left ({time.monotonic() - begun:.0f} s)")
