"""``suspendguard drain [--yes]``: the real drain from a shell, after saying who will be signalled.

A dry run of the same pipeline lists the processes a real run would stop, each
with how (its signal, its launcher's, a kernel's shutdown request, none);
on a terminal the operator confirms (answer ``y``), with ``--yes`` nobody is
asked. Without a terminal and without ``--yes`` it refuses before doing
anything: a script must say that it means it. Confirmed, the list is taken
again; a holder that appeared while the question was open is asked about
too. The real run then signals only the holders confirmed: one that
appears after the last look (or a respawn in a later round) is not
signalled and vetoes, named, so nobody is signalled who was not shown.
A look that refuses the suspend already (a veto, or unknown) asks nothing:
the real run would signal nobody, so that look's report is the answer.
"""

from __future__ import annotations

import argparse

from suspendguard.commands.context import Context
from suspendguard.config import Config
from suspendguard.errors import EXIT_VETO, UsageError
from suspendguard.guard.pipeline import default_idle_check, run
from suspendguard.guard.render import short_command
from suspendguard.guard.report import Report
from suspendguard.guard.run import OnDemandOwnerControl, open_history, print_report, run_guard
from suspendguard.guard.run_state import IdleCheck
from suspendguard.model import HolderId, holder_id
from suspendguard.record import HolderRecord
from suspendguard.system.log import Logger
from suspendguard.system.terminal import table, terminal_width


def look(config: Config, ctx: Context,
         idle_check: IdleCheck | None = default_idle_check) -> Report:
    """The dry run a real run is predicted by: it records nothing.

    It is made as ``check`` makes it: the owners read through their supervisors (a
    transient user unit vetoes), the history read (a holder an earlier attempt signalled
    is not signalled again), the device asked. A process the device reports that the
    scan missed (in a container the guard cannot read) is signalled by the real run, so
    it is listed; left off, the real run would veto it as unconfirmed.
    """
    log = Logger(ctx.err, ctx.environ, quiet=True)
    return run(config, dry_run=True, origin="cli", log=log, record=False,
               idle_check=idle_check, history=open_history,
               supervisors=OnDemandOwnerControl(ctx.environ, config.state.dir))


def signalled_by(report: Report) -> dict[HolderId, HolderRecord]:
    """Who the real run would signal, as the dry run ``report`` predicts it."""
    return {holder_id(hr.decision.holder): hr for hr in report.holders
            if hr.outcome.kind == "would-signal"}


def to_signal(config: Config, ctx: Context,
              idle_check: IdleCheck | None = default_idle_check) -> dict[HolderId, HolderRecord]:
    """Who a real run would signal now, by a dry run that records nothing."""
    return signalled_by(look(config, ctx, idle_check))


def _refused(report: Report, args: argparse.Namespace, ctx: Context) -> int:
    """A look that refuses the suspend already: its report, as ``check`` prints it, and its
    exit status. The real run would signal nobody (a certain veto, or a verdict it cannot
    know), so there is nothing to ask about; the holders it would have stopped are named
    in the report as not signalled, and why."""
    print_report(report, ctx, args.json, getattr(args, "wide", False))
    ctx.err.write(f"drain: the suspend is refused already ({report.verdict.kind}): "
                  "nobody was signalled, nothing to confirm\n")
    return report.verdict.exit_status


def _list(holders: list[HolderRecord], ctx: Context) -> None:
    """Each process with how the drain stops it: its signal, its launcher's, a kernel's
    shutdown request, or none (a worker that leaves with its parent)."""
    rows = [("PID", "USER", "HOW", "COMMAND")]
    for hr in holders:
        h = hr.decision.holder
        how = hr.outcome.why.split("; it took ")[0]  # what it took before is the report's
        rows.append((str(h.pid), h.user, how, short_command(h.command)))
    ctx.err.write("\n".join(table(rows, width=terminal_width(ctx.environ, ctx.err))) + "\n")


def _confirmed(ctx: Context, count: int) -> bool:
    ctx.err.write(f"Stop {'this process' if count == 1 else f'these {count} processes'}"
                  " as listed now? [y/N] ")
    ctx.err.flush()
    answer = ctx.stdin.readline()
    if not answer.endswith("\n"):
        ctx.err.write("\n")
    return answer.strip().lower() in ("y", "yes")


def drain(args: argparse.Namespace, ctx: Context) -> int:
    if args.dry_run:
        return run_guard(ctx, True, None, "cli", args.json, getattr(args, "wide", False))
    if not args.yes and not ctx.stdin.isatty():
        raise UsageError("drain: no terminal to ask on: add --yes to signal the holders "
                         "without a question (suspendguard check shows who they are)")
    config = ctx.config()
    shown: dict[HolderId, HolderRecord] = {}
    if not args.yes:
        while True:
            report = look(config, ctx)
            if report.verdict.kind != "allow":
                return _refused(report, args, ctx)
            new = {k: v for k, v in signalled_by(report).items() if k not in shown}
            if not new:
                break
            what = "also " if shown else ""
            ctx.err.write(f"drain: {len(new)} process(es) will {what}be stopped, with "
                          f"{config.drain.signal} unless the list says otherwise:\n")
            _list(list(new.values()), ctx)
            if not _confirmed(ctx, len(new)):
                ctx.err.write("drain: not confirmed: nobody was signalled\n")
                return EXIT_VETO
            shown.update(new)
    return run_guard(ctx, False, None, "cli", args.json, getattr(args, "wide", False),
                     confirmed=None if args.yes else set(shown))
