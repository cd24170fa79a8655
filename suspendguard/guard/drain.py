"""Ask holders to stop, race-free, and wait for each exit as it happens.

A pidfd is opened per holder and the start time re-read through /proc after
it: if it differs from the scanned one the PID was recycled and the process
behind it is never signalled. The wait is one poll() over every pidfd (and
the guard's own wake-up pipe), so an exit is seen the moment it happens.
"""

from __future__ import annotations

import select
import signal
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from suspendguard.config import EscalationStep
from suspendguard.guard.handles import POLL_S, UNSIGNALLABLE, Target, pidfd_open, send, take
from suspendguard.guard.held import Held
from suspendguard.guard.job_stop import ASK_MIN_S, NO_JOBS, JobStop, forward
from suspendguard.guard.jobs import Launcher
from suspendguard.model import Holder, HolderId, Outcome, holder_id
from suspendguard.system.deadline import Cancel, Deadline
from suspendguard.system.procfs import ProcFS

Log = Callable[[str], None]

# The scan before the drain eats into the deadline too; a cut below this is
# that, not worth a warning.
CUT_TOLERANCE_S = 0.1
# What each round of the drain is given to wait at least, within the run's deadline
# (run_state.py); with less than NO_WAIT_S of its round left, nobody is signalled.
MIN_WAIT_S = 0.5
NO_WAIT_S = 0.1

# How long a launcher continued once its ranks left has to exit at least, past the wait's
# end: it was stopped a moment ago, and DeepSpeed's and msrun's poll their ranks about once
# a second.
CONTINUED_S = 3.0

VETO_ANYWAY = "veto anyway: nobody is signalled"  # another's veto is certain


@dataclass(frozen=True, slots=True)
class DrainResult:
    outcomes: dict[HolderId, Outcome]
    wait_s: float = 0.0  # how long the wait after the signal could last
    shortened: bool = False  # the deadline cut that wait below ``timeout_s``
    unforwarded: frozenset[HolderId] = frozenset()  # ranks signalled here: their launcher was not
    # Launchers held while their ranks left, still running once continued: they may start
    # them again.
    lingering: tuple[Launcher, ...] = ()
    warnings: tuple[str, ...] = ()  # what ``reached`` answered: the signal not written down
    # Each launcher that took the signal to forward, and when (a start time's clock ticks).
    forwarded_at: Mapping[HolderId, int] = field(default_factory=dict)


def drain(
    holders: Sequence[Holder],
    signame: str,
    timeout_s: float,
    deadline: Deadline,
    escalate: Sequence[EscalationStep] = (),
    *,
    proc: ProcFS | None = None,
    log: Log = lambda _msg: None,
    progress_every_s: float = 5.0,
    opener: Callable[[int], int] = pidfd_open,
    keep: Callable[[Sequence[Holder]], None] | None = None,
    jobs: JobStop = NO_JOBS,
    reached: Callable[[Sequence[Holder]], str] = lambda _holders: "",
) -> DrainResult:
    """Signal every holder at once, then wait until all exit or time runs out.

    The whole drain, escalation included, ends by ``deadline`` (its clock,
    and its cancel: the guard's SIGTERM). ``keep``, when given, is handed
    the holders once they are watched and before any signal: it asks their
    supervisors not to start them again (every holder is signalled here all
    the same). ``jobs``: who of them gets the signal from their launcher
    instead, or leaves with a parent, and which launchers are stopped
    meanwhile; each process is signalled once at most, and every holder is
    waited for. ``reached`` is handed the holders each signal reached before
    the wait after it (the history's note: a guard killed in that wait leaves
    who got the signal, and the next attempt sends none again); it answers a
    warning, or "". One holder that cannot be taken (pidfd, start time): nobody is signalled.
    """
    proc = proc or ProcFS()
    watch = _Drain(deadline, log, progress_every_s, reached)
    for holder in holders:
        taken = take(holder, signame, proc, opener)
        if isinstance(taken, Outcome):
            watch.outcomes[holder_id(holder)] = taken
        else:
            watch.targets[taken.pidfd if taken.pidfd >= 0 else -1 - len(watch.targets)] = taken
    try:
        # One that cannot be signalled vetoes (left_running.py): a signal would end jobs for nothing.
        if watch.targets and any(o.why.startswith(UNSIGNALLABLE) for o in watch.outcomes.values()):
            return watch.unsignalled(VETO_ANYWAY)
        if keep is not None and watch.targets:
            keep([t.holder for t in watch.targets.values()])
        # The run's time spent (the supervisors' keep-down, a daemon-reload, an engine's
        # API, may take what was left), or the guard stopped meanwhile: a signal with no
        # wait after it loses the job's work for a veto all the same.
        if watch.targets and deadline.left() < NO_WAIT_S:
            return watch.unsignalled(f"{UNSIGNALLABLE}: no time was left of [drain] "
                                     "deadline_s to wait for it")
        if deadline.cancelled:  # the guard's SIGTERM, SIGINT or SIGHUP: nobody is signalled
            return watch.unsignalled(deadline.cancel_reason)
        for target in watch.targets.values():
            target.quiet = jobs.quiet.get(holder_id(target.holder), "")
            target.reached = holder_id(target.holder) in jobs.reached  # an earlier forward
        unforwarded, forwarded_at = forward(jobs, watch.targets, signame, proc, opener, log)
        watch.note_reached()
        if jobs.hold and jobs.held is not None:
            for launcher in jobs.held.hold(jobs.hold):
                log(f"stopped {launcher.label} (SIGSTOP) while its ranks leave: it continues "
                    "once they left")
        watch.send_all(signame, jobs)
        watch.note_reached()
        wait_s, shortened = watch.first_wait(signame, timeout_s, jobs.held)
        watch.escalate(escalate, signame, jobs.held)
        watch.time_out()
        lingering = watch.continued(jobs.held)
    finally:  # said once where they were continued early (first_wait)
        _release(jobs.held, log if watch.resumed_at is None else lambda _msg: None)
        for target in watch.targets.values():
            target.close()
    return DrainResult(watch.outcomes, wait_s, shortened, unforwarded, lingering,
                       tuple(watch.warnings), forwarded_at)


