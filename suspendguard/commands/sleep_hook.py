"""The system-sleep hook's side: ``suspendguard sleep-hook pre|post ACTION``.

systemd-sleep runs every hook in parallel under one shared 90 s timeout and
ignores their exit status, so this step can record and check but never
veto. ``pre`` records that the system is going down, after the veto unit's
attempt; when the unit did not run in this cycle it says so and drains
nothing: a drain here could not stop the sleep, and, without the owners'
supervisors (D-Bus is not asked on this path), it would signal services
around systemd, whose ``Restart=`` starts them again into the sleep. The
veto unit is enabled for every sleep kind ``install`` knows. ``post``
records the resume, queues the resume unit's start (``queue_restore``)
and reads the device logs written since the attempt began, and the
journals of the units of the jobs it found (their own console output). It
imports neither dbus-next nor asyncio: nothing on this path asks D-Bus
(systemctl asks systemd on its private socket).

One systemd-sleep runs every step of a suspend-then-hibernate (suspend, a
wake on its timer, hibernate), the hooks at each; the veto unit runs once,
before the first. A later step's ``pre`` is kept with the first step's
attempt, and its ``post`` reads the logs since the attempt began, less what a step
before it recorded.
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import datetime
from pathlib import Path

from suspendguard.commands.context import Context, open_history_or_say
from suspendguard.config import Config
from suspendguard.errors import HistoryError
from suspendguard.install.templates import RESUME_UNIT
from suspendguard.logs.after import after_attempt, holder_homes, holder_log_dirs, job_units
from suspendguard.record import Attempt
from suspendguard.store import mode as guard_mode
from suspendguard.store.history import History, newest_sleep
from suspendguard.system import runner
from suspendguard.system.log import Logger
from suspendguard.system.procfs import ProcAccessError, ProcFS

# How long after the veto unit's attempt ended the hook still counts it as
# this sleep's: the other units ordered before the sleep (nvidia-suspend's
# VRAM copy among them) run in between.
LOOK_BACK_S = 120.0
# Each systemctl call of queue_restore: a local call that answers at once, bounded so that
# the hook keeps inside systemd-sleep's 90 s with the logs' 45 s and the journals' 30 s.
SYSTEMCTL_S = 2.0
# What systemctl is-enabled says of a unit it was told not to start on its own.
DISABLED = frozenset({"disabled", "masked", "masked-runtime"})


def unit_attempt(history: History, action: str) -> Attempt | None:
    """The veto unit's attempt of this sleep cycle, if it ran (its look, in observe mode): one
    that ended at most LOOK_BACK_S ago (from its end: a long drain is no older attempt).
    A real attempt that refused is no sleep's: the unit failed, and nothing slept after it;
    a sleep that follows it soon after (the guard switched off meanwhile) has none. Nor is
    one whose sleep resumed already: a sleep soon after that resume had no unit's attempt
    (or is a later step of the same suspend-then-hibernate: earlier_step tells)."""
    attempt = history.last_slept_on(action=action, ended_since=time.time() - LOOK_BACK_S)
    if attempt is None or attempt.origin != "unit":
        return None
    if any(e.phase == "post" for e in attempt.events):
        return None
    return attempt if attempt.dry_run or attempt.result == "allow" else None


def sleep_run_started(proc: ProcFS) -> float | None:
    """When the systemd-sleep that runs this hook started (the wall clock's time); None
    when no systemd-sleep is above it."""
    pid = os.getppid()
    for _ in range(8):  # the hook's shell, systemd's executor: a few steps up at most
        try:
            st = proc.stat(pid)
        except ProcAccessError:
            return None
        if st is None or pid <= 1:
            return None
        if st.comm == "systemd-sleep":
            try:
                uptime = float(Path(f"{proc.root}/uptime").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                return None
            # Both count time asleep (the boot-time clock), so the age spans the steps.
            return time.time() - (uptime - st.start_time / os.sysconf("SC_CLK_TCK"))
        pid = st.ppid
    return None


def earlier_step(history: History, action: str, proc: ProcFS) -> Attempt | None:
    """The attempt a step before this one, of the same systemd-sleep run, went down after:
    the newest record is that step's resume, and this hook's systemd-sleep began before it."""
    last = next(iter(history.events(1)), None)
    if last is None or last.phase != "post" or last.action != action or not last.attempt_id:
        return None
    started = sleep_run_started(proc)
    if started is None or started >= last.time:
        return None
    return history.attempt(last.attempt_id)


NO_UNIT = ("the veto unit did not run before this {action}: nothing was drained (a sleep "
           "hook cannot stop the sleep; suspendguard install enables the unit)")


def pre(config: Config, action: str, log: Logger, step: str = "",
        proc: ProcFS | None = None) -> int:
    """``step``: systemd-sleep's SYSTEMD_SLEEP_ACTION (suspend-then-hibernate's steps)."""
    history = open_history_or_say(config.state.dir, log, "history not recorded")
    if history is None:
        # The unit's attempt is in the history: whether it ran, and whom it drained, is not
        # known here (never "it did not run": it may have signalled every job).
        log.warning(f"the veto unit's attempt of this {action} cannot be looked up (the "
                    "history did not open, above): whether it ran and what it drained is "
                    "unknown here; suspendguard history says once it opens")
        return 0
    # A history that cannot be read or written (damaged, a full disk, locked) is a warning,
    # as in post: the hook only records, and the sleep goes on whatever it says.
    try:
        attempt = unit_attempt(history, action)
        earlier = None if attempt else earlier_step(history, action, proc or ProcFS())
        if earlier is not None:
            rest = (f"the {step or 'next'} step of this {action}; the veto unit runs once, "
                    "before the first step, so a job started since that step's resume was "
                    "not drained")
            history.record_event("pre", action, f"going down again after attempt {earlier.id}: "
                                 f"{rest}", earlier.id)
            log.info(f"attempt {earlier.id}: going down again: {rest}")
            return 0
        if attempt is None:
            history.record_event("pre", action, _unit_not_found(config, action, log))
            return 0
        result = (f"observe mode: the guard only looked, and it would have said "
                  f"{attempt.result}" if attempt.dry_run else attempt.result)
        history.record_event("pre", action, f"going down after attempt {attempt.id} "
                             f"({result})", attempt.id)
        log.info(f"attempt {attempt.id}: system going down for {action}"
                 + (" (observe mode: nothing was drained)" if attempt.dry_run else ""))
    except HistoryError as exc:
        log.warning(f"history not recorded: {exc}")
    finally:
        history.close()
    return 0


def _unit_not_found(config: Config, action: str, log: Logger) -> str:
    """Say that the veto unit's attempt of this sleep is not found; the note to record."""
    mode = guard_mode.read(config.state.dir)
    if mode.enforcing:
        note = NO_UNIT.format(action=action)
        log.warning(note)
    else:
        # Off, or observe and the unit's look not found: nothing drained either way.
        note = (f"the veto unit's attempt is not found, and the guard's mode is {mode.name}: "
                "nothing was drained")
        log.info(note)
    return note


