"""``[notify] retry``: after a transient veto of a sleep logind started, ask again once it cleared.

Which vetoes: those of the veto unit (origin ``unit``) whose every reason
is one that ends by itself, :data:`TRANSIENT_CODES`: a job still running
after its wait for SIGINT (it was signalled and is on its way out), the
device still busy after the drain. A veto with any other reason
(protected, ignores SIGINT, frozen, ...) is certain and is never retried.

While what: logind must still want the machine asleep (system/dbus/wish.py):
the lid is still closed and the lid setting that applies now says this
sleep; or nobody has used the machine since the veto (``IdleHint``, idle
since before it): the idle action, and a key pressed by someone who walked
away. The loop ends when that stops being so (the lid opened, a user came
back), when the sleep it asked for happened, after ``bound_s``, or after
:data:`MAX_TRIES` sleeps asked for. Between looks it sleeps on the
holders' pidfds (guard/ready.py); it signals nobody itself: the sleep it
asks for runs the veto unit, which drains as always.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from suspendguard.errors import EXIT_ALLOW, EXIT_ERROR, EXIT_VETO
from suspendguard.guard.ready import RESCAN_S, Look, wait_for_exits, wait_ready
from suspendguard.model import Unavailable
from suspendguard.record import Attempt
from suspendguard.system.dbus.logind import SleepJob
from suspendguard.system.dbus.wish import LogindWish
from suspendguard.system.procfs import ProcAccessError, ProcFS

TRANSIENT_CODES = frozenset({"timeout-after-sigint", "device-busy"})
# How long a retry waits for the cause to clear, by default (seconds).
RETRY_FOR_S = 900.0
# Sleeps asked for at most, the first veto not counted: never a loop.
MISSES = 3  # logind's answers missed in a row while waiting, before the retry gives up
MAX_TRIES = 3
# How long a sleep in progress (logind's PreparingForSleep) is waited out before asking.
SETTLE_S = 60.0


def why_not_retried(attempt: Attempt) -> str | None:
    """None when ``attempt`` is a veto worth retrying, else why not (in words)."""
    if attempt.origin != "unit" or attempt.dry_run:
        return f"attempt {attempt.id} was not the veto unit's ({attempt.origin})"
    if attempt.result != "veto":
        return f"attempt {attempt.id} ended {attempt.result}, not in a veto"
    codes = {r.code for r in attempt.verdict.reasons}
    certain = sorted(codes - TRANSIENT_CODES)
    if not codes or certain:
        return (f"attempt {attempt.id} was vetoed for a cause that does not end by itself: "
                + ", ".join(certain or ["no reason recorded"]))
    return None


def still_wants(wish: LogindWish, action: str, vetoed_at: float) -> str | None:
    """Why logind still wants ``action`` now, or None when it no longer does."""
    if wish.lid_closed and wish.lid_action == action:
        return f"the lid is closed (logind: {action} on lid close)"
    # IdleSinceHint 0 with IdleHint on: idle since logind started (systemd 252 with no
    # session, the headless node whose IdleAction sleeps).
    if wish.idle_hint and wish.idle_since_usec <= vetoed_at * 1_000_000:
        return "nobody has used the machine since the veto"
    return None


def no_longer(wish: LogindWish, action: str) -> str:
    """What logind says now, once it no longer wants ``action`` (lid and idle both)."""
    lid = ("the lid is open" if not wish.lid_closed
           else f"on the closed lid logind does {wish.lid_action or 'nothing'} now")
    idle = ("the machine is in use (logind's IdleHint is off)" if not wish.idle_hint
            else "it was used after the veto (logind's IdleSinceHint)")
    return f"{lid}, and {idle}"


@dataclass(frozen=True, slots=True)
class Retried:
    status: int  # the command's exit status
    line: str  # what became of it, in one line


Wish = Callable[[], LogindWish | Unavailable]
Request = Callable[[str], SleepJob | Unavailable]
Latest = Callable[[float], Attempt | None]  # the veto unit's attempt since a time, if any


def _left_running(attempt: Attempt) -> list[tuple[int, int]]:
    """The holders the attempt's wait after SIGINT ended on: pid and start time."""
    pids = {r.pid for r in attempt.verdict.reasons if r.code == "timeout-after-sigint"}
    return [(h.holder.pid, h.holder.start_time) for h in attempt.holders
            if h.holder.pid in pids]


def _alive(proc: ProcFS, pid: int, start: int) -> bool:
    """Still that process, and not yet exited (a zombie holds nothing: its parent has yet
    to reap it). A zombie leader whose other threads live on has not exited: they hold
    its fds."""
    try:
        st = proc.stat(pid)
    except ProcAccessError:
        return True
    if st is None or st.start_time != start:
        return False
    if st.state not in ("Z", "X"):
        return True
    at = proc.open_dir(pid)
    if at is None:
        return False
    try:
        return proc.thread_count(at) > 1
    finally:
        os.close(at)


def _settled(wish: Wish) -> LogindWish | Unavailable | None:
    """logind's state once no sleep is in progress (``PreparingForSleep``); None when one
    still is after :data:`SETTLE_S`."""
    settle = time.monotonic() + SETTLE_S
    while True:
        got = wish()
        if isinstance(got, Unavailable) or not got.preparing_for_sleep:
            return got
        if time.monotonic() >= settle:
            return None
        time.sleep(0.5)


