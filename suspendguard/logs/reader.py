"""Reading one open log file fast: the catalog's needles searched in windows of bytes.

It does not parse every line: the needles, and the shapes of vendor codes
(``codes``), are searched for in big chunks (the C library's ``memmem`` and
a regex with a literal prefix, each one pass over a window in C) and only
the entries around a hit are decoded, parsed (``entries``) and named
(``naming.name_record``). At most
``max_bytes`` are read, from the file's end, where the newest lines are;
lines with NUL bytes or bad UTF-8 are skipped and counted.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from suspendguard.logs.codes import codes_in, table, window_search
from suspendguard.logs.entries import HEAD_SPAN, MAX_CONTINUATION, MAX_TEXT, parse_entry, parse_head_time
from suspendguard.logs.finding import STAMPED_BEFORE, TIME_RAN_OUT, Finding, Skipped, UnknownCode
from suspendguard.logs.matching import Rule, needles
from suspendguard.logs.memmem import Data, finder
from suspendguard.logs.naming import name_record
from suspendguard.logs.rules import RULES
from suspendguard.logs.safe_open import describe

# Windows that fit in L2 cache: every needle pass then reads from cache (measured ~10 % faster
# than 16 MiB windows). Longer lines than this are taken whole.
CHUNK = 1024 * 1024
# A line longer than this is cut into pieces, each read as a line of its own.
LONG_LINE = 16 * 1024 * 1024
# How far back a masked line (no time of its own) looks for the time of the
# line above it, for --since/--until.
INHERIT_LINES = 64
INHERIT_BYTES = 256 * 1024
# Unrecognised vendor codes kept per file: notes for --verbose, not findings.
MAX_UNKNOWN = 100
# Findings listed per rule and file: a job in a failure loop writes the same line a
# million times, and each finding is kept in memory and in the history. The first ones
# and the newest are listed, the rest counted.
MAX_PER_RULE = 200

@dataclass(frozen=True, slots=True)
class FileResult:
    """What one file said, how much of it was read, and what of it was not."""

    findings: tuple[Finding, ...]
    bytes_read: int
    skipped: tuple[Skipped, ...]
    unknown_codes: tuple[UnknownCode, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "findings": [f.to_json() for f in self.findings],
            "bytes_read": self.bytes_read,
            "skipped": [k.to_json() for k in self.skipped],
            "unknown_codes": [u.to_json() for u in self.unknown_codes],
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> FileResult:
        return cls(
            tuple(Finding.from_json(f) for f in doc["findings"]),
            doc["bytes_read"],
            tuple(Skipped.from_json(k) for k in doc["skipped"]),
            tuple(UnknownCode.from_json(u) for u in doc.get("unknown_codes", ())),
        )


def _line_bounds(buf: Data, pos: int, lo: int, hi: int) -> tuple[int, int]:
    start = buf.rfind(b"\n", lo, pos) + 1 or lo
    end = buf.find(b"\n", pos, hi)
    return max(start, lo), (hi if end == -1 else end)


def _is_blank_start(buf: Data, start: int, hi: int) -> bool:
    return start < hi and buf[start] in (0x20, 0x09)


def _decode(raw: Data) -> str | None:
    # NULs before the text are a file's padding after a power loss (the size written, the
    # data not): the line the boot appended after them is read. NULs inside it: binary.
    raw = raw.lstrip(b"\0")
    if b"\0" in raw:
        return None
    try:
        return raw.decode("utf-8").rstrip("\r")
    except UnicodeDecodeError:
        return None


class _Window:
    """Search one file's bytes for the catalog's needles, a window at a time.

    Every method works on ``buf[lo:hi]`` through offsets: slicing a 16 MiB
    window would copy it, and copies cost as much as the search itself.
    """

    def __init__(
        self,
        path: str,
        rules: Sequence[Rule],
        since: datetime | None,
        until: datetime | None,
    ) -> None:
        self.path = path
        self.rules = rules
        self.search = window_search(needles(rules))
        self.needles = [n.encode() for n in self.search.rest]
        self.since = since
        self.until = until
        self.findings: list[Finding] = []
        self.unknown: list[UnknownCode] = []
        self.nul_lines = 0
        self.bad_lines = 0
        # Failures in lines with no time, and none above: said, never counted.
        self.unplaced: dict[str, int] = {}
        self.early: dict[str, int] = {}  # failures stamped before ``since``: said, not counted
        # The time of the last line with one in the windows before (for --since/--until):
        # a masked line at a window's start takes it, as it takes the line above's.
        self.carried: datetime | None = None
        self.listed: dict[str, int] = {}  # findings listed, by rule
        self.newest: dict[str, int] = {}  # where each rule's newest finding is in ``findings``
        self.unlisted: dict[str, int] = {}  # findings past MAX_PER_RULE, by rule

    def keep(self, finding: Finding) -> None:
        """``finding`` listed while its rule has fewer than MAX_PER_RULE; past that it takes
        the place of the rule's newest (the file is read in order), which is counted."""
        rule = finding.rule
        if self.listed.get(rule, 0) < MAX_PER_RULE:
            self.listed[rule] = self.listed.get(rule, 0) + 1
            self.newest[rule] = len(self.findings)
            self.findings.append(finding)
        else:
            self.findings[self.newest[rule]] = finding
            self.unlisted[rule] = self.unlisted.get(rule, 0) + 1

    def account_junk(self, buf: Data, lo: int, hi: int) -> None:
        # The common case, clean text, is decided in one pass at C speed.
        if buf.find(b"\0", lo, hi) == -1:
            if buf.isascii():
                return
            try:
                buf[lo:hi].decode("utf-8")
                return
            except UnicodeDecodeError:
                pass
        for raw in buf[lo:hi].split(b"\n"):
            if b"\0" in raw.lstrip(b"\0"):
                self.nul_lines += 1
            else:
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError:
                    self.bad_lines += 1

    def heads(self, buf: Data, lo: int, hi: int) -> list[int]:
        """Start offsets of the entries that contain a needle."""
        found: set[int] = set()
        find = finder(buf)
        for needle in self.needles:
            i = find(needle, lo, hi)
            while i != -1:
                start, end = _line_bounds(buf, i, lo, hi)
                found.add(self._head_of(buf, start, lo, hi))
                # One hit per line is enough: go on after it, which also keeps a
                # megabyte line full of needles linear.
                i = find(needle, end, hi)
        for scan in self.search.scans:
            i = scan.next_at(buf, lo, hi, lo)
            while i != -1:
                start, end = _line_bounds(buf, i, lo, hi)
                found.add(self._head_of(buf, start, lo, hi))
                i = scan.next_at(buf, lo, hi, end)
        return sorted(found)

    def _head_of(self, buf: Data, start: int, lo: int, hi: int) -> int:
        """The line a continuation line belongs to (itself when it is a head)."""
        pos = start
        for _ in range(MAX_CONTINUATION):
            if pos <= lo or not _is_blank_start(buf, pos, hi):
                break
            pos = _line_bounds(buf, pos - 1, lo, hi)[0]
        return start if _is_blank_start(buf, pos, hi) else pos

    def entry_lines(self, buf: Data, head: int, lo: int, hi: int) -> list[str]:
        """The entry's lines, decoded, junk lines dropped; [] when the head is junk."""
        start, end = _line_bounds(buf, head, lo, hi)
        first = _decode(buf[start:end])
        if first is None:
            return []
        lines = [first]
        pos = end + 1
        n = 0
        while n < MAX_CONTINUATION and _is_blank_start(buf, pos, hi):
            s, e = _line_bounds(buf, pos, lo, hi)
            text = _decode(buf[s:e])
            if text is not None:
                lines.append(text)
            pos = e + 1
            n += 1
        return lines

    def inherited_time(self, buf: Data, head: int, lo: int) -> datetime | None:
        """The time of the nearest line above that has one (bounded look-back)."""
        pos = head
        floor = max(lo, head - INHERIT_BYTES)
        for _ in range(INHERIT_LINES):
            if pos <= floor:
                return self.carried if floor == lo else None
            prev = buf.rfind(b"\n", floor, pos - 1) + 1 or floor
            text = _decode(buf[prev:min(pos - 1, prev + HEAD_SPAN)])
            if text is not None:
                when = parse_head_time(text)
                if when is not None:
                    return when
            pos = prev
        return None

    def read_window(self, buf: Data, lo: int, hi: int, first_line: int,
                    count_all: bool = True) -> int:
        """Classify the entries of ``buf[lo:hi]``, whose first line has number ``first_line``.

        Returns the number of the line after ``hi`` (counted only when asked:
        the last window of a file need not count its tail).
        """
        self.account_junk(buf, lo, hi)
        line = first_line
        last = lo
        for head in self.heads(buf, lo, hi):
            line += buf.count(b"\n", last, head)
            last = head
            lines = self.entry_lines(buf, head, lo, hi)
            if not lines:
                continue
            text = "\n".join(lines)
            named = name_record(text, self.rules)
            if named.rule is None and not named.unknown:
                continue
            entry = parse_entry(self.path, line, lines)
            if self.since is not None or self.until is not None:
                when = entry.time or self.inherited_time(buf, head, lo)
                # A line with no time of its own, and none above it, cannot be
                # placed inside the bounds: leave it out rather than guess.
                if when is None:
                    if named.rule is not None:
                        self.unplaced[named.rule.id] = self.unplaced.get(named.rule.id, 0) + 1
                    continue
                if self.since is not None and when < self.since:
                    if named.rule is not None:
                        self.early[named.rule.id] = self.early.get(named.rule.id, 0) + 1
                    continue
                if self.until is not None and when > self.until:
                    continue
            if named.rule is None:
                room = MAX_UNKNOWN - len(self.unknown)
                self.unknown.extend(UnknownCode(c, self.path, line, text[:MAX_TEXT])
                                    for c in named.unknown[:max(room, 0)])
                continue
            self.keep(Finding(named.rule.id, named.rule.severity, self.path, line, entry.time,
                              entry.pid, text[:MAX_TEXT], code=named.code,
                              described=named.described))
        if self.since is not None or self.until is not None:
            self.carried = self.inherited_time(buf, hi, lo)
        return line + buf.count(b"\n", last, hi) if count_all else line


