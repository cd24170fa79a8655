"""``suspendguard check``: the guard's run, always a dry run; and :func:`run_guard`, that run as a command.

``pre-sleep`` (:mod:`.pre_sleep`, the veto unit), ``drain`` (:mod:`.drain`,
the real run from a shell) and ``suspend`` (:mod:`.suspend`) share
:func:`run_guard` with it.
"""

from __future__ import annotations

import argparse
import json
import signal
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from types import FrameType

from suspendguard.commands.context import Context
from suspendguard.guard.pipeline import run
from suspendguard.guard.render import render
from suspendguard.guard.supervise import ManagersAndEngines
from suspendguard.model import HolderId
from suspendguard.system.cancel import Cancel
from suspendguard.system.log import Logger
from suspendguard.system.terminal import terminal_width


@contextmanager
def _sigterm_cancels() -> Iterator[Cancel]:
    """SIGTERM, SIGHUP and SIGINT to the guard end the run as a veto, recorded.

    SIGINT too: the unit can receive it (systemctl kill -s INT, a Ctrl-C
    at a console the guard shares), and it must not end the guard with no
    verdict, as a KeyboardInterrupt (exit 130) would.
    """
    cancel = Cancel()

    def handler(signum: int, _frame: FrameType | None) -> None:
        cancel.cancel(f"guard received {signal.Signals(signum).name}")

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    try:
        yield cancel
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        cancel.close()


def run_guard(ctx: Context, dry_run: bool, action: str | None, origin: str, as_json: bool,
              wide: bool = False, observe: bool = False,
              confirmed: Collection[HolderId] | None = None) -> int:
    """The pipeline, recorded unless a dry run; the report printed (fitted to the
    terminal unless ``wide``); its exit status.

    ``observe``: a dry run that logs and records like a real one (the
    observe mode's look at a real suspend). ``confirmed``: the only holders
    that may be signalled.
    """
    config = ctx.config()
    # A dry run's report (text or JSON) already says what the log lines would;
    # a would-be veto is no error of this command, so nothing goes to stderr.
    log = Logger(ctx.err, ctx.environ, quiet=dry_run and not observe)
    with _sigterm_cancels() as cancel:
        # A dry run changes nothing, the history included.
        report = run(config, dry_run=dry_run, action=action, origin=origin, log=log,
                     cancel=cancel, record=not dry_run or observe, confirmed=confirmed,
                     supervisors=ManagersAndEngines(environ=ctx.environ, state_dir=config.state.dir))
    if as_json:
        json.dump(report.to_json(), ctx.out, indent=2)
        ctx.out.write("\n")
    else:
        render(report, ctx.out, colour=ctx.out.isatty() and "NO_COLOR" not in ctx.environ,
               width=None if wide else terminal_width(ctx.environ, ctx.out))
    return report.verdict.exit_status


def check(args: argparse.Namespace, ctx: Context) -> int:
    # Read-only whatever the flags: --dry-run is only still accepted.
    return run_guard(ctx, True, None, "cli", args.json, getattr(args, "wide", False))