class _Drain:
    """The holders being drained, keyed by pidfd (negative keys for those without one),
    and the outcomes of those that left the watch."""

    def __init__(self, deadline: Deadline, log: Log, progress_every_s: float,
                 reached: Callable[[Sequence[Holder]], str] = lambda _holders: "") -> None:
        self.deadline = deadline
        self.reached = reached
        self.noted: set[HolderId] = set()  # those handed to ``reached`` already
        self.warnings: list[str] = []
        self.clock = deadline.clock
        self.log = log
        self.progress_every_s = progress_every_s
        self.targets: dict[int, Target] = {}
        self.outcomes: dict[HolderId, Outcome] = {}
        self.deferred: dict[int, Callable[[float], str]] = {}  # asks waiting for others to leave
        self.jobs = NO_JOBS
        self.until = deadline.at  # the end of the wait after the signal
        self.resumed_at: float | None = None  # when the held launchers were continued early

    def unsignalled(self, why: str) -> DrainResult:
        """The drain ended before any signal: each holder it watched, not signalled."""
        for target in self.targets.values():
            self.outcomes[holder_id(target.holder)] = Outcome("not-signalled", why=why)
        return DrainResult(self.outcomes, 0.0, False)

    def running(self) -> set[HolderId]:
        return {holder_id(t.holder) for t in self.targets.values()}

    def ask_due(self, until: float) -> None:
        """Each deferred ask whose holders have left, sent now, within the wait ending at ``until``."""
        for key, ask in list(self.deferred.items()):
            target = self.targets.get(key)
            if target is None or self.jobs.due(holder_id(target.holder), self.running()):
                del self.deferred[key]
                if target is not None:
                    self._ask(key, target, ask, until)

    def send_all(self, signame: str, jobs: JobStop) -> None:
        """The signal to each holder not left quiet; a request to each asked its own way."""
        signum = int(signal.Signals[signame])
        self.jobs = jobs
        # The signals first, then the asks: an ask runs a child and waits for its answer,
        # which no holder after it should wait for.
        for key, target in sorted(self.targets.items(),
                                  key=lambda kv: holder_id(kv[1].holder) in jobs.asks):
            target.signalled_at = self.clock()
            if holder_id(target.holder) in jobs.earlier:
                target.last_signal = "this drain began"  # its signal was an earlier attempt's
            elif holder_id(target.holder) in jobs.forwarded:
                target.last_signal = "this round began"  # its signal was an earlier round's
            if target.quiet or target.sent:
                continue
            ask = jobs.asks.get(holder_id(target.holder))
            if ask is not None:  # the signals sent are written down before an ask's wait
                self.note_reached()
            if ask is not None and not jobs.due(holder_id(target.holder), self.running()):
                target.quiet = f"{jobs.asked_as} once the processes it started left"
                target.last_signal = "the drain began"  # nothing sent to it yet
                self.deferred[key] = ask
            elif ask is not None:
                self._ask(key, target, ask, self.until)
            elif (refused := send(target, signum)) is not None:
                self._drop(key, refused)
            else:
                target.reached = True
        self.ask_due(self.until)  # those it waited for may have been refused the signal

    def note_reached(self) -> None:
        """Hand ``reached`` the holders a signal reached since it was last asked."""
        new = [t.holder for t in self.targets.values()
               if t.reached and holder_id(t.holder) not in self.noted]
        if new:
            self.noted.update(map(holder_id, new))
            if warning := self.reached(new):
                self.warnings.append(warning)

    def _ask(self, key: int, target: Target, ask: Callable[[float], str], until: float) -> None:
        asked_as, left = self.jobs.asked_as, until - self.clock()  # bounds the ask (job_stop.py)
        if left < ASK_MIN_S:
            why = f"not asked: no time was left of the wait for {asked_as}"
        else:
            error = ask(left)
            why = f"{asked_as} failed: {error}" if error else ""
        if why:
            self._drop(key, Outcome("not-signalled", why=f"{UNSIGNALLABLE}: {why}"))
            return
        target.quiet = f"after {asked_as}"
        target.last_signal = asked_as
        self.log(f"sent {asked_as} to pid {target.holder.pid} {target.holder.comm}")

    def _drop(self, key: int, outcome: Outcome) -> None:
        target = self.targets.pop(key)
        self.outcomes[holder_id(target.holder)] = outcome
        target.close()

    def first_wait(self, signame: str, timeout_s: float,
                   held: Held | None = None) -> tuple[float, bool]:
        """Wait up to ``timeout_s`` after the signal, cut to the deadline: (the wait, whether cut).

        A held launcher that holds a node itself leaves only once continued, its
        signal pending meanwhile: it is continued as soon as it is all that is left. One
        the hold could not stop (no pidfd: a kernel before 5.3) is signalled then too: its
        one signal, after its ranks' (sent beside them, it would kill them mid-save).
        """
        now = self.clock()
        until = self.until = min(now + timeout_s, self.deadline.at)
        wait_s = max(0.0, until - now)
        shortened = until < now + timeout_s - CUT_TOLERANCE_S
        sent = [t for t in self.targets.values() if not t.quiet]
        if sent:
            names = ", ".join(f"{t.holder.pid} {t.holder.comm}" for t in sent)
            cut = f" (cut from {timeout_s:g} s to end within the deadline)" if shortened else ""
            self.log(f"sent {signame} to {len(sent)} holder(s): {names}; "
                     f"waiting up to {wait_s:.1f} s{cut}")
        self.wait(until, self._held(held))
        self._continue_held(signame, held, until)
        return wait_s, shortened

    def _held(self, held: Held | None) -> set[HolderId]:
        """The held launchers not continued yet: none gets a signal before its ranks left."""
        if held is None or self.resumed_at is not None:
            return set()
        return {lr.id for lr in self.jobs.hold}

    def _continue_held(self, signame: str, held: Held | None, until: float) -> None:
        """The held launchers continued and sent their one signal, once they are all that is
        left of the holders; then waited for until ``until``, CONTINUED_S at least."""
        if held is None or not self.targets or not self.running() <= self._held(held):
            return
        self._signal_held(signame)
        # Continued, not released: ``continued`` still waits for each held launcher, the
        # ones holding no node too (msrun, left running once its ranks left, vetoes).
        held.resume()
        self.resumed_at = self.clock()
        if held.launchers:
            self.log("continued " + ", ".join(lr.label for lr, _fd in held.launchers))
        self.wait(max(until, min(self.resumed_at + CONTINUED_S, self.deadline.at)))

    def _signal_held(self, signame: str) -> None:
        """Each held launcher left, that holds a node itself, its ranks gone: its own
        signal now, which it acts on once continued (never while a rank still saves), or at
        once where the hold could not stop it."""
        signum = int(signal.Signals[signame])
        for key, target in list(self.targets.items()):
            if holder_id(target.holder) in self.jobs.earlier:
                continue  # its signal was an earlier attempt's
            if (refused := send(target, signum)) is not None:
                self._drop(key, refused)
                continue
            target.quiet, target.last_signal, target.reached = "", signame, True
            target.signalled_at = self.clock()
        self.note_reached()

    def escalate(self, steps: Sequence[EscalationStep], signame: str,
                 held: Held | None = None) -> None:
        """Each step's signal, then its wait. A held launcher gets none while its ranks run
        (stopped, it would act on it once continued: after the veto), and its one ``signame``
        once they left, as in ``first_wait``; the steps after reach it as any holder."""
        for step in steps:
            if not self.targets or self.deadline.cancelled or self.clock() >= self.deadline.at:
                break
            stepnum = int(signal.Signals[step.signal])
            launchers = self._held(held)
            skip = launchers.union(self.jobs.asks)  # asked their own way, or held: not yet
            aimed = [t for t in self.targets.values() if holder_id(t.holder) not in skip]
            for target in aimed:
                target.last_signal = step.signal
                target.escalated = True
                target.reached |= send(target, stepnum) is None
            self.note_reached()
            self.log(f"escalating: sent {step.signal} to {len(aimed)} holder(s) still running")
            until = min(self.clock() + step.wait_s, self.deadline.at)
            self.wait(until, launchers)
            self._continue_held(signame, held, until)

    def continued(self, held: Held | None) -> tuple[Launcher, ...]:
        """Once every holder left, the held launchers continued and waited for until the
        wait's end, CONTINUED_S at least: those still running (none when a holder is left:
        that vetoes already)."""
        if held is None or not held.launchers or self.targets:
            return ()
        names = ", ".join(lr.label for lr, _fd in held.launchers)
        since = self.resumed_at if self.resumed_at is not None else self.clock()
        until = max(self.until, min(since + CONTINUED_S, self.deadline.at))
        cancel = self.deadline.cancel
        running = held.release(until, self.clock, cancel.fd if cancel is not None else None)
        if self.resumed_at is None:
            self.log(f"continued {names}")
        return tuple(running)

    def time_out(self) -> None:
        """Every holder still watched: a timeout, with what it was last sent."""
        for target in self.targets.values():
            waited = self.clock() - target.signalled_at
            why = f"still running {waited:.1f} s after {target.last_signal}"
            if target.quiet and not target.escalated and target.last_signal not in target.quiet:
                why += f" ({target.quiet})"
            if self.deadline.cancelled:
                why += f" ({self.deadline.cancel_reason})"
            self.outcomes[holder_id(target.holder)] = Outcome("timeout", round(waited, 3), why,
                                                              target.reached)

    def wait(self, until: float, rest: Collection[HolderId] = ()) -> None:
        """Until every holder left but those in ``rest``, or ``until``."""
        _wait(self.targets, self.outcomes, until, self.deadline.cancel, self.log,
              self.progress_every_s, self.clock, rest, lambda: self.ask_due(until))


