"""After resume: what did the device logs and the jobs' journals say since the attempt began?

The sleep hook calls ``after_attempt`` on ``post``; the history stores the
findings, the journal gets one line per rule found.

The attempt runs from its start (the guard began) to the resume (the post
step). Device-side lines are stamped by the device's clock, which can lag
or lead the host's: lines from ``[logs] clock_slack_s`` before the start
are read too, and a finding stamped outside the attempt says so. A line of
a failure stamped earlier still, in a file written to during the attempt, is
not counted, and said: older, or a clock further behind, its stamp cannot
tell. A unit's journal is stamped by the host's journald, so it is read
from the start.
"""

from __future__ import annotations

import pwd
import time
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from suspendguard.config import Config
from suspendguard.logs.finding import STAMPED_BEFORE, Finding, Skipped
from suspendguard.logs.journal import TIMEOUT_S, UnitJournal, read_unit
from suspendguard.logs.rules import BY_ID
from suspendguard.logs.search import search_apart
from suspendguard.model import Unavailable
from suspendguard.record import Attempt, FindingRecord

# The device logs, then the journals of all units, inside systemd-sleep's 90 s for every
# hook: a log a job filled in a failure loop is read only in part rather than have the hook
# killed, its findings all lost. A glob whose folder does not answer is given up
# search.ANSWER_S after the files' time.
FILES_DEADLINE_S = 40.0
JOURNALS_DEADLINE_S = 30.0
# Paths not read named one a line in the hook's journal; the rest counted.
MAX_NOTES = 10


def holder_homes(attempt: Attempt) -> list[str]:
    """The home directories of the attempt's holders' users, searched for ``~`` besides
    root's; a user this host no longer knows has none."""
    homes = []
    for user in sorted({h.holder.user for h in attempt.holders if h.holder.user}):
        try:
            homes.append(pwd.getpwnam(user).pw_dir)
        except KeyError:
            continue
    return homes


def holder_log_dirs(attempt: Attempt) -> dict[str, tuple[int, ...]]:
    """The holders' own log folders (from their environments when scanned), each with the
    uids of the holders that named it: one of those users must own it to be read.
    A holder whose uid the history lacks names none."""
    folders: dict[str, set[int]] = {}
    for h in attempt.holders:
        if h.holder.uid is not None:
            for folder in h.holder.log_dirs:
                folders.setdefault(folder, set()).add(h.holder.uid)
    return {folder: tuple(sorted(uids)) for folder, uids in folders.items()}


def job_units(attempt: Attempt) -> list[str]:
    """The units whose journals hold the jobs' own output: every holder's but the guard's own.

    Holders the guard never signals by principle (PID 1, the guard and its
    ancestors) are left out: their output is not a job's.
    """
    return sorted({h.holder.unit for h in attempt.holders
                   if h.holder.unit and h.action != "never"})


