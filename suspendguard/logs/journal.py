"""A unit's journal: the job's own console output, matched by the same rules as log files.

Most Ascend failures reach the job's stdout/stderr (torch_npu, MindSpore and
vLLM-Ascend print them there), which systemd puts in the unit's journal.
It is read with ``journalctl -o json`` through the runner rather than with
python-systemd: that is a C extension (Debian's python3-systemd) with no
wheel for every Python, while journalctl is wherever a journal is. The
command gets a timeout and its output a bound (``MAX_ENTRIES`` entries:
with ``--since``, journalctl's ``-n`` keeps the first from that time on
before systemd 254, the last from 254 on, and reaching it is a note;
``MAX_BYTES`` bytes), and no journalctl, no journal or a failing one is
"not available" (``Unavailable``), never an error. No journal at all
(journald's ``Storage=none``, or none this user may read) reads as an empty
one, without a word under ``-o json`` (systemd 252), so an empty answer is
told from it by asking for the journal's last entry. The kernel's log is
read within the same bounds, and reaching one is a note there too.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from suspendguard.logs.entries import MAX_CONTINUATION, MAX_TEXT, is_continuation, parse_entry
from suspendguard.logs.finding import Finding
from suspendguard.logs.matching import Rule
from suspendguard.logs.naming import name_record
from suspendguard.logs.rules import RULES
from suspendguard.model import Unavailable
from suspendguard.system import runner
from suspendguard.system.runner import RunResult

JOURNALCTL = "journalctl"
MAX_ENTRIES = 20000
MAX_BYTES = 16 * 1024 * 1024
TIMEOUT_S = 10.0
# What a finding from a unit's journal has for its file: "journal:UNIT".
SOURCE_PREFIX = "journal:"
# __REALTIME_TIMESTAMP comes with every entry of -o json whatever is asked.
FIELDS = ("MESSAGE", "_PID")
# What systemd accepts in a unit name (unit_name_is_valid), and its types.
_UNIT_NAME = re.compile(r"[A-Za-z0-9:_.\\@-]{1,255}")
_UNIT_TYPES = ("service", "socket", "device", "mount", "automount", "swap", "target", "path",
               "timer", "slice", "scope")

Runner = Callable[[Sequence[str], float, int], RunResult]


def from_journal(file: str) -> bool:
    """Whether a finding's ``file`` is a unit's journal (read from the attempt's start on,
    by the journal's own epoch) rather than a device log."""
    return file.startswith(SOURCE_PREFIX)


def unit_name(text: str) -> str:
    """A unit name as journalctl would take it: ``job`` means ``job.service``.

    Raises ValueError, saying why, for what cannot be a unit name.
    """
    if not _UNIT_NAME.fullmatch(text) or text.startswith("-"):
        raise ValueError(f"{text!r} is not a systemd unit name")
    kind = text.rpartition(".")[2] if "." in text else ""
    return text if kind in _UNIT_TYPES else text + ".service"


@dataclass(frozen=True, slots=True)
class UnitJournal:
    """What one unit's journal said, how much of it was read, or why it could not be."""

    unit: str
    findings: tuple[Finding, ...] = ()
    entries_read: int = 0
    bytes_read: int = 0
    notes: tuple[str, ...] = ()
    unavailable: Unavailable | None = None

    @property
    def source(self) -> str:
        return SOURCE_PREFIX + self.unit

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"unit": self.unit, "available": self.unavailable is None}
        if self.unavailable is not None:
            doc["reason"] = self.unavailable.reason
        doc.update(entries_read=self.entries_read, bytes_read=self.bytes_read,
                   notes=list(self.notes))
        return doc


