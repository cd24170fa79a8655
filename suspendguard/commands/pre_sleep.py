"""``suspendguard pre-sleep [ACTION]``: the veto unit's step, run before the sleep.

What it does depends on ``suspendguard mode``: enforce runs the guard for
real (:func:`~suspendguard.guard.run.run_guard`), observe runs it as a dry
run that logs and records like a real one and lets the sleep go on, off
guards nothing. After an enforced veto, ``[notify] retry`` may start the
retry unit (commands/retry.py), which outlives this one.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

from suspendguard.commands.context import Context
from suspendguard.config import defaults
from suspendguard.errors import EXIT_VETO, ConfigError
from suspendguard.guard.opening import failure
from suspendguard.guard.run import run_guard, tell_refused
from suspendguard.store import mode as guard_mode
from suspendguard.system.log import Logger
from suspendguard.verdict import Verdict


def pre_sleep(args: argparse.Namespace, ctx: Context) -> int:
    """The veto unit's run, as ``suspendguard mode`` says: enforce, observe or off."""
    log = Logger(ctx.err, ctx.environ)
    try:
        config = ctx.config()
    except ConfigError as exc:
        # Every sleep is refused (the unit fails), said to who asked, unless `mode` switched
        # the guard off or to observe meanwhile: it keeps the mode in the unit's own folder
        # then. The refusal is noted as told there too, so it is told once.
        mode = guard_mode.read(guard_mode.UNIT_STATE_DIR)
        if mode.name in ("off", "observe"):
            log.warning(f"{failure(exc).text}; the guard's mode is {mode.name} "
                        f"(suspendguard mode): the {args.action} goes on, not guarded")
            return 0
        fallback = defaults()
        tell_refused(replace(fallback, state=replace(fallback.state,
                                                     dir=guard_mode.UNIT_STATE_DIR)),
                     Verdict("unknown", (failure(exc),)), args.action, log, time.monotonic())
        raise
    mode = guard_mode.read(config.state.dir)
    if mode.problem:
        log.warning(mode.problem)
    if mode.name == "off":
        log.info(f"the guard is off (suspendguard mode): {args.action} not guarded")
        return 0
    if mode.name == "observe":
        try:
            status = run_guard(ctx, True, args.action, "unit", args.json, observe=True)
        except Exception as exc:  # observe refuses nothing, a look that broke included
            log.error(f"observe mode (suspendguard mode): {failure(exc).text}; the "
                      f"{args.action} goes on")
            return 0
        log.info(f"observe mode (suspendguard mode): signalled nobody; the {args.action} goes on "
                 f"whatever the verdict (exit status {status} when enforced)")
        return 0
    since = time.time() - 1.0
    status = run_guard(ctx, False, args.action, "unit", args.json)
    if status == EXIT_VETO:
        from suspendguard.commands.retry import offer_retry  # D-Bus: only after a veto
        offer_retry(ctx, args.action, since, log)
    return status
