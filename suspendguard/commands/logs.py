"""``suspendguard logs [PATH ...] [--unit UNIT ...] [--since T] [--until T] [--verbose] [--json]``.

Exit statuses like grep's, so cron or a monitoring check can alert on them:
0 no documented failure found (a unit's journal that is not available is a
note, not a failure), 1 findings, 2 bad usage or a PATH given on the
command line that does not exist or cannot be read (one line on stderr
names it; the report of what could be read is printed all the same).
``--since last-attempt`` reads device logs the way the after-resume check
does: from ``[logs] clock_slack_s`` before the attempt's start, findings
stamped before it marked as such, and the same sources: ``~`` in the globs
is each holder's home too, and each holder's unit's journal is read.
``--explain CODE`` reads no log: it answers from the vendor code table, 0
when the code is in it, 1 when not.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, TextIO

from suspendguard.commands.context import Context
from suspendguard.config import Config
from suspendguard.errors import EXIT_USAGE, HistoryError, UsageError
from suspendguard.logs import codes
from suspendguard.logs.after import holder_homes, holder_log_dirs, job_units
from suspendguard.logs.finding import NOT_FOLLOWED, Finding, Skipped
from suspendguard.logs.journal import unit_name
from suspendguard.logs.report import LogsReport, logs_report
from suspendguard.logs.rules import BY_ID
from suspendguard.logs.search import SearchReport
from suspendguard.record import Attempt
from suspendguard.store.history import last_slept
from suspendguard.system.terminal import safe, when

LAST_ATTEMPT = "last-attempt"


def parse_option_time(value: str, option: str) -> datetime:
    """ISO 8601 -> naive local time, the way the device writes its timestamps."""
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"  # fromisoformat learns "Z" only in 3.11
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(
            f"{option} {value!r}: expected an ISO 8601 time such as 2026-11-29T00:00:00"
            + (" or last-attempt" if option == "--since" else "")
        ) from None
    try:
        if parsed.tzinfo is not None:
            parsed = parsed.astimezone().replace(tzinfo=None)
        parsed.timestamp()  # what the reading compares: a time at the calendar's ends has none
    except (OverflowError, ValueError, OSError):
        raise UsageError(f"{option} {value!r}: out of range (a time between the years 1 and "
                         "9999, as this host's clock can tell it)") from None
    return parsed


def last_attempt(config: Config) -> tuple[datetime, Attempt]:
    """The last recorded suspend attempt, from the history, and when it started: its holders
    name what the after-resume check read."""
    try:
        attempt = last_slept(config.state.dir)
    except HistoryError as exc:
        raise HistoryError(f"--since last-attempt: {exc}") from None
    if attempt is None:
        raise UsageError(f"--since last-attempt: no recorded attempt in {config.state.dir}")
    return datetime.fromtimestamp(attempt.started), attempt


def _fmt(at: datetime | None) -> str:
    """A time of the logs (local, as the device writes it) in the form every command shows,
    its zone with it."""
    if at is None:
        return "no time"
    try:
        return when(at.timestamp())
    except (OverflowError, ValueError, OSError):  # a year this host's clock cannot tell
        return at.isoformat(sep=" ", timespec="seconds")


def _unknown_codes(report: SearchReport, out: TextIO) -> None:
    if not report.unknown_codes:
        return
    out.write("\nUnrecognised vendor codes (not findings; `suspendguard logs --explain CODE`):\n")
    for u in report.unknown_codes:
        first = u.text.split("\n", 1)[0]
        out.write(f"  {safe(u.file)}:{u.line}: unrecognised vendor code {safe(u.code)}: "
                  f"{safe(first[:200])}\n")


def _human(logs: LogsReport, out: TextIO, since: datetime | None, verbose: bool = False) -> None:
    report = logs.files
    out.write(
        f"Read {report.files_read} file(s), {report.bytes_read} bytes"
        + (f", since {_fmt(since)}" if since else "")
        + (f"; {report.files_older} older file(s) left unread" if report.files_older else "")
        + ".\n"
    )
    for j in logs.journals:
        if j.unavailable is None:
            out.write(f"Read the journal of {safe(j.unit)}: {j.entries_read} entries.\n")
    groups: dict[str, list[Finding]] = {}
    for f in logs.findings:
        groups.setdefault(f.rule, []).append(f)
    if not groups:
        # Never "none found" about what could not be read: exit status 2 names it.
        read = report.files_read or any(j.unavailable is None for j in logs.journals)
        nothing = "No documented failure found" if read else "Nothing was read"
        out.write(f"{nothing}.\n")
    for rule_id, found in sorted(groups.items(), key=lambda kv: list(BY_ID).index(kv[0])):
        rule = BY_ID[rule_id]
        times = sorted(f.time for f in found if f.time)
        sample = next((f for f in found if f.time == (times[-1] if times else None)), found[0])
        pids = sorted({f.pid for f in found if f.pid is not None})
        out.write(f"\n{rule.id} ({rule.severity}): {len(found)} line(s)")
        if times:
            out.write(f", first {_fmt(times[0])}, last {_fmt(times[-1])}")
        out.write("\n")
        first_line = sample.text.split("\n", 1)[0]
        out.write(f"  e.g. {safe(sample.file)}:{sample.line}: {safe(first_line[:300])}\n")
        if pids:
            shown = ", ".join(str(p) for p in pids[:20])
            out.write(f"  pids: {shown}{' ...' if len(pids) > 20 else ''}\n")
        marks = [f.outside for f in found if f.outside is not None]
        if marks:
            nearest = min(marks, key=lambda m: m.by_s)
            out.write(f"  outside the attempt: {len(marks)} line(s), e.g. {nearest.describe()}\n")
        named = sorted({f.code for f in found if f.code})
        if named:
            out.write(f"  vendor code(s): {', '.join(named)}\n")
        out.write(f"  what it means: {rule.meaning}\n")
        out.write(f"  what to do: {rule.remedy}\n")
    if verbose:
        _unknown_codes(report, out)
    missing = [j for j in logs.journals if j.unavailable is not None]
    if report.skipped or missing or any(j.notes for j in logs.journals):
        out.write("\nNot read:\n")
        for s in report.skipped:
            out.write(f"  {safe(s.path)}: {safe(s.reason)}\n")
        for j in logs.journals:
            if j.unavailable is not None:
                out.write(f"  journal of {safe(j.unit)}: not available: "
                          f"{safe(j.unavailable.reason)}\n")
            for note in j.notes:
                out.write(f"  journal of {safe(j.unit)}: {safe(note)}\n")


def units_of(args: argparse.Namespace) -> list[str]:
    """The ``--unit`` names, each as journalctl takes it; a bad one is a usage error."""
    units = []
    for given in args.unit or ():
        try:
            units.append(unit_name(given))
        except ValueError as exc:
            raise UsageError(f"--unit: {exc}") from None
    return list(dict.fromkeys(units))


def explain(given: str, out: TextIO, as_json: bool) -> int:
    """``--explain CODE``: the vendor's meaning, the catalog's rule (or none) and the remedy."""
    key = codes.normalise(given)
    known = codes.table().get(key)
    rule = BY_ID.get(known.rule) if known and known.rule else None
    if as_json:
        doc: dict[str, Any] = {"code": key, "known": known is not None}
        if known:
            doc.update(name=known.name, meaning=known.meaning, handling=known.handling,
                       block=known.block, source=known.source, rule=known.rule,
                       suspend_failure=rule is not None,
                       remedy=rule.remedy if rule else known.handling)
        json.dump(doc, out, indent=2)
        out.write("\n")
        return 0 if known else 1
    if known is None:
        total = len(codes.table())
        out.write(f"{safe(key)}: not in the vendor code table ({total} codes from "
                  f"{len(codes.blocks())} references; see docs/log-findings.md).\n")
        return 1
    out.write(f"{known.code}: {known.name} ({known.block})\n")
    out.write(f"  vendor's meaning: {known.meaning}\n")
    if rule is not None:
        out.write(f"  catalog rule: {rule.id} ({rule.severity}): {rule.summary}\n")
        out.write(f"  what it means: {rule.meaning}\n")
        out.write(f"  what to do: {rule.remedy}\n")
    else:
        out.write("  catalog rule: none: not a suspend failure (the guard reports no finding "
                  "for it)\n")
        out.write(f"  what to do: {known.handling}\n")
    out.write(f"  reference: {known.source}\n")
    return 0


def command(args: argparse.Namespace, ctx: Context) -> int:
    if args.explain is not None:
        if args.paths or args.unit or args.since or args.until:
            raise UsageError("--explain CODE reads no log: give it no PATH, --unit, --since or "
                             "--until")
        if not codes.normalise(args.explain):
            raise UsageError(f"--explain {args.explain!r}: expected a vendor code such as "
                             "EL0004, 507033 or -8020")
        return explain(args.explain, ctx.out, args.json)
    since_arg: str | None = args.since
    until_arg: str | None = args.until
    since = until = started = None
    units = units_of(args)
    homes: list[str] = []
    log_dirs: dict[str, tuple[int, ...]] = {}
    if until_arg is not None:
        until = parse_option_time(until_arg, "--until")
    if since_arg == LAST_ATTEMPT:
        started, attempt = last_attempt(ctx.config())
        since = started - timedelta(seconds=ctx.config().logs.clock_slack_s)
        # What the after-resume check read too: the jobs' own logs and console output.
        homes = holder_homes(attempt)
        log_dirs = holder_log_dirs(attempt)
        units = list(dict.fromkeys([*units, *job_units(attempt)]))
    elif since_arg is not None:
        since = parse_option_time(since_arg, "--since")
    if since and until and until < since:
        raise UsageError(f"--until {until_arg} is before --since {since_arg}")
    logs = logs_report(ctx.config(), list(args.paths or ()), units, since, until, started,
                       ctx.environ, homes, log_dirs)
    if args.json:
        doc: dict[str, Any] = logs.to_json()
        doc["since"] = since.isoformat() if since else None
        doc["until"] = until.isoformat() if until else None
        json.dump(doc, ctx.out, indent=2)
        ctx.out.write("\n")
    else:
        _human(logs, ctx.out, since, args.verbose)
    read = logs.files.files_read > 0 or any(j.unavailable is None for j in logs.journals)
    return exit_status(logs.files, logs.findings, list(args.paths or ()), ctx, read,
                       ctx.config().logs.paths)


def _partly_read(skipped: Skipped) -> bool:
    """A note about a file that was read (some lines left out), not a refusal to read it."""
    return skipped.reason.startswith("only the last ") or " line(s) " in skipped.reason


def exit_status(report: SearchReport, findings: Sequence[Finding], paths: Sequence[str],
                ctx: Context, read: bool = True, patterns: Sequence[str] = ()) -> int:
    """2 when a PATH typed on the command line, or a file in a folder typed, was not read
    (as ``grep -r``), or when nothing was ``read`` and a log found was refused (``[logs]
    paths`` under a folder this user may not read: never "none found" to a cron check; one
    of ``patterns`` that names no log here, its variable not set, is no log refused);
    else 1 with findings, 0 without."""
    # The search names a PATH as it opened it: made absolute (``logs/walk.py``).
    typed = {os.path.abspath(p) for p in paths}
    folders = tuple(t.rstrip("/") + "/" for t in typed)

    def asked(path: str) -> bool:
        return path in typed or path.startswith(folders)

    unread = [s for s in report.skipped if (asked(s.path) or not (read or s.path in patterns))
              and not _partly_read(s) and not s.reason.endswith(NOT_FOLLOWED)]
    for s in unread:
        ctx.err.write(f"suspendguard: logs: {safe(s.path)}: {safe(s.reason)}\n")
    if unread:
        return EXIT_USAGE
    return 1 if findings else 0
