"""``suspendguard logs [PATH ...] [--since T] [--until T] [--json]``.

Exit 0 when the scan ran, findings or not (a finding is information, not a
failure of the command); 2 on bad usage.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, TextIO

from suspendguard.commands.context import Context
from suspendguard.config import Config
from suspendguard.errors import UsageError
from suspendguard.logs.finding import Finding
from suspendguard.logs.rules import BY_ID
from suspendguard.logs.search import SearchReport, search
from suspendguard.store.history import last_attempt_start
from suspendguard.system.terminal import safe

LAST_ATTEMPT = "last-attempt"


def parse_option_time(value: str, option: str) -> datetime:
    """ISO 8601 -> naive local time, the way the device writes its timestamps."""
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"  # fromisoformat learns "Z" only in 3.11
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(
            f"{option} {value!r}: expected an ISO 8601 time such as 2026-11-29T00:00:00"
            + (" or last-attempt" if option == "--since" else "")
        ) from None
    if when.tzinfo is not None:
        when = when.astimezone().replace(tzinfo=None)
    return when


def last_attempt(config: Config) -> datetime:
    """When the last recorded suspend attempt started, from the history."""
    start = last_attempt_start(config.state.dir)
    if start is None:
        raise UsageError(f"--since last-attempt: no recorded attempt in {config.state.dir}")
    return start


def _fmt(when: datetime | None) -> str:
    return when.isoformat(sep=" ", timespec="seconds") if when else "no time"


def _human(report: SearchReport, out: TextIO, since: datetime | None) -> None:
    out.write(
        f"Read {report.files_read} file(s), {report.bytes_read} bytes"
        + (f", since {_fmt(since)}" if since else "")
        + (f"; {report.files_older} older file(s) left unread" if report.files_older else "")
        + ".\n"
    )
    groups: dict[str, list[Finding]] = {}
    for f in report.findings:
        groups.setdefault(f.rule, []).append(f)
    if not groups:
        out.write("No documented failure found.\n")
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
        out.write(f"  what it means: {rule.meaning}\n")
        out.write(f"  what to do: {rule.remedy}\n")
    if report.skipped:
        out.write("\nNot read:\n")
        for s in report.skipped:
            out.write(f"  {safe(s.path)}: {safe(s.reason)}\n")


def search_logs(
    config: Config,
    paths: Sequence[str],
    since: datetime | None,
    until: datetime | None,
    environ: dict[str, str] | None = None,
    homes: Sequence[str] = (),
) -> SearchReport:
    """Explicit paths, or else the configured globs; [logs] max_bytes either way."""
    if paths:
        return search(paths, since=since, until=until, max_bytes=config.logs.max_bytes)
    return search(
        patterns=config.logs.paths,
        homes=homes,
        since=since,
        until=until,
        max_bytes=config.logs.max_bytes,
        environ=environ,
    )


def command(args: argparse.Namespace, ctx: Context) -> int:
    since_arg: str | None = args.since
    until_arg: str | None = args.until
    since = until = None
    if until_arg is not None:
        until = parse_option_time(until_arg, "--until")
    if since_arg == LAST_ATTEMPT:
        since = last_attempt(ctx.config())
    elif since_arg is not None:
        since = parse_option_time(since_arg, "--since")
    if since and until and until < since:
        raise UsageError(f"--until {until_arg} is before --since {since_arg}")
    report = search_logs(ctx.config(), list(args.paths or ()), since, until, ctx.environ)
    if args.json:
        doc: dict[str, Any] = report.to_json()
        doc["since"] = since.isoformat() if since else None
        doc["until"] = until.isoformat() if until else None
        json.dump(doc, ctx.out, indent=2)
        ctx.out.write("\n")
    else:
        _human(report, ctx.out, since)
    return 0
