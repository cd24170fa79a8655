"""``suspendguard history``: the recorded suspend attempts, newest first; ``history ID``: one, whole."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from suspendguard.errors import HistoryError, NoHistory, UsageError
from suspendguard.guard.render import short_command
from suspendguard.record import Attempt
from suspendguard.store.history import History
from suspendguard.system.terminal import safe, table, terminal_width, when

if TYPE_CHECKING:
    from suspendguard.commands.context import Context


# SQLite's LIMIT is a signed 64-bit integer.
MAX_N = (1 << 63) - 1


def history(args: argparse.Namespace, ctx: Context) -> int:
    if not 1 <= args.n <= MAX_N:
        raise UsageError(f"history: -n must be between 1 and {MAX_N}, got {args.n}")
    if args.id is not None and not 1 <= args.id <= MAX_N:
        raise UsageError(f"history: ID must be between 1 and {MAX_N}, got {args.id}")
    config = ctx.config()
    try:
        with History.open(config.state.dir, readonly=True) as h:
            if args.id is None:
                attempts = h.attempts(args.n)
            else:
                one = h.attempt(args.id)
                attempts = [] if one is None else [one]
            notes = list(h.notes)
    except NoHistory as exc:
        if args.id is not None:  # no attempt at all, so not that one: as for any ID not recorded
            raise UsageError(f"history: no attempt {args.id} in {config.state.dir}: {exc}") from None
        if args.json:
            json.dump({"attempts": [], "note": str(exc)}, ctx.out, indent=2)
            ctx.out.write("\n")
        else:
            ctx.out.write(f"history: {exc}\n")
        return 0
    # Damaged beyond reading is a HistoryError: one line, exit status 3, from the CLI.
    if args.id is not None and not attempts:
        if notes:  # recorded, but its row cannot be read
            raise HistoryError(f"history: {config.state.dir}: {notes[0]}")
        # An ID never recorded is the caller's mistake.
        raise UsageError(f"history: no attempt {args.id} in {config.state.dir} "
                         "(suspendguard history lists them)")
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
        ctx.out.write("history: no attempts recorded yet\n" if not notes else
                      f"history: no attempt could be read ({len(notes)} damaged, named above)\n")
        return 0
    width = None if getattr(args, "wide", False) else terminal_width(ctx.environ, ctx.out)
    if args.id is not None:
        ctx.out.write("\n".join(attempt_lines(attempts[0], width)) + "\n")
        return 0
    rows = [("ID", "STARTED", "ACTION", "VERDICT", "SECONDS", "HOLDERS", "FIRST REASON")]
    for a in attempts:
        started = when(a.started)
        # Observe mode's look: what an enforced run would have said (the attempt says so whole).
        observed = a.dry_run and a.action is not None
        action = a.action or a.what
        verdict = f"would {a.result}" if observed and a.finished is not None else a.result
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
        rows.append((str(a.id), started, action, verdict, seconds, holders, first))
    ctx.out.write("\n".join(table(rows, indent="", width=width, flex=(6, 2))) + "\n")
    return 0


def attempt_lines(a: Attempt, width: int | None) -> list[str]:
    """One attempt whole: every reason and warning, its holders, the jobs stopped through
    their supervisors, the findings after resume and the steps after it."""
    took = f", {a.duration:.1f} s" if a.duration is not None else ""
    observed = (" (observe mode: what it would have said; it signalled nobody and refused "
                "nothing)" if a.dry_run and a.action else "")
    lines = [safe(f"attempt {a.id}: {a.what}, {when(a.started)}{took} (from {a.origin})"),
             f"verdict: {a.result.upper()}{observed}"]
    lines += [f"  - {safe(r)}" for r in a.reasons]
    lines += [f"  ! {safe(w)}" for w in a.warnings]
    if a.holders:
        rows: list[tuple[str, ...]] = [("PID", "USER", "ACTION", "ROUND", "OUTCOME", "COMMAND")]
        # The outcome's why is given whole below the table: it is what the operator came for.
        rows += [(str(r.holder.pid), r.holder.user, r.action, str(r.round),
                  r.outcome.cell(),
                  short_command(r.holder.command)) for r in a.holders]
        lines += ["", f"holders: {len(a.holders)}", *table(rows, width=width, flex=(5,))]
        by_rule: dict[str, list[str]] = {}
        for r in a.holders:
            by_rule.setdefault(r.rule, []).append(str(r.holder.pid))
        lines.append("  rules:")
        lines += [f"    {safe(rule)}: pid {', '.join(pids)}" for rule, pids in by_rule.items()]
        for r in a.holders:
            notes = [*([r.outcome.why] if r.outcome.why else []),
                     *([f"run by {r.owner.describe()}"] if r.owner.kind != "plain" else [])]
            if notes:
                lines.append(safe(f"  pid {r.holder.pid}: " + "; ".join(notes)))
    if a.stops:
        rows = [("ORDER", "OWNER", "STOPPED", "RESTORE")]
        rows += [(str(st.seq), st.owner.key,
                  when(st.stopped) if st.stopped is not None else "unknown",
                  (st.result or "pending") + (f": {st.why}" if st.why else ""))
                 for st in a.stops]
        lines += ["", f"stopped through their supervisors: {len(a.stops)}",
                  *table(rows, width=width, flex=(3,))]
    if a.findings:
        rows = [("SEVERITY", "RULE", "WHERE", "TEXT")]
        rows += [(f.severity, f.rule, f"{f.file}:{f.line}", f.text) for f in a.findings]
        lines += ["", f"found in the device logs after resume: {len(a.findings)}",
                  *table(rows, width=width, flex=(3, 2))]
    if a.events:
        rows = [("TIME", "STEP", "ACTION", "NOTE")]
        rows += [(when(e.time), e.phase, e.action or "-", e.note) for e in a.events]
        lines += ["", "after the attempt:", *table(rows, width=width, flex=(3,))]
    return lines


