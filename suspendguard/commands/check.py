"""The guard's own subcommands: check, pre-sleep, history."""

from __future__ import annotations

import argparse
import json
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING

from suspendguard.errors import NoHistory, UsageError
from suspendguard.system.cancel import Cancel
from suspendguard.system.log import Logger

if TYPE_CHECKING:
    from suspendguard.commands.context import Context


@contextmanager
def _sigterm_cancels() -> Iterator[Cancel]:
    """SIGTERM (and SIGHUP) to the guard end the run as a veto, recorded."""
    cancel = Cancel()

    def handler(signum: int, _frame: FrameType | None) -> None:
        cancel.cancel(f"guard received {signal.Signals(signum).name}")

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield cancel
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        cancel.close()


def _run(ctx: Context, dry_run: bool, action: str | None, origin: str, as_json: bool) -> int:
    from suspendguard.guard.pipeline import run
    from suspendguard.guard.report import render

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


# SQLite's LIMIT is a signed 64-bit integer.
MAX_N = (1 << 63) - 1


def history(args: argparse.Namespace, ctx: Context) -> int:
    if not 1 <= args.n <= MAX_N:
        raise UsageError(f"history: -n must be between 1 and {MAX_N}, got {args.n}")
    from suspendguard.store.history import History

    config = ctx.config()
    try:
        with History.open(config.state.dir, readonly=True) as h:
            attempts = h.attempts(args.n)
            notes = list(h.notes)
    except NoHistory as exc:
        if args.json:
            json.dump({"attempts": [], "note": str(exc)}, ctx.out, indent=2)
            ctx.out.write("\n")
        else:
            ctx.out.write(f"history: {exc}\n")
        return 0
    # Damaged beyond reading (HistoryError): one line and exit status 3, from the CLI.
    for note in notes:
        ctx.err.write(f"suspendguard: history: {note}\n")
    if args.json:
        doc: dict[str, object] = {"attempts": [a.to_json() for a in attempts]}
        if notes:
            doc["skipped"] = notes
        json.dump(doc, ctx.out, indent=2)
        ctx.out.write("\n")
        return 0
    if not attempts:
        ctx.out.write("history: no attempts recorded yet\n")
        return 0
    from suspendguard.guard.report import table

    rows = [("ID", "STARTED", "ACTION", "VERDICT", "SECONDS", "HOLDERS", "FIRST REASON")]
    for a in attempts:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(a.started))
        action = a.action or ("dry run" if a.dry_run else "check")
        seconds = f"{a.duration:.1f}" if a.duration is not None else "-"
        drained = sum(1 for h in a.holders if h.outcome == "exited")
        holders = f"{drained}/{len(a.holders)} drained" if a.holders else "-"
        first = a.reasons[0] if a.reasons else ""
        if a.findings:
            rules = sorted({str(f["rule"]) for f in a.findings})
            first = (first + "; " if first else "") + "after resume: " + ", ".join(rules)
        rows.append((str(a.id), started, action, a.verdict, seconds, holders, first[:80]))
    ctx.out.write("\n".join(table(rows, indent="")) + "\n")
    return 0


