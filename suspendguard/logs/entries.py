"""Ascend log lines -> entries: level, module, pid, time, and the message.

The grammar, from the vendor's samples (tests/fixtures/ascend-logs/):

    [LEVEL] MODULE(PID,PNAME):YYYY-MM-DD-HH:MM:SS.mmm.uuu rest

with these variants, all seen in documented lines:
- no colon after the parenthesis: ``DRV(18401,main)2023-05-29-...``;
- three fields in the parenthesis (MindSpore: ``CORE(51545,ffff8ba74480,python)``);
- masked older forms, no pid and no time: ``[ERROR] RUNTIME ****** EventIdAlloc:...``
  and ``[INFO] RUNTIME EventIdAlloc:id = -1``;
- device-side (TSCH) rest: ``SEQ (dieid:N,cpuid:N) file.c:line func: msg``;
- runtime rest: ``[file.cc:line]tid Func:msg``, or older ``tid Func:msg``;
- RecentErrMsg blocks: a head line, then lines indented with blanks that
  belong to it (``Possible Cause: ...``, ``TraceBack ...``, one per frame).

Every structural regex runs on a bounded prefix of the line and has no
unbounded repetition, so a megabyte-long line costs one slice, not a search.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime

# Headers are short; look no further than this into a line for structure.
HEAD_SPAN = 512
# A block longer than this is not a RecentErrMsg block: later indented lines
# start entries of their own, so one entry never grows without bound.
MAX_CONTINUATION = 64
# The text kept for a finding; the whole line is still what rules match.
MAX_TEXT = 2000

_HEADER = re.compile(
    r"\[(?P<level>[A-Z]{3,12})\] ?"
    r"(?:(?P<module>[A-Z][A-Z0-9_]{0,31})(?=[( ]|$))?"
    r"(?:\((?P<paren>[^()\n]{0,160})\))?"
    r"(?P<colon>:)?"
    r"(?P<masked> ?\*{6})?"
    r" ?(?P<time>[0-9]{4}-[0-9]{2}-[0-9]{2}-[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{1,3}\.[0-9]{1,3})?"
    r" ?"
)
_TIME = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})-([0-9]{2}):([0-9]{2}):([0-9]{2})\.([0-9]{1,3})\.([0-9]{1,3})"
)
# "1 (dieid:0,cpuid:0) device_management_plat.c:563 suspend_ack: msg"
_DEVICE = re.compile(
    r"(?:(?P<seq>[0-9]{1,12}) )?\((?:dieid:(?P<die>[0-9]{1,6}),)?cpuid:(?P<cpu>[0-9]{1,6})\) ?"
    r"(?P<src>[\w./-]{1,200}:[0-9]{1,9}) (?P<func>\w{1,128}): ?"
)
# "[event_david.cc:101]277881 GenEventId:msg", "[pywrapper.cc:33]InitPyLogger msg"
_RUNTIME = re.compile(
    r"\[(?P<src>[\w./-]{1,200}:[0-9]{1,9})\](?P<tid>[0-9]{1,12})? ?(?:(?P<func>\w{1,128}):)?"
)
# "18409 EventIdAlloc:drvEventIdAlloc:errorcode = 7" (older runtime lines)
_TID_FUNC = re.compile(r"(?P<tid>[0-9]{1,12}) (?P<func>\w{1,128}):")
# "RecentErrMsg: [PID: 1613532] 2026-03-24-12:14:45.885.234 Memory_..."
_RECENT = re.compile(r"\[PID: ?(?P<pid>[0-9]{1,10})\] ?")


@dataclass(frozen=True, slots=True)
class Entry:
    """One log entry: a line, plus the indented lines that continue it."""

    file: str
    line: int
    text: str
    message: str
    kind: str  # host | device | runtime | masked | plain
    level: str | None = None
    module: str | None = None
    pid: int | None = None
    pname: str | None = None
    tid: int | None = None
    time: datetime | None = None
    source: str | None = None
    func: str | None = None
    continued: int = 0  # how many continuation lines were joined into text


def parse_time(stamp: str) -> datetime | None:
    """``2023-05-29-17:53:11.569.787`` -> naive local datetime; None when impossible."""
    m = _TIME.fullmatch(stamp)
    if not m:
        return None
    y, mo, d, h, mi, s, ms, us = (int(g) for g in m.groups())
    try:
        return datetime(y, mo, d, h, mi, s, ms * 1000 + us)
    except ValueError:
        return None


def _pid(field: str) -> int | None:
    try:
        pid = int(field)
    except ValueError:
        return None
    # Device-side lines print -1: there is no host process.
    return pid if pid > 0 else None


@dataclass(frozen=True, slots=True)
class _Head:
    level: str | None
    module: str | None
    pid: int | None
    pname: str | None
    tid: int | None
    time: datetime | None
    source: str | None
    func: str | None
    kind: str
    start: int  # where the message begins in the line


def _parse_head(line: str) -> _Head:
    head = line[:HEAD_SPAN]
    m = _HEADER.match(head)
    if not m:
        return _Head(None, None, None, None, None, None, None, None, "plain", 0)
    pid = pname = None
    if m["paren"] is not None:
        fields = m["paren"].split(",")
        pid = _pid(fields[0].strip())
        if len(fields) > 1:
            # Device-side lines print "-1,null": no host process, no name.
            pname = fields[-1].strip()
            pname = None if pname in ("", "null") else pname
    when = parse_time(m["time"]) if m["time"] else None
    if m["masked"] or (m["module"] and m["paren"] is None):
        kind = "masked"
    else:
        kind = "host" if m["module"] else "plain"
    pos = m.end()
    tid = source = func = None
    rest = head[pos:]
    dm = _DEVICE.match(rest)
    if dm:
        kind, source, func, pos = "device", dm["src"], dm["func"], pos + dm.end()
    else:
        rm = _RUNTIME.match(rest)
        if rm:
            kind, source, func = "runtime", rm["src"], rm["func"]
            tid = int(rm["tid"]) if rm["tid"] else None
            pos += rm.end()
        else:
            tm = _TID_FUNC.match(rest)
            if tm:
                tid, func, pos = int(tm["tid"]), tm["func"], pos + tm.end()
    if pid is None or when is None:
        # A RecentErrMsg head carries its pid and time after the module.
        rest = head[pos:]
        if rest.startswith("RecentErrMsg:"):
            rest = rest[len("RecentErrMsg:"):].lstrip(" ")
        pm = _RECENT.match(rest)
        if pm:
            pid = pid or _pid(pm["pid"])
            after = rest[pm.end():]
            tm2 = _TIME.match(after)
            if tm2:
                when = when or parse_time(tm2.group(0))
    return _Head(m["level"], m["module"], pid, pname, tid, when, source, func, kind, pos)


def parse_head_time(line: str) -> datetime | None:
    """The timestamp of one line, if its header (or RecentErrMsg head) has one."""
    return _parse_head(line).time


def is_continuation(line: str) -> bool:
    """Indented lines continue the entry above (RecentErrMsg blocks, tracebacks)."""
    return line[:1] in (" ", "\t")


def parse_entry(file: str, number: int, lines: list[str]) -> Entry:
    """An entry from its head line and its continuation lines."""
    first = lines[0]
    h = _parse_head(first)
    text = "\n".join(lines)
    return Entry(
        file=file,
        line=number,
        text=text,
        message=first[h.start:],
        kind=h.kind,
        level=h.level,
        module=h.module,
        pid=h.pid,
        pname=h.pname,
        tid=h.tid,
        time=h.time,
        source=h.source,
        func=h.func,
        continued=len(lines) - 1,
    )


def iter_entries(lines: Iterable[tuple[int, str]], file: str) -> Iterator[Entry]:
    """Group numbered lines (no trailing newline) into entries."""
    number = 0
    block: list[str] = []
    for n, line in lines:
        if block and is_continuation(line) and len(block) <= MAX_CONTINUATION:
            block.append(line)
            continue
        if block:
            yield parse_entry(file, number, block)
        number, block = n, [line]
    if block:
        yield parse_entry(file, number, block)


def read_text(text: str, file: str = "<text>") -> list[Entry]:
    """Every entry of a log text (lines numbered from 1)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return list(iter_entries(((i, ln.rstrip("\r")) for i, ln in enumerate(lines, 1)), file))