def queue_restore(log: Logger) -> None:
    """Queue the resume unit's start, to run once this sleep's service has ended.

    Its ``WantedBy=`` asks for it with the sleep, but systemd merges that start into one
    already running: a suspend asked while the last restore still ran (a veto's, or an
    earlier resume's) gets no restore after its own resume, and the jobs it drained stay
    down. Asked here, the start merges with the sleep's own job while that one waits, and
    runs once; a resume unit the operator disabled is left alone.
    """
    enabled = runner.run(["systemctl", "is-enabled", RESUME_UNIT], SYSTEMCTL_S)
    state = enabled.stdout.strip()
    if not enabled.ok and state in DISABLED:
        return  # the operator's choice
    answer = (runner.run(["systemctl", "start", "--no-block", RESUME_UNIT], SYSTEMCTL_S)
              if enabled.ok else enabled)
    if not answer.ok:
        log.warning(f"the start of {RESUME_UNIT} after this resume was not queued: "
                    f"{answer.stderr.strip() or answer.describe_failure()}; if a suspend was "
                    "asked while the last restore ran, run suspendguard restore")


def post(config: Config, action: str, log: Logger, queue: bool = False) -> int:
    """``queue``: run by systemd-sleep, which starts the resume unit (queue_restore)."""
    if queue:
        queue_restore(log)
    resumed = datetime.now()
    history = open_history_or_say(config.state.dir, log, "history not recorded")
    if history is None:
        return 0
    try:
        sleep = newest_sleep(history, config, action)
        attempt = sleep.attempt if sleep.slept else None
        # An attempt whose resume is recorded last is an earlier sleep's: this one had none
        # (the veto unit did not run, or was off), and the logs since that one are not this
        # sleep's. A later step's pre comes after it. In observe mode the unit's look is
        # this sleep's attempt.
        steps = [e for e in attempt.events if e.phase in ("pre", "post")] if attempt else []
        earlier = bool(steps) and steps[-1].phase == "post"
        if attempt is None or earlier:
            last = f" (the last, {attempt.id}, was resumed from already)" if attempt else ""
            history.record_event("post", action, f"resumed; no attempt recorded before it{last}")
            log.info(f"resumed from {action}; no suspend attempt was recorded before it{last}")
            return 0
        history.record_event("post", action, "resumed", attempt.id)
        # A later step reads the logs since the attempt began too: what a step before it
        # recorded is left out, once each, and what reached the logs after that step's read
        # is the attempt's all the same.
        result = after_attempt(config, datetime.fromtimestamp(attempt.started),
                               holder_homes(attempt), until=resumed,
                               units=job_units(attempt), recorded=attempt.findings,
                               log_dirs=holder_log_dirs(attempt))
        if result.findings:
            history.record_findings(attempt.id, [f.record() for f in result.findings])
        for line in result.journal_lines(attempt.id):
            log.warning(line)
        for note in result.notes():
            log.info(f"attempt {attempt.id}: {note}")
        if not result.findings:
            log.info(f"attempt {attempt.id}: resumed from {action}; {result.nothing_found()}")
    except HistoryError as exc:
        log.warning(f"history not recorded: {exc}")
    finally:
        history.close()
    return 0


def command(args: argparse.Namespace, ctx: Context) -> int:
    log = Logger(ctx.err, ctx.environ)
    config = ctx.config()
    if args.phase == "pre":
        return pre(config, args.action, log, ctx.environ.get("SYSTEMD_SLEEP_ACTION", ""))
    # systemd-sleep names the step it runs (systemd 247 on): a hook run by hand queues nothing.
    return post(config, args.action, log, queue="SYSTEMD_SLEEP_ACTION" in ctx.environ)