def _release(held: Held | None, log: Log) -> None:
    if held is not None and held.launchers:
        names = ", ".join(lr.label for lr, _fd in held.launchers)
        held.release()
        log(f"continued {names}")


def _wait(
    targets: dict[int, Target],
    outcomes: dict[HolderId, Outcome],
    until: float,
    cancel: Cancel | None,
    log: Log,
    progress_every_s: float,
    clock: Callable[[], float],
    rest: Collection[HolderId] = (),
    left: Callable[[], None] = lambda: None,
) -> None:
    poller = select.poll()
    polled = {key for key in targets if key >= 0}
    for key in polled:
        poller.register(key, select.POLLIN)
    if cancel is not None:
        poller.register(cancel.fd, select.POLLIN)
    next_progress = clock() + progress_every_s
    while targets and not {holder_id(t.holder) for t in targets.values()} <= set(rest):
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
        ended += [key for key, t in targets.items() if t.watch is not None and t.watch.exited()]
        for key in ended:
            target = targets.pop(key)
            target.close()
            seconds = round(now - target.signalled_at, 3)
            why = f"after escalation to {target.last_signal}" if target.escalated else target.quiet
            outcomes[holder_id(target.holder)] = Outcome("exited", seconds, why, target.reached)
            log(f"pid {target.holder.pid} {target.holder.comm} exited after {seconds:.2f} s")
        if ended:
            left()
        for key in polled - targets.keys():
            # Left, or dropped by ``left`` (an ask that failed closed its pidfd): a closed
            # fd still polled wakes every poll at once, and the wait would spin.
            poller.unregister(key)
            polled.discard(key)
        if now >= next_progress and targets:
            waiting = ", ".join(
                f"pid {t.holder.pid} {t.holder.comm} ({now - t.signalled_at:.0f} s)"
                for t in targets.values()
            )
            log(f"still waiting for {len(targets)} holder(s): {waiting}")
            next_progress = now + progress_every_s

