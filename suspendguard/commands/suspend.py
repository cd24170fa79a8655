"""``suspendguard suspend [--hibernate|...] [--dry-run] [--when-ready[=S]]``: sleep through logind,
then say what happened.

``systemctl suspend`` returns 0 even when the guard vetoed (logind works
asynchronously; systemd issue 6479). This command asks logind the same way,
follows the sleep job through systemd until it ends, and reads the outcome
from the history: the attempt the veto unit recorded (verdict and reasons)
and the sleep hook's pre and post records (when it went down, when it came
back). Exit 0 slept, 1 vetoed, 3 when logind or systemd refused or failed,
or the sleep failed after the guard allowed it.

``--when-ready`` first waits (guard/ready.py), at most S seconds, until the
guard's dry run would allow: until the holders that would veto (a
protected job, one that ignores SIGINT ...) have left by themselves. Those
the drain would stop are left to the drain, as without it. It gives up with
exit 1, naming the holders still there.
"""

from __future__ import annotations

import argparse
import shlex
import time
from dataclasses import dataclass

from suspendguard.commands.context import Context
from suspendguard.config import Config
from suspendguard.errors import EXIT_ALLOW, EXIT_ERROR, EXIT_VETO, HistoryError, OperationalError
from suspendguard.guard.ready import dry_look, wait_ready
from suspendguard.guard.run import run_guard
from suspendguard.model import Unavailable
from suspendguard.record import Attempt
from suspendguard.store import mode as guard_mode
from suspendguard.store.history import History
from suspendguard.system.dbus.bus import system_bus_address
from suspendguard.system.dbus.logind import SLEEP_METHODS, SleepJob, can_sleep, request_sleep
from suspendguard.system.terminal import safe, when

# Awake time the sleep job may take beyond the guard's own deadline: logind's
# delay locks, the sleep hooks (systemd-sleep gives them 90 s), the services
# ordered around the sleep. Time asleep does not count (monotonic clock).
FOLLOW_MARGIN_S = 150.0

SLEPT = {"suspend": "suspended", "hibernate": "hibernated", "hybrid-sleep": "went to hybrid sleep",
         "suspend-then-hibernate": "suspended (then hibernate)"}


def _event_time(attempt: Attempt | None, phase: str) -> float | None:
    """When the sleep hook recorded ``phase`` for this attempt: the first going down, the
    last resume (suspend-then-hibernate records both at each of its steps)."""
    if attempt is None:
        return None
    times = [e.time for e in attempt.events if e.phase == phase]
    return (times[0] if phase == "pre" else times[-1]) if times else None


@dataclass(frozen=True, slots=True)
class Observed:
    """Observe mode's look at this sleep: no attempt of the guard's, but the sleep hook's
    records and the findings after resume are kept with it."""

    look: Attempt

    def __str__(self) -> str:
        return f"observe mode (suspendguard mode): {_observed(self.look)}"


def unit_attempt(config: Config, action: str, since: float) -> Attempt | Observed | str:
    """The guard's attempt for this sleep (recorded by the veto unit; an older
    version's sleep hook drained as a fallback), or why there is none to read: in
    observe mode, the unit's look; in off mode, that it did not look."""
    looked = None
    try:
        with History.open(config.state.dir, readonly=True) as history:
            attempt = history.last_real_attempt(action=action, since=since)
            if attempt is None:
                looked = history.last_observed(action, since)
    except HistoryError as exc:
        attempt, missing = None, f"the guard's record could not be read: {exc}"
    else:
        missing = f"the guard recorded no attempt for this {action} in {config.state.dir}"
    if attempt is not None:
        return attempt
    mode = guard_mode.read(config.state.dir)
    if mode.name == "off":
        return (f"the guard is off (suspendguard mode): it did not look at this {action} "
                "(suspendguard mode enforce turns it on)")
    if mode.name == "observe" and looked is not None:
        return Observed(looked)
    return f"{missing} (is it installed? suspendguard status)"


# What an enforced run would have done, by the verdict of observe mode's look.
WOULD = {"allow": "allowed it", "veto": "vetoed it", "unknown": "refused it (unknown)"}


def _observed(looked: Attempt) -> str:
    """What the veto unit's look in observe mode found, which let the sleep go whatever it was."""
    if looked.result not in WOULD:  # the look did not finish
        found = f"the guard's look (attempt {looked.id}) ended {looked.result}"
    else:
        why = f": {looked.reasons[0]}" if looked.result != "allow" and looked.reasons else ""
        found = (f"the guard only looked (attempt {looked.id}) and would have "
                 f"{WOULD[looked.result]}{why}")
    return f"{found}; it signalled nobody and refused nothing"