def journal_argv(unit: str, since: datetime | None, until: datetime | None,
                 journalctl: str = JOURNALCTL) -> list[str]:
    """The journalctl command line for one unit's own output.

    The unit's processes' lines are those with ``_SYSTEMD_UNIT`` (a system
    unit, a session scope) or ``_SYSTEMD_USER_UNIT`` (a user's unit): matched
    by field, not ``--unit``, which adds systemd's own lines about the unit
    and misses user units. ``--all``: without it fields over 4 KiB are null.
    """
    argv = [journalctl, "-o", "json", "--all", "--quiet", "--no-pager",
            f"--output-fields={','.join(FIELDS)}", "-n", str(MAX_ENTRIES)]
    if since is not None:
        argv.append(f"--since=@{since.timestamp():.6f}")
    if until is not None:
        argv.append(f"--until=@{until.timestamp():.6f}")
    return [*argv, f"_SYSTEMD_UNIT={unit}", "+", f"_SYSTEMD_USER_UNIT={unit}"]


def _message(value: Any) -> str | None:
    """MESSAGE as journalctl prints it: a string, or bytes as numbers when not plain text."""
    if isinstance(value, list) and value and not isinstance(value[0], int):
        value = value[0]  # the field given more than once: the first
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(b, int) and 0 <= b < 256 for b in value):
        return bytes(value).decode("utf-8", "replace").replace("\0", " ")
    return None


def _time(value: Any) -> datetime | None:
    """The entry's epoch as naive local time, the device logs' kind of stamp. In the hour the
    clocks go back it is ambiguous, so it is not compared with the attempt's start: the
    journal was read from that start on (``--since=@EPOCH``)."""
    try:
        usec = int(value)
    except (TypeError, ValueError):
        return None
    sec, rest = divmod(usec, 1_000_000)
    return datetime.fromtimestamp(sec) + timedelta(microseconds=rest)


