"""``suspendguard history``: the recorded suspend attempts, newest first."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from suspendguard.errors import NoHistory, UsageError
from suspendguard.store.history import History
from suspendguard.system.terminal import table, terminal_width, when

if TYPE_CHECKING:
    from suspendguard.commands.context import Context


# SQLite's LIMIT is a signed 64-bit integer.
MAX_N = (1 << 63) - 1


def history(args: argparse.Namespace, ctx: Context) -> int:
    if not 1 <= args.n <= MAX_N:
        raise UsageError(f"history: -n must be between 1 and {MAX_N}, got {args.n}")
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
    # Damaged beyond reading is a HistoryError: one line, exit status 3, from the CLI.
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
    rows = [("ID", "STARTED", "ACTION", "VERDICT", "SECONDS", "HOLDERS", "FIRST REASON")]
    for a in attempts:
        started = when(a.started)
        action = a.what
        seconds = f"{a.duration:.1f}" if a.duration is not None else "-"
        drained = sum(1 for h in a.holders if h.outcome.kind == "exited")
        holders = f"{drained}/{len(a.holders)} drained" if a.holders else "-"
        first = a.reasons[0] if a.reasons else ""
        if a.findings:
            rules = sorted({f.rule for f in a.findings})
            first = (first + "; " if first else "") + "after resume: " + ", ".join(rules)
        held = [st for st in a.stops if st.result == "held"]
        if held:
            first = ((first + "; " if first else "") +
                     f"{len(held)} jobs held after resume: {held[0].why}")
        rows.append((str(a.id), started, action, a.result, seconds, holders, first))
    width = None if getattr(args, "wide", False) else terminal_width(ctx.environ, ctx.out)
    ctx.out.write("\n".join(table(rows, indent="", width=width, flex=(6, 2))) + "\n")
    return 0