def _slept(job: SleepJob, found: Attempt | Observed | str, ctx: Context) -> int:
    attempt = found if isinstance(found, Attempt) else None
    looked = found.look if isinstance(found, Observed) else attempt
    down = _event_time(looked, "pre")
    up = _event_time(looked, "post") or job.ended
    went = f"{SLEPT[job.action]} at {when(down)}" if down else SLEPT[job.action]
    ctx.out.write(f"{went}, resumed at {when(up)}\n")
    if attempt is None:
        ctx.out.write(f"  ! {safe(str(found))}\n")
        if looked is not None:
            _findings(looked, ctx)
        return EXIT_ALLOW
    drained = sum(1 for h in attempt.holders if h.outcome.kind == "exited")
    by = "the guard" if attempt.origin == "unit" else f"the guard ({attempt.origin})"
    ctx.out.write(f"  attempt {attempt.id}: {by} allowed it"
                  + (f", {drained} holder(s) drained" if drained else "") + "\n")
    if attempt.origin != "unit":
        ctx.out.write("  ! the veto unit did not run for this sleep: nothing was drained and "
                      "nothing could have stopped it (suspendguard status)\n")
    for warning in attempt.warnings:
        ctx.out.write(f"  ! {safe(warning)}\n")
    _findings(attempt, ctx)
    return EXIT_ALLOW


def _findings(attempt: Attempt, ctx: Context) -> None:
    rules = sorted({f.rule for f in attempt.findings})
    if rules:
        ctx.out.write(f"  after resume, the device logs show: {', '.join(rules)} "
                      "(suspendguard logs --since last-attempt)\n")


def _not_slept(job: SleepJob, found: Attempt | Observed | str, ctx: Context) -> int:
    service = f"systemd-{job.action}.service"
    if isinstance(found, Attempt) and found.result != "allow":
        first, *rest = found.reasons or (f"the guard's attempt ended {found.result}",)
        word = "vetoed" if found.result == "veto" else f"refused ({found.result})"
        ctx.out.write(f"{word}: {safe(first)}\n")
        for reason in rest:
            ctx.out.write(f"  - {safe(reason)}\n")
        config = f" --config {shlex.quote(ctx.config_arg)}" if ctx.config_arg else ""
        ctx.out.write(f"  attempt {found.id}; more: suspendguard{config} history {found.id}, "
                      f"journalctl -u suspendguard@{job.action}.service\n")
        return EXIT_VETO
    if isinstance(found, Attempt):
        ctx.out.write(f"the {job.action} failed after the guard allowed it (attempt {found.id}): "
                      f"systemd ended the {job.target} job with result '{job.result}'; "
                      f"see journalctl -b -u {service}\n")
    elif job.result == "dependency":
        # A unit the sleep needs failed before it: the veto unit, which recorded nothing
        # (its history could not be written), or one beside it. The sleep's own never ran.
        ctx.out.write(f"the {job.action} did not happen: a unit it needs failed (systemd ended "
                      f"the {job.target} job with result 'dependency'); {safe(str(found))}; see "
                      f"journalctl -b -u suspendguard@{job.action}.service\n")
    else:
        ctx.out.write(f"the {job.action} did not happen: systemd ended the {job.target} job with "
                      f"result '{job.result}'; {safe(str(found))}; see journalctl -b -u "
                      f"{service}\n")
    return EXIT_ERROR


def suspend(args: argparse.Namespace, ctx: Context) -> int:
    action: str = args.action
    config = ctx.config()
    address = system_bus_address(ctx.environ)
    if args.dry_run:
        status = run_guard(ctx, True, None, "cli", False)
        can = can_sleep(action, address=address)
        said = can.reason if isinstance(can, Unavailable) else (
            f"logind: Can{SLEEP_METHODS[action]} says {can}")
        ctx.out.write(f"\n{said}; dry run: no {action} asked for\n")
        return status
    if args.when_ready is not None:
        refused = _wait_until_ready(args.when_ready, action, ctx)
        if refused is not None:
            return refused
    since = time.time() - 1.0
    ctx.err.write(f"suspendguard: asking logind to {action}; waiting for the sleep to end\n")
    ctx.err.flush()
    job = request_sleep(action, config.drain.deadline_s + FOLLOW_MARGIN_S, address)
    if isinstance(job, Unavailable):
        raise OperationalError(f"suspend: {job.reason}")
    found = unit_attempt(config, action, since)
    return _slept(job, found, ctx) if job.done else _not_slept(job, found, ctx)


def _wait_until_ready(bound_s: float, action: str, ctx: Context) -> int | None:
    """None once the guard would allow; else the exit status, the holders still there said."""
    def say(line: str) -> None:
        ctx.err.write(f"suspendguard: {safe(line)}\n")
        ctx.err.flush()

    ready = wait_ready(dry_look(ctx.config(), ctx.environ), bound_s, say)
    if ready.ready:
        if ready.waited_s >= 1.0:
            say(f"ready after {ready.waited_s:.0f} s")
        return None
    verdict = ready.report.verdict
    ctx.out.write(f"gave up waiting to {action}: {safe(ready.why)}\n")
    for reason in verdict.texts:
        ctx.out.write(f"  - {safe(reason)}\n")
    ctx.out.write(f"  no {action} asked for; more: suspendguard check\n")
    return verdict.exit_status if verdict.kind == "unknown" else EXIT_VETO