def _safe_cut(buf: Data, lo: int, hi: int) -> int:
    """Where to end a window so no entry is split: before its last head line (also when the
    window ends at a newline: the line after it, not seen, may continue that entry)."""
    pos = hi
    for _ in range(MAX_CONTINUATION + 2):  # the lines of an entry, and the one not seen
        nl = buf.rfind(b"\n", lo, pos)
        if nl == -1:
            return lo
        if nl + 1 < hi and not _is_blank_start(buf, nl + 1, hi):
            return nl + 1
        pos = nl
    return buf.rfind(b"\n", lo, hi) + 1 or lo


def prepare(rules: Sequence[Rule]) -> None:
    """Load and compile now what reading does on first use: the code table, the regexes.

    Called before files are shared among forked workers: each inherits them
    rather than parsing the table again (about 10 ms of CPU a worker).
    """
    table()
    window_search(needles(rules))
    codes_in("")
    for rule in rules:
        for pattern in rule.patterns:
            _ = pattern.compiled


def _read_into(buf: bytearray, fd: int, want: int, offset: int, path: str,
               skipped: list[Skipped]) -> bytearray:
    """Up to ``want`` bytes at ``offset``: ``buf`` itself when they fill it, else a copy."""
    try:
        with memoryview(buf) as view:
            got = os.preadv(fd, [view[:want]], offset)
    except OSError as exc:
        skipped.append(Skipped(path, f"read error at byte {offset}: {describe(exc)}"))
        got = 0
    return buf if got == len(buf) else buf[:got]


