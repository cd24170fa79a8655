"""The guard's run as a command: ``check`` (by hand, or a dry run) and ``pre-sleep`` (the veto unit)."""

from __future__ import annotations

import argparse
import json
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING

from suspendguard.guard.pipeline import run
from suspendguard.guard.render import render
from suspendguard.system.cancel import Cancel
from suspendguard.system.log import Logger

if TYPE_CHECKING:
    from suspendguard.commands.context import Context


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


def _run(ctx: Context, dry_run: bool, action: str | None, origin: str, as_json: bool) -> int:
    config = ctx.config()
    # On a terminal the report already says what the log lines would; keep
    # the errors and warnings, drop the chatter.
    log = Logger(ctx.err, ctx.environ, quiet=dry_run and not as_json)
    with _sigterm_cancels() as cancel:
        # A dry run changes nothing, the history included.
        report = run(config, dry_run=dry_run, action=action, origin=origin, log=log,
                     cancel=cancel, record=not dry_run)
    if as_json:
        json.dump(report.to_json(), ctx.out, indent=2)
        ctx.out.write("\n")
    else:
        render(report, ctx.out, colour=ctx.out.isatty() and "NO_COLOR" not in ctx.environ)
    return report.verdict.exit_status


def check(args: argparse.Namespace, ctx: Context) -> int:
    return _run(ctx, args.dry_run, None, "cli", args.json)


def pre_sleep(args: argparse.Namespace, ctx: Context) -> int:
    return _run(ctx, False, args.action, "unit", args.json)