@dataclass(frozen=True, slots=True)
class AfterResult:
    findings: tuple[Finding, ...]
    files_read: int = 0
    bytes_read: int = 0
    skipped: tuple[Skipped, ...] = ()
    journals: tuple[UnitJournal, ...] = ()
    known: int = 0  # findings left out: recorded with the attempt already

    def rules(self) -> tuple[str, ...]:
        """Rule ids found, in catalog order (causes before consequences)."""
        found = {f.rule for f in self.findings}
        return tuple(r for r in BY_ID if r in found)

    def journal_lines(self, attempt_id: int) -> list[str]:
        """One line per rule: who reported it, and when every line of it lay outside the attempt."""
        lines = []
        for rule_id in self.rules():
            rule = BY_ID[rule_id]
            found = [f for f in self.findings if f.rule == rule_id]
            units = sorted({f.unit for f in found if f.unit})
            who = []
            if any(f.unit is None for f in found):
                who.append("device")
            who += [f"{u}'s output" for u in units]
            # A failure the reference does not list says itself what failed.
            quote = next((f.described for f in found if f.described), rule.quote)
            line = (f"suspend attempt {attempt_id}: {' and '.join(who)} reported "
                    f"'{quote}' ({rule.id}): {rule.summary}")
            marks = [f.outside for f in found if f.outside is not None]
            if len(marks) == len(found):  # none of it inside: say how far the nearest was
                line += "; " + min(marks, key=lambda m: m.by_s).describe()
            lines.append(line)
        return lines

    def notes(self) -> list[str]:
        """What could not be read, for the journal: log paths not read (or read only in part),
        at most ``MAX_NOTES`` of them, and units whose journal is not available."""
        notes = [f"device log {s.path}: {s.reason}" for s in self.skipped[:MAX_NOTES]]
        if len(self.skipped) > MAX_NOTES:
            notes.append(f"device logs: {len(self.skipped) - MAX_NOTES} more path(s) not read "
                         "whole (suspendguard logs --since last-attempt names them)")
        for j in self.journals:
            if j.unavailable is not None:
                notes.append(f"journal of {j.unit}: not available: {j.unavailable.reason}")
            notes += [f"journal of {j.unit}: {note}" for note in j.notes]
        return notes

    def unread(self) -> list[str]:
        """Each device log path and journal not read, or read only in part: what it holds is
        unknown. Failures stamped before the attempt were read: they are no part of it."""
        files = [f"device log {s.path}: {s.reason}" for s in self.skipped
                 if STAMPED_BEFORE not in s.reason]
        journals = [f"journal of {j.unit}: "
                    + (f"not available: {j.unavailable.reason}" if j.unavailable is not None
                       else "; ".join(j.notes))
                    for j in self.journals if j.unavailable is not None or j.notes]
        return files + journals

    def nothing_found(self) -> str:
        """The line for no finding: what was read, and, where something was not, that for it
        the answer is unknown; failures stamped before the attempt are no clean bill either."""
        read = f"{self.files_read} device log file(s)"
        read += "".join(f", the journal of {j.unit}" for j in self.journals
                        if j.unavailable is None)
        early = len({s.path for s in self.skipped if STAMPED_BEFORE in s.reason})
        unread = len(self.unread())
        line = f"no documented device failure in {read}"
        if early:
            line = (f"documented device failure(s) stamped before the attempt in {early} "
                    "device log(s) (above), not counted (a device clock behind the host's?); "
                    f"none inside it in {read}")
        if self.known:
            line += f" besides the {self.known} already recorded with the attempt"
        if unread:
            line += (f"; {unread} log(s) not read or read only in part (above): what they hold "
                     "is unknown")
        return line


def after_attempt(
    config: Config,
    since: datetime,
    homes: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
    *,
    until: datetime | None = None,
    units: Sequence[str] = (),
    journalctl: str = "journalctl",
    recorded: Sequence[FindingRecord] = (),
    log_dirs: Mapping[str, Collection[int]] | None = None,
) -> AfterResult:
    """Scan the configured logs, the holders' own log folders, and each unit's journal, for
    lines written since ``since``.

    ``since``/``until``: the attempt's start and end (the resume); device log lines are
    read from ``[logs] clock_slack_s`` before ``since``. ``homes``: the home directories
    of the holders' users, searched for ``~`` besides root's. ``log_dirs``: the holders'
    own log folders (:func:`holder_log_dirs`), each read whole. ``recorded``: the attempt's
    findings recorded already (an earlier step's): each leaves out one finding equal to
    it. Never raises for unreadable logs or a missing journal: they are reported in
    ``skipped`` and ``journals``.
    """
    report = search_apart(
        config.logs.paths,
        homes=homes,
        since=since - timedelta(seconds=config.logs.clock_slack_s),
        max_bytes=config.logs.max_bytes,
        environ=environ,
        stop_at=time.monotonic() + FILES_DEADLINE_S,
        folders=log_dirs,
    )
    findings = [f.placed(since, until) for f in report.findings]
    # A glob of a variable this host leaves unset names no log, as a folder it lacks does not.
    unread = tuple(s for s in report.skipped
                   if not (s.path in config.logs.paths and s.reason.endswith(" is not set")))
    journals = []
    deadline = time.monotonic() + JOURNALS_DEADLINE_S
    for unit in dict.fromkeys(units):
        left = deadline - time.monotonic()
        if left <= 0:
            journals.append(UnitJournal(unit, unavailable=Unavailable(
                f"not read: the {JOURNALS_DEADLINE_S:g} s for journals had passed")))
            continue
        journal = read_unit(unit, since, timeout=min(TIMEOUT_S, left), journalctl=journalctl)
        journals.append(journal)
        findings += [f.placed(since, until) for f in journal.findings]
    new = _not_recorded(findings, recorded)
    return AfterResult(tuple(new), report.files_read, report.bytes_read, unread,
                       tuple(journals), len(findings) - len(new))


def _not_recorded(findings: Sequence[Finding], recorded: Sequence[FindingRecord]
                  ) -> list[Finding]:
    """``findings`` less one equal to each of ``recorded`` (the same rule, file, stamp, pid
    and text; the line number is left aside: it counts from where the read began)."""
    left = Counter(replace(r, line=0) for r in recorded)
    new = []
    for f in findings:
        key = replace(f.record(), line=0)
        if left[key]:
            left[key] -= 1
        else:
            new.append(f)
    return new
