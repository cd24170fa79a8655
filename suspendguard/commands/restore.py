"""``restore``: the resume unit's step: check the devices, then start again the jobs the guard stopped.

The health check (suspendguard/health/) runs first, while every drained job
is still stopped; a device that stays unhealthy after the repairs keeps the
jobs stopped, recorded as held with the reason (``[resume]
restore_on_unhealthy``), until a later ``restore`` finds it healthy or
``restore --force`` starts them anyway.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from suspendguard.commands.context import open_history_or_say
from suspendguard.config import Config
from suspendguard.errors import EXIT_ERROR, HistoryError
from suspendguard.guard.held import continue_left
from suspendguard.guard.restore import Blocker, restore
from suspendguard.health.resume import AfterResume, after_resume
from suspendguard.health.resume import plan as health_plan
from suspendguard.record import Attempt, Stop
from suspendguard.store import lock as guard_lock
from suspendguard.store import progress
from suspendguard.store.history import History, Sleep, newest_sleep
from suspendguard.supervise.managers import ManagersAndEngines
from suspendguard.system import journal_ids, journald
from suspendguard.system.boot import boot_ids
from suspendguard.system.deadline import RESTORE_AFTER_RESUME_S, Deadline, bounded
from suspendguard.system.log import Logger
from suspendguard.system.procfs import ProcFS
from suspendguard.verdict import ReasonCode

if TYPE_CHECKING:
    from suspendguard.commands.context import Context

EXIT_HELD = 1
# journalctl MESSAGE_ID=... finds every "jobs held after resume" message.
HELD_MESSAGE_ID = journal_ids.HELD_AFTER_RESUME
# The reason code of jobs held after resume (docs/json-and-metrics.md).
UNHEALTHY: ReasonCode = "unhealthy-after-resume"
# How far back the kernel log is read when no attempt was recorded.
NO_ATTEMPT_LOOKBACK_S = 600.0


def health_step(config: Config, history: History, log: Logger,
                attempt: Attempt | None) -> AfterResume:
    """Check and repair, each step in the history (as events of ``attempt``, the one this
    sleep followed, if any) and the log."""
    attempt_id = attempt.id if attempt is not None else None
    since = datetime.fromtimestamp(attempt.started if attempt is not None
                                   else time.time() - NO_ATTEMPT_LOOKBACK_S)

    def step(name: str, note: str) -> None:
        log.info(f"after resume: {name}: {note}")
        try:  # the check goes on, and the jobs after it, whatever the history can keep
            history.record_event(name, attempt.action if attempt else None, note, attempt_id)
        except HistoryError as exc:
            log.warning(f"history: after resume: {name} not recorded: {exc}")

    # The logs' findings are what this resume left: they count at its first check. A later
    # restore (the jobs were held) asks the devices alone, as a repair's own check does.
    first = attempt is not None and not any(e.phase == "health" for e in attempt.events)
    outcome = after_resume(config, since, attempt.findings if attempt and first else (),
                           blockers=Blocker(config), step=step,
                           before=history.health_before(attempt.id) if attempt else None)
    try:
        history.record_health(attempt_id, outcome.final.devices)
    except HistoryError as exc:
        log.warning(f"history: the devices' health after resume not recorded: {exc}")
    for note in outcome.final.notes:
        log.info(f"after resume: {note}")
    return outcome


def check_devices(config: Config, history: History, log: Logger, sleep: Sleep,
                  pending: Sequence[Stop]) -> AfterResume | None:
    """The check after resume, said in ``status`` while it runs; None when it is off, or when
    no sleep followed the newest attempt (the resume unit runs after a refused one too) and
    no pending job waits for a check: one drained by an attempt a sleep did follow (a
    suspend refused after that resume, before this restore), or a held one, whatever came
    since."""
    if not config.resume.health_check:
        return None
    if not sleep.slept and sleep.attempt is not None:
        slept = _slept_after(history, pending)
        if slept is None and not any(s.result == "held" for s in pending):
            log.info(f"after resume: no sleep followed attempt {sleep.attempt.id} "
                     f"({sleep.attempt.result}): the devices are not checked")
            return None
        sleep = Sleep(slept)  # held jobs alone: checked with no attempt's words
    what, longest = health_plan(config)
    since = time.time()
    with progress.checking(config.state.dir, what, since, since + longest,
                           [s.owner.name for s in pending]):
        return health_step(config, history, log, sleep.attempt)


def _slept_after(history: History, pending: Sequence[Stop]) -> Attempt | None:
    """The newest attempt of a pending stop that the host went to sleep after (the hook's
    ``pre`` names it); None when there is none."""
    for attempt_id in sorted({s.attempt_id for s in pending if s.attempt_id}, reverse=True):
        attempt = history.attempt(attempt_id)
        if attempt is not None and any(e.phase == "pre" for e in attempt.events):
            return attempt
    return None


def hold(stops: Sequence[Stop], reason: str, history: History, log: Logger) -> str:
    """Keep ``stops`` stopped: each recorded as held, one journal message with its MESSAGE_ID."""
    for stop in stops:
        try:  # a full disk: the jobs stay stopped all the same, and the journal says so
            history.record_hold(stop.id, reason)
        except HistoryError as exc:
            log.warning(f"history: {stop.owner.name} held, not recorded: {exc}")
    names = ", ".join(s.owner.name for s in stops)
    message = f"{len(stops)} jobs held after resume: {reason}"
    log.warning(f"{message} ({names}); suspendguard restore --force starts them anyway")
    journald.send({"MESSAGE": f"{message} ({names})", "MESSAGE_ID": HELD_MESSAGE_ID,
                   "PRIORITY": "3", "SYSLOG_IDENTIFIER": "suspendguard",
                   "SUSPENDGUARD_HELD": str(len(stops)), "SUSPENDGUARD_REASON": reason,
                   "SUSPENDGUARD_REASON_CODE": UNHEALTHY})
    return message


def command(args: argparse.Namespace, ctx: Context) -> int:
    """0 when every job was started, is starting, was skipped or left down; 1 when they are
    held (a device is unhealthy); 3 when one failed to start or stays pending (its turn came
    after the budget, or its job still drains after the guard's signal: run restore again
    once it has stopped), a manager was not reloaded once the drain drop-ins went, history
    failed, or another run was draining.

    Under the guard lock, as every run that signals: a drain in progress has written its
    stops ahead and set its owners aside, and they are that run's to put back.
    """
    config = ctx.config()
    log = Logger(ctx.err, ctx.environ)
    lock = guard_lock.take(config.state.dir, guard_lock.LOCK_WAIT_S)
    if lock.refused:
        who = f" (pid {lock.busy_pid})" if lock.busy_pid else ""
        log.error(f"restore: another suspendguard run{who} is draining: restore started "
                  "nothing; run it again once that run has given its verdict")
        return EXIT_ERROR
    if lock.warning:
        log.warning(lock.warning)
    try:
        return _restore(args, ctx, config, log)
    finally:
        lock.release()


def _restore(args: argparse.Namespace, ctx: Context, config: Config, log: Logger) -> int:
    history = open_history_or_say(config.state.dir, log, "restore: cannot read what was stopped",
                           error=True)
    if history is None:
        return EXIT_ERROR
    # Exit 3 on each warning: a damaged history moved aside took its stops with it (its
    # warning names the jobs), and a manager not reloaded keeps the drain's settings.
    warned = list(history.warnings)
    # A launcher a killed run left stopped (SIGSTOP) goes on first, whatever
    # the device's health: nothing may stay frozen because a guard died.
    for line in continue_left(config.state.dir):
        log.warning(line)
    with history:
        try:
            pending = history.pending_stops()
            sleep = newest_sleep(history, config)
        except HistoryError as exc:
            log.error(f"restore: cannot read what was stopped: {exc}")
            return EXIT_ERROR
        for line in history.notes:  # a damaged row: its job is acted on all the same
            log.warning(f"history: {line}")
        outcome = check_devices(config, history, log, sleep, pending)
        reason = outcome.held_reason() if outcome is not None else ""
        held = (pending if reason and pending and not args.force
                and config.resume.restore_on_unhealthy == "hold" else [])
        if held:
            hold(held, reason, history, log)
        elif reason and pending:
            why = "--force" if args.force else "[resume] restore_on_unhealthy = \"restore\""
            log.warning(f"restoring onto an unhealthy device ({why}): {reason}")

        supervisors = ManagersAndEngines(environ=ctx.environ, state_dir=config.state.dir)
        done = []

        def warn(line: str) -> None:
            warned.append(line)
            log.warning(line)

        def note(stop: Stop, result: str, why: str) -> None:
            # A history that cannot be written (a full disk) stops no job from starting: the
            # job's result is said instead, and the next restore finds it started.
            try:
                history.record_restore(stop.id, result, why)
            except HistoryError as exc:
                warn(f"history: {stop.owner.name} {result}, not recorded: {exc}")

        # Held jobs keep what keeps them down (their drain drop-ins) until
        # they are started: nothing is put back while they are held.
        if not held:
            # Inside the resume unit's TimeoutStartSec: a start still running
            # when the budget ends is "starting", one not reached stays pending.
            with bounded(Deadline(time.monotonic() + RESTORE_AFTER_RESUME_S)):
                done = restore(pending, supervisors, config.restore,
                               enabled=config.restore.after_resume, record=note, log=log.info,
                               warn=warn, boot_ids=boot_ids(ProcFS()), journal=log.journal,
                               draining=history.still_draining)
                # Whatever is still set aside (a killed run's drop-in, the restart
                # policy of a container left down) goes back now; a manager not reloaded
                # after that keeps the drain's settings, and is one of the warnings.
                for line in supervisors.clean_leftovers(warn=warn):
                    log.warning(line)
    if args.json:
        doc = {"restored": [{**d.stop.to_json(), "result": d.result, "why": d.why}
                            for d in done],
               "held": [{**s.to_json(), "result": "held", "why": reason} for s in held],
               "health": outcome.to_json() if outcome is not None else None,
               "warnings": warned}
        json.dump(doc, ctx.out, indent=2)
        ctx.out.write("\n")
    elif held:
        ctx.out.write(f"{len(held)} jobs held after resume: {reason}\n")
    elif not done:
        ctx.out.write("nothing to restore\n")
    if held:
        return EXIT_HELD
    # A job the budget did not reach stays down until someone runs restore again.
    return EXIT_ERROR if warned or any(d.result in ("failed", "pending") for d in done) else 0
