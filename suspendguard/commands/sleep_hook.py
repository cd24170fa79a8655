"""The system-sleep hook's side: ``suspendguard sleep-hook pre|post ACTION``.

systemd-sleep runs every hook in parallel under one shared 90 s timeout and
ignores their exit status, so this step can record and check but never
veto. ``pre`` records that the system is going down; when the veto unit did
not run in this cycle it drains as a fallback (advisory only, frozen
cgroups skipped). ``post`` records the resume and reads the device logs
written since the attempt began, and the journals of the units of the
jobs it found (their own console output). It imports neither dbus-next nor asyncio:
nothing on this path asks D-Bus.
"""

from __future__ import annotations

import argparse
import pwd
import time
from dataclasses import replace
from datetime import datetime

from suspendguard.commands.context import Context
from suspendguard.config import Config
from suspendguard.errors import HistoryError
from suspendguard.logs.after import after_attempt
from suspendguard.store import mode as guard_mode
from suspendguard.store.history import History
from suspendguard.store.rows import Attempt
from suspendguard.system.log import Logger

# systemd-sleep gives all hooks together 90 s; the fallback stays well inside.
FALLBACK_DEADLINE_S = 60.0
FALLBACK_TIMEOUT_S = 40.0


def _open(config: Config, log: Logger) -> History | None:
    try:
        history = History.open(config.state.dir)
    except HistoryError as exc:
        log.warning(f"history not recorded: {exc}")
        return None
    for w in history.warnings:
        log.warning(w)
    return history


def unit_attempt(history: History, action: str, config: Config) -> Attempt | None:
    """The veto unit's attempt of this sleep cycle, if it ran."""
    since = time.time() - (config.drain.deadline_s + 30.0)
    attempt = history.last_real_attempt(action=action, since=since)
    if attempt is not None and attempt.origin == "unit":
        return attempt
    return None


def pre(config: Config, action: str, log: Logger) -> int:
    history = _open(config, log)
    attempt = unit_attempt(history, action, config) if history else None
    if attempt is not None and history is not None:
        history.record_event("pre", action, f"going down after attempt {attempt.id} "
                             f"({attempt.verdict})", attempt.id)
        history.close()
        log.info(f"attempt {attempt.id}: system going down for {action}")
        return 0
    if history is not None:
        history.close()
    mode = guard_mode.read(config.state.dir)
    if not mode.enforcing:
        log.info(f"the veto unit's attempt is not found, and the guard's mode is {mode.name}: "
                 "no fallback drain")
        return 0
    log.warning(f"the veto unit did not run before this {action}: draining from the sleep hook "
                "as a fallback; it cannot stop the suspend")
    # Imported here, not at the top: only this fallback runs the pipeline, and
    # its imports would make the usual hook (note the unit's attempt and go)
    # about half again as slow to start.
    from suspendguard.guard.pipeline import run

    fallback = replace(config, drain=replace(
        config.drain,
        timeout_s=min(config.drain.timeout_s, FALLBACK_TIMEOUT_S),
        deadline_s=min(config.drain.deadline_s, FALLBACK_DEADLINE_S),
    ))
    report = run(fallback, dry_run=False, action=action, origin="hook", log=log,
                 skip_frozen=True, can_veto=False)
    history = _open(config, log)
    if history is not None:
        note = "fallback drain from the sleep hook (veto unit did not run)"
        if report.verdict.kind != "allow":
            note += (f"; would have refused it ({report.verdict.kind}), but a hook cannot "
                     "stop the suspend")
        history.record_event("pre", action, note, report.attempt_id)
        history.close()
    return 0


def _homes(users: set[str]) -> list[str]:
    homes = []
    for user in sorted(users):
        try:
            homes.append(pwd.getpwnam(user).pw_dir)
        except KeyError:
            continue
    return homes


def job_units(attempt: Attempt) -> list[str]:
    """The units whose journals hold the jobs' own output: every holder's but the guard's own.

    Holders the guard never signals by principle (PID 1, the guard and its
    ancestors) are left out: their output is not a job's.
    """
    return sorted({h.unit for h in attempt.holders if h.unit and h.action != "never"})


def post(config: Config, action: str, log: Logger) -> int:
    resumed = datetime.now()
    history = _open(config, log)
    if history is None:
        return 0
    try:
        since = time.time() - (config.drain.deadline_s + 24 * 3600.0)
        attempt = history.last_real_attempt(action=action, since=since)
        if attempt is None:
            history.record_event("post", action, "resumed; no attempt recorded before it")
            log.info(f"resumed from {action}; no suspend attempt was recorded before it")
            return 0
        history.record_event("post", action, "resumed", attempt.id)
        homes = _homes({h.user for h in attempt.holders if h.user})
        result = after_attempt(config, datetime.fromtimestamp(attempt.started), homes,
                               until=resumed, units=job_units(attempt))
        if result.findings:
            history.record_findings(attempt.id, result.findings)
        for line in result.journal_lines(attempt.id):
            log.warning(line)
        for note in result.notes():
            log.info(f"attempt {attempt.id}: {note}")
        if not result.findings:
            log.info(f"attempt {attempt.id}: resumed from {action}; no documented device "
                     "failure in the logs")
    except HistoryError as exc:
        log.warning(f"history not recorded: {exc}")
    finally:
        history.close()
    return 0


def command(args: argparse.Namespace, ctx: Context) -> int:
    log = Logger(ctx.err, ctx.environ)
    config = ctx.config()
    if args.phase == "pre":
        return pre(config, args.action, log)
    return post(config, args.action, log)