def read_file(
    fd: int,
    path: str,
    max_bytes: int,
    rules: Sequence[Rule] = RULES,
    since: datetime | None = None,
    until: datetime | None = None,
    chunk: int = CHUNK,
    *,
    stop_at: float | None = None,
) -> FileResult:
    """Read at most ``max_bytes`` from the end of an open file and classify them.

    The file is read in windows; a window ends before its last entry, and
    the next window is read again from there (from the page cache) rather
    than glued to the rest, which would copy every byte once more.
    """
    window = _Window(path, rules, since, until)
    skipped: list[Skipped] = []
    size = os.fstat(fd).st_size
    start = offset = max(0, size - max_bytes)
    stop = start + max_bytes
    line = 1
    # Reading from the middle: the first line is the tail of a longer one.
    # It is read all the same (a needle there is as real as any; a file of
    # one long line is nothing else), from its first whole character.
    fragment = start > 0
    # One buffer read into again and again: a fresh bytes object per window
    # costs its allocation and page faults, about half the cost of the read.
    buf = bytearray(min(chunk, max_bytes, max(size - start, 0)) or 1)
    while offset < stop:
        if stop_at is not None and time.monotonic() >= stop_at:
            skipped.append(Skipped(path, f"read only in part, to line {line}: {TIME_RAN_OUT}"))
            break
        want = min(chunk, stop - offset)
        while True:
            if len(buf) < want:
                buf = bytearray(want)
            data = _read_into(buf, fd, want, offset, path, skipped)
            hi = len(data)
            at_end = hi < want or offset + hi >= stop
            lo = 0
            if fragment:
                while lo < min(hi, 3) and 0x80 <= data[lo] < 0xC0:
                    lo += 1  # UTF-8 continuation bytes of a character cut in two
            cut = hi if at_end else _safe_cut(data, lo, hi)
            if cut > lo or at_end or want >= LONG_LINE:
                break
            # No whole entry in this window: a long line. Read a bigger one.
            want = min(want * 2, stop - offset, LONG_LINE)
        if not data:
            break  # end of file, or the file was truncated under us
        fragment = False
        if cut <= lo:
            cut = hi  # longer than LONG_LINE: take it as it is
        line = window.read_window(data, lo, cut, line, count_all=cut < hi or not at_end)
        offset += cut
        if at_end and cut >= hi:
            break
    total = min(offset, stop) - start
    if size > max_bytes:
        skipped.append(Skipped(
            path,
            f"only the last {max_bytes} of {size} bytes read ([logs] max_bytes); "
            "line numbers count from there",
        ))
    skipped += _left_out(window, path)
    return FileResult(tuple(window.findings), total, tuple(skipped), tuple(window.unknown))


def _left_out(window: _Window, path: str) -> list[Skipped]:
    """The file's lines read and not counted, or not listed, each kind said."""
    notes = []
    if window.nul_lines:
        notes.append(Skipped(path, f"{window.nul_lines} line(s) with NUL bytes (binary) skipped"))
    if window.bad_lines:
        notes.append(Skipped(path, f"{window.bad_lines} line(s) not UTF-8 text skipped"))
    for rule_id, count in window.unlisted.items():
        notes.append(Skipped(path, f"{count} more line(s) of {rule_id} than the "
                             f"{MAX_PER_RULE} listed (the newest among them): read, not listed"))
    for rule_id, count in window.unplaced.items():
        notes.append(Skipped(path, f"{count} line(s) of {rule_id} with no time, and none "
                             "above them, not placed in the time asked: not counted"))
    # The file was written to since then (the walk reads no other): a line stamped before
    # may be older, or the device's clock behind the host's; which, its stamp cannot say.
    for rule_id, count in window.early.items():
        notes.append(Skipped(path, f"{count} line(s) of {rule_id} {STAMPED_BEFORE}, in a file "
                             "written to since: not counted (a device clock behind the host's?)"))
    return notes