@dataclass
class _Stop:
    """Whether the retry stops waiting, from what logind says (``got``, else asked now); why."""

    wish: Wish
    action: str
    vetoed_at: float
    # The last answer only: logind could not be asked. One that failed while waiting and
    # answered at the next look is no failure of the retry.
    failed: bool = False
    missed: list[str] = field(default_factory=list)  # answers missed in a row while waiting

    def __call__(self, got: LogindWish | Unavailable | None = None) -> str | None:
        polled, got = got is None, self.wish() if got is None else got
        self.failed = False
        if isinstance(got, Unavailable) and polled and len(self.missed) + 1 < MISSES:
            self.missed.append(got.reason)  # logind busy a moment (another sleep's fan-out)
            return None
        self.missed.clear()
        if isinstance(got, Unavailable):
            self.failed = True
            return f"logind cannot be asked: {got.reason}"
        if still_wants(got, self.action, self.vetoed_at) is None:
            return f"logind no longer wants to sleep: {no_longer(got, self.action)}"
        if got.blockers:  # asked as root, the sleep would pass them
            return (f"{got.blockers[0]} holds a lock on sleep, which logind's own "
                    f"{self.action} obeys")
        return None


def retry(attempt: Attempt, action: str, bound_s: float, *, look: Look, wish: Wish,
          request: Request, latest: Latest, say: Callable[[str], None],
          proc: ProcFS | None = None, rescan_s: float = RESCAN_S,
          max_tries: int = MAX_TRIES) -> Retried:
    """Wait for the vetoed attempt's cause to clear while logind still wants ``action``,
    then ask for it again; see the module's doc for when it stops."""
    proc = proc or ProcFS()
    why = why_not_retried(attempt)
    if why is not None:
        return Retried(EXIT_ALLOW, f"no retry: {why}")
    until = time.monotonic() + bound_s
    vetoed_at = attempt.finished or attempt.started
    stop = _Stop(wish, action, vetoed_at)

    def ended(line: str) -> Retried:
        return Retried(EXIT_ERROR if stop.failed else EXIT_ALLOW, line)

    for tries in range(max_tries):
        running = _left_running(attempt)
        if running:
            shown = ", ".join(f"pid {pid}" for pid, _ in running)
            say(f"retry: waiting for {shown} to end, still running after SIGINT "
                f"(attempt {attempt.id})")
        while running:
            why = stop()
            if why:
                return ended(f"no retry: {why}")
            left = until - time.monotonic()
            if left <= 0:
                return Retried(EXIT_VETO, f"gave up after {bound_s:g} s: still running after "
                                          f"SIGINT: {', '.join(f'pid {p}' for p, _ in running)}")
            wait_for_exits(proc, running, min(rescan_s, left))
            running = [(p, s) for p, s in running if _alive(proc, p, s)]
        ready = wait_ready(look, max(0.0, until - time.monotonic()), say, proc=proc,
                           rescan_s=rescan_s, stop=stop)
        if not ready.ready:
            # Only logind's answer after the last look ends it as no retry: one it gave while
            # waiting (the lid opened and closed again) was asked again at that look.
            if ready.stopped:
                return ended(f"no retry: {ready.why}")
            return Retried(EXIT_VETO, f"gave up: {ready.why}")
        got = _settled(wish)
        if got is None:  # logind answered: it is the sleep in progress that never ended
            return Retried(EXIT_VETO, f"gave up: logind kept a sleep in progress for {SETTLE_S:g} s")
        # The look that allowed may come seconds after the last ask (or be the first look
        # of all): the lid may have been opened meanwhile.
        why = stop(got)
        if why:
            return ended(f"no retry: {why}")
        slept = latest(vetoed_at)  # asked by someone else: the machine woke since, for a reason
        if slept is not None and slept.result == "allow":
            return ended(f"no retry: attempt {slept.id} let a {slept.action} go ahead since the "
                         "veto, and the machine woke again")
        since = time.time() - 1.0
        say(f"retry: the cause has cleared; asking logind to {action} again "
            f"(try {tries + 1} of {max_tries})")
        job = request(action)
        if isinstance(job, Unavailable):
            return Retried(EXIT_ERROR, f"gave up: logind did not take the {action}: {job.reason}")
        if job.done:
            return Retried(EXIT_ALLOW, f"retried: the {action} went ahead (try {tries + 1})")
        again = latest(since)
        if again is not None and again.result in ("unknown", "interrupted"):
            # The guard refused it, not as a veto that ends by itself: never asked for again.
            first = (again.verdict.reasons[0].text if again.verdict.reasons
                     else "no reason recorded")
            return Retried(EXIT_VETO, f"gave up: attempt {again.id} refused the {action} "
                                      f"({again.result}): {first}")
        if again is None or again.result != "veto":
            return Retried(EXIT_ERROR, f"gave up: the {action} ended '{job.result}' and the "
                                       "guard recorded no veto for it")
        why = why_not_retried(again)
        if why is not None:
            return Retried(EXIT_VETO, f"gave up: {why}")
        attempt = again
        vetoed_at = stop.vetoed_at = again.finished or again.started
    return Retried(EXIT_VETO, f"gave up: vetoed again {max_tries} times (attempt {attempt.id})")