def _pid(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


@dataclass(slots=True)
class _Group:
    number: int  # the entry's number among those read, from 1
    pid: int | None
    time: datetime | None
    lines: list[str]


def parse_journal(text: str, unit: str, rules: Sequence[Rule] = RULES
                  ) -> tuple[list[Finding], int, list[str]]:
    """``journalctl -o json`` output -> findings, entries read, notes.

    Indented lines continue the entry above from the same process, as in
    log files (RecentErrMsg blocks, tracebacks): journald stores each line
    of a job's output as an entry of its own.
    """
    groups: list[_Group] = []
    entries = bad = 0
    for raw in text.split("\n"):  # one entry a line; U+2028 and the like are text
        if not raw.strip():
            continue
        try:
            doc = json.loads(raw)
        except ValueError:
            bad += 1
            continue
        message = _message(doc.get("MESSAGE")) if isinstance(doc, dict) else None
        if message is None:
            bad += 1
            continue
        entries += 1
        pid, when = _pid(doc.get("_PID")), _time(doc.get("__REALTIME_TIMESTAMP"))
        for line in message.split("\n"):
            last = groups[-1] if groups else None
            if (last is not None and last.pid == pid and is_continuation(line)
                    and len(last.lines) <= MAX_CONTINUATION):
                last.lines.append(line)
            else:
                groups.append(_Group(entries, pid, when, [line.rstrip("\r")]))
    source = SOURCE_PREFIX + unit
    findings = []
    for g in groups:
        joined = "\n".join(g.lines)
        named = name_record(joined, rules)
        rule = named.rule
        if rule is None:
            continue
        entry = parse_entry(source, g.number, g.lines)
        # The journal's time, not the line's own: journald stamps each line
        # with the host's clock when it arrives, and every line has one.
        findings.append(Finding(rule.id, rule.severity, source, g.number, g.time or entry.time,
                                entry.pid or g.pid, joined[:MAX_TEXT], unit, code=named.code,
                                described=named.described))
    notes = [f"{bad} journal line(s) not understood, skipped"] if bad else []
    return findings, entries, notes


def _no_journal(journalctl: str, timeout: float, run: Runner) -> Unavailable | None:
    """Why an empty answer is no journal read: none kept, none this user may read, or the
    question of its last entry failing. None where the journal holds an entry."""
    if timeout <= 0:
        return Unavailable(f"{journalctl} answered nothing, and no time was left to ask "
                           "whether it keeps a journal at all")
    last = run([journalctl, "-o", "json", "--quiet", "--no-pager", "--output-fields=MESSAGE",
                "-n", "1"], timeout, 1024 * 1024)
    if not last.ok and not last.truncated:
        return Unavailable(last.describe_failure())
    if not last.stdout.strip():
        return Unavailable(f"{journalctl}: the journal holds no entry at all (journald keeps "
                           "none here, Storage=none, or none this user may read)")
    return None


def read_unit(unit: str, since: datetime | None, until: datetime | None = None, *,
              timeout: float = TIMEOUT_S, journalctl: str = JOURNALCTL,
              run: Runner = runner.run_bounded, rules: Sequence[Rule] = RULES) -> UnitJournal:
    """One unit's journal between ``since`` and ``until``; never raises for a missing journal."""
    asked = time.monotonic()
    result = run(journal_argv(unit, since, until, journalctl), timeout, MAX_BYTES)
    if not result.ok and not result.truncated:
        return UnitJournal(unit, unavailable=Unavailable(result.describe_failure()))
    if not result.stdout.strip() and (
            gone := _no_journal(journalctl, timeout - (time.monotonic() - asked), run)):
        return UnitJournal(unit, unavailable=gone)
    findings, entries, notes = parse_journal(result.stdout, unit, rules)
    notes += _bounds_reached(entries, result.truncated)
    return UnitJournal(unit, tuple(findings), entries, len(result.stdout.encode()), tuple(notes))


def _bounds_reached(entries: int, truncated: bool) -> list[str]:
    """What was left unread by a bound: ``entries`` read of ``-n``'s, output cut at MAX_BYTES."""
    notes = []
    if entries >= MAX_ENTRIES:
        # journalctl stops at -n without a word; before systemd 254 it keeps the first
        # entries from --since on, from 254 the last ones before --until.
        notes.append(f"the bound of {MAX_ENTRIES} entries reached (journalctl -n): entries "
                     "of the time asked beyond it not read")
    if truncated:
        notes.append(f"only the first {MAX_BYTES} bytes of journalctl's output read")
    return notes


def kernel_argv(since: datetime, journalctl: str = JOURNALCTL) -> list[str]:
    """The journalctl command line for this boot's kernel messages from ``since`` on."""
    return [journalctl, "-k", "-o", "json", "--all", "--quiet", "--no-pager",
            "--output-fields=MESSAGE", "-n", str(MAX_ENTRIES), f"--since=@{since.timestamp():.6f}"]


@dataclass(frozen=True, slots=True)
class KernelLog:
    """The kernel's messages read, one string each, and what a bound left unread (``notes``)."""

    lines: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def read_kernel(since: datetime, *, timeout: float = TIMEOUT_S, journalctl: str = JOURNALCTL,
                run: Runner = runner.run_bounded) -> KernelLog | Unavailable:
    """The kernel's messages since ``since`` (this boot); never raises."""
    asked = time.monotonic()
    result = run(kernel_argv(since, journalctl), timeout, MAX_BYTES)
    if not result.ok and not result.truncated:
        return Unavailable(result.describe_failure())
    if not result.stdout.strip() and (
            gone := _no_journal(journalctl, timeout - (time.monotonic() - asked), run)):
        return gone
    out, entries = [], 0
    for raw in result.stdout.split("\n"):
        if not raw.strip():
            continue
        entries += 1  # one a line, each counted by -n, read or not
        try:
            doc = json.loads(raw)
        except ValueError:
            continue
        message = _message(doc.get("MESSAGE")) if isinstance(doc, dict) else None
        if message is not None:
            out.append(message)
    return KernelLog(tuple(out), tuple(_bounds_reached(entries, result.truncated)))
