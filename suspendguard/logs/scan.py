"""Where the logs are, and reading them safely and fast.

The guard runs as root and the logs lie in users' homes: they are untrusted.
So every path is opened one component at a time relative to its parent's
descriptor, never following a symbolic link a user could have planted:
- the fixed start of a glob (``/home/alice/ascend/log``) may pass through a
  symlink only if root owns it (a user cannot create one);
- below that, no symlink is followed, file or directory, whoever owns it;
- files are opened O_NOFOLLOW | O_NONBLOCK and must be regular files;
- at most ``max_bytes`` are read per file, from its end, where the newest
  lines are; lines with NUL bytes or bad UTF-8 are skipped and counted.

Reading is fast because it does not parse every line: the rule catalog's
needles are searched for in big chunks (bytes.find runs at memory speed) and
only the records around a hit are parsed and classified.
"""

from __future__ import annotations

import errno
import os
import pwd
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

from suspendguard.logs.finding import Finding
from suspendguard.logs.reader import HEAD_SPAN, MAX_CONTINUATION, MAX_TEXT, make_record, parse_head_time
from suspendguard.logs.rules import RULES, Rule, classify, needles
from suspendguard.system.workers import run_shares

if TYPE_CHECKING:
    from typing import Any

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
# Windows that fit in L2 cache: every needle pass then reads from cache (measured ~10 % faster
# than 16 MiB windows). Longer lines than this are taken whole.
CHUNK = 1024 * 1024
# A line longer than this is cut into pieces, each read as a line of its own.
LONG_LINE = 16 * 1024 * 1024
MAX_DEPTH = 16
MAX_FILES = 20000
MAX_SYMLINK_HOPS = 40
# How far back a masked line (no time of its own) looks for the time of the
# line above it, for --since/--until.
INHERIT_LINES = 64
INHERIT_BYTES = 256 * 1024

_WILD = re.compile(r"[*?\[]")
_VAR = re.compile(r"\$(?:\{(\w+)\}|(\w+))")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class Skipped:
    path: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class ScanReport:
    findings: tuple[Finding, ...]
    files_read: int
    bytes_read: int
    skipped: tuple[Skipped, ...]
    files_older: int = 0  # left unread because modified before --since

    def to_json(self) -> dict[str, Any]:
        return {
            "findings": [f.to_json() for f in self.findings],
            "files_read": self.files_read,
            "bytes_read": self.bytes_read,
            "files_older_than_since": self.files_older,
            "skipped": [s.to_json() for s in self.skipped],
        }


class _Refused(Exception):
    pass


# --- where to look ---------------------------------------------------------


def root_home() -> str:
    try:
        return pwd.getpwuid(0).pw_dir or "/root"
    except KeyError:  # pragma: no cover - a passwd without root
        return "/root"


def expand(
    pattern: str, homes: Sequence[str] = (), environ: Mapping[str, str] | None = None
) -> tuple[list[str], list[Skipped]]:
    """A configured glob -> absolute globs: variables filled in, ``~`` for each home.

    An entry whose variable is unset or empty is skipped (it would otherwise
    turn ``$ASCEND_PROCESS_LOG_PATH/**`` into ``/**``).
    """
    env = os.environ if environ is None else environ
    missing = [a or b for a, b in _VAR.findall(pattern) if not env.get(a or b)]
    if missing:
        return [], [Skipped(pattern, f"${missing[0]} is not set")]
    text = _VAR.sub(lambda m: env[m.group(1) or m.group(2)], pattern)
    if text == "~" or text.startswith("~/"):
        bases = list(dict.fromkeys([root_home(), *homes]))
        out = [b.rstrip("/") + text[1:] for b in bases]
    elif text.startswith("~"):
        name, _, rest = text[1:].partition("/")
        try:
            out = [pwd.getpwnam(name).pw_dir.rstrip("/") + "/" + rest]
        except KeyError:
            return [], [Skipped(pattern, f"no user {name!r}")]
    else:
        out = [text]
    bad = [p for p in out if not p.startswith("/")]
    if bad:
        return [], [Skipped(pattern, f"not an absolute path: {bad[0]!r}")]
    return out, []


def split_glob(pattern: str) -> tuple[str, tuple[str, ...]]:
    """``/home/a/ascend/log/**`` -> (``/home/a/ascend/log``, ("**",))."""
    parts = [p for p in pattern.split("/") if p and p != "."]
    for i, part in enumerate(parts):
        if _WILD.search(part):
            return "/" + "/".join(parts[:i]), tuple(parts[i:])
    return "/" + "/".join(parts), ()


def _expand_states(parts: tuple[str, ...], states: frozenset[int]) -> frozenset[int]:
    out = set(states)
    todo = list(states)
    while todo:
        s = todo.pop()
        if s < len(parts) and parts[s] == "**" and s + 1 not in out:
            out.add(s + 1)
            todo.append(s + 1)
    return frozenset(out)


def _step(parts: tuple[str, ...], states: frozenset[int], name: str) -> frozenset[int]:
    """Glob matching as a small NFA over path components, so ``**`` costs no recursion."""
    out: set[int] = set()
    for s in _expand_states(parts, states):
        if s >= len(parts):
            continue
        if parts[s] == "**":
            out.add(s)
        elif fnmatchcase(name, parts[s]):
            out.add(s + 1)
    return frozenset(out)


def _accepts(parts: tuple[str, ...], states: frozenset[int]) -> bool:
    return len(parts) in _expand_states(parts, states)


# --- opening without following planted links --------------------------------


def _describe(exc: OSError) -> str:
    return os.strerror(exc.errno) if exc.errno else str(exc)


def open_base(path: str) -> tuple[int, bool]:
    """Open a path's fixed start component by component: (fd, is_directory).

    A symlink on the way is followed only when root owns it: users cannot make
    one, so a link there was put in place by an administrator.
    """
    queue = [p for p in path.split("/") if p and p != "."]
    queue.reverse()
    fd = os.open("/", _DIR_FLAGS)
    hops = 0
    try:
        while queue:
            name = queue.pop()
            last = not queue
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError as exc:
                raise _Refused(_describe(exc)) from None
            if stat.S_ISLNK(st.st_mode):
                if st.st_uid != 0:
                    raise _Refused(f"symbolic link owned by uid {st.st_uid} in the path, not followed")
                hops += 1
                if hops > MAX_SYMLINK_HOPS:
                    raise _Refused("too many levels of symbolic links")
                target = os.readlink(name, dir_fd=fd)
                if target.startswith("/"):
                    os.close(fd)
                    fd = os.open("/", _DIR_FLAGS)
                queue.extend(reversed([p for p in target.split("/") if p and p != "."]))
                continue
            if stat.S_ISDIR(st.st_mode):
                try:
                    new = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    raise _Refused(_changed(exc)) from None
                os.close(fd)
                fd = new
                continue
            if not last:
                raise _Refused(f"{name!r} in the path is not a directory")
            new = _open_file(name, fd)
            os.close(fd)
            return new, False
        return fd, True
    except BaseException:
        os.close(fd)
        raise


def _changed(exc: OSError) -> str:
    if exc.errno in (errno.ELOOP, errno.EMLINK, errno.ENOTDIR):
        return "replaced by a symbolic link while being opened, not followed"
    return _describe(exc)


def _open_file(name: str, dir_fd: int) -> int:
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        raise _Refused(_changed(exc)) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise _Refused("not a regular file")
    return fd


def _open_relative(base_fd: int, rel: tuple[str, ...]) -> int:
    """Open base/rel... with no symlink followed anywhere below base."""
    fd = base_fd
    try:
        for name in rel[:-1]:
            try:
                new = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise _Refused(_changed(exc)) from None
            if fd != base_fd:
                os.close(fd)
            fd = new
        return _open_file(rel[-1], fd)
    finally:
        if fd != base_fd:
            os.close(fd)


# --- finding files ------------------------------------------------------------


class _Base:
    def __init__(self, display: str, fd: int, is_dir: bool) -> None:
        self.display = display
        self.fd = fd
        self.is_dir = is_dir


class _Candidate:
    """A file to read; candidates sort newest first (by ``sort_key``)."""

    def __init__(self, sort_key: float, display: str, base: _Base, rel: tuple[str, ...],
                 mtime: float, size: int = 0) -> None:
        self.sort_key = sort_key
        self.display = display
        self.base = base
        self.rel = rel
        self.mtime = mtime
        self.size = size

    def __lt__(self, other: _Candidate) -> bool:
        return self.sort_key < other.sort_key


class _Plan:
    def __init__(self) -> None:
        self.candidates: list[_Candidate] = []
        self.skipped: list[Skipped] = []
        self.bases: list[_Base] = []
        self.seen: set[tuple[int, int]] = set()
        self.older = 0


def _walk(
    plan: _Plan, base: _Base, parts: tuple[str, ...], since_ts: float | None
) -> None:
    count = 0
    # Iterative depth-first walk: (dir fd, relative path, NFA states).
    stack: list[tuple[int, tuple[str, ...], frozenset[int]]] = [(base.fd, (), frozenset({0}))]
    while stack:
        dfd, rel, states = stack.pop()
        try:
            try:
                entries = sorted(os.scandir(dfd), key=lambda e: e.name)
            except OSError as exc:
                plan.skipped.append(Skipped(_join(base.display, rel), _describe(exc)))
                continue
            for entry in entries:
                name = entry.name
                sub = _step(parts, states, name)
                if not sub:
                    continue
                shown = _join(base.display, (*rel, name))
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue  # vanished between listing and stat: rotation
                if stat.S_ISLNK(st.st_mode):
                    plan.skipped.append(Skipped(shown, "symbolic link, not followed"))
                    continue
                if stat.S_ISDIR(st.st_mode):
                    if len(rel) + 1 >= MAX_DEPTH:
                        plan.skipped.append(Skipped(shown, f"deeper than {MAX_DEPTH} levels"))
                        continue
                    if _expand_states(parts, sub) <= {len(parts)}:
                        continue  # the pattern ends here: nothing below can match
                    try:
                        sub_fd = os.open(name, _DIR_FLAGS, dir_fd=dfd)
                    except OSError as exc:
                        plan.skipped.append(Skipped(shown, _changed(exc)))
                        continue
                    stack.append((sub_fd, (*rel, name), sub))
                    continue
                if not _accepts(parts, sub):
                    continue
                if not stat.S_ISREG(st.st_mode):
                    plan.skipped.append(Skipped(shown, "not a regular file"))
                    continue
                key = (st.st_dev, st.st_ino)
                if key in plan.seen:
                    continue
                plan.seen.add(key)
                count += 1
                if count > MAX_FILES:
                    plan.skipped.append(
                        Skipped(base.display, f"more than {MAX_FILES} files; the rest not read")
                    )
                    for fd, _, _ in stack:
                        if fd != base.fd:
                            os.close(fd)
                    return
                if since_ts is not None and st.st_mtime < since_ts:
                    plan.older += 1
                    continue
                plan.candidates.append(
                    _Candidate(-st.st_mtime, shown, base, (*rel, name), st.st_mtime, st.st_size)
                )
        finally:
            if dfd != base.fd:
                os.close(dfd)


def _join(base: str, rel: tuple[str, ...]) -> str:
    return "/".join((base.rstrip("/") or "", *rel)) if rel else base


def _add_base(
    plan: _Plan, path: str, parts: tuple[str, ...], since_ts: float | None, explicit: bool
) -> None:
    try:
        fd, is_dir = open_base(path)
    except _Refused as exc:
        # A default glob that matches nothing on this host is normal; a path
        # the operator typed is not.
        if explicit or "symbolic link" in str(exc):
            plan.skipped.append(Skipped(path, str(exc)))
        return
    base = _Base(path, fd, is_dir)
    plan.bases.append(base)
    if is_dir:
        _walk(plan, base, parts or ("**",), since_ts)
        return
    if parts:
        return  # a file where the glob wants a directory
    st = os.fstat(fd)
    key = (st.st_dev, st.st_ino)
    if key in plan.seen:
        return
    plan.seen.add(key)
    if since_ts is not None and st.st_mtime < since_ts:
        plan.older += 1
        return
    plan.candidates.append(_Candidate(-st.st_mtime, path, base, (), st.st_mtime, st.st_size))


# --- reading one file -----------------------------------------------------------


class _FileResult:
    def __init__(self, findings: list[Finding], bytes_read: int, skipped: list[Skipped]) -> None:
        self.findings = findings
        self.bytes_read = bytes_read
        self.skipped = skipped


def _line_bounds(buf: bytes, pos: int, lo: int, hi: int) -> tuple[int, int]:
    start = buf.rfind(b"\n", lo, pos) + 1 or lo
    end = buf.find(b"\n", pos, hi)
    return max(start, lo), (hi if end == -1 else end)


def _is_blank_start(buf: bytes, start: int, hi: int) -> bool:
    return start < hi and buf[start] in (0x20, 0x09)


def _decode(raw: bytes) -> str | None:
    if b"\0" in raw:
        return None
    try:
        return raw.decode("utf-8").rstrip("\r")
    except UnicodeDecodeError:
        return None


class _Reader:
    """Scan one file's bytes for the catalog's needles, a window at a time.

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
        self.needles = [n.encode() for n in needles(rules)]
        self.since = since
        self.until = until
        self.findings: list[Finding] = []
        self.nul_lines = 0
        self.bad_lines = 0

    def account_junk(self, buf: bytes, lo: int, hi: int) -> None:
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
            if b"\0" in raw:
                self.nul_lines += 1
            else:
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError:
                    self.bad_lines += 1

    def heads(self, buf: bytes, lo: int, hi: int) -> list[int]:
        """Start offsets of the records that contain a needle."""
        found: set[int] = set()
        for needle in self.needles:
            i = buf.find(needle, lo, hi)
            while i != -1:
                start, end = _line_bounds(buf, i, lo, hi)
                found.add(self._head_of(buf, start, lo, hi))
                # One hit per line is enough: go on after it, which also keeps a
                # megabyte line full of needles linear.
                i = buf.find(needle, end, hi)
        return sorted(found)

    def _head_of(self, buf: bytes, start: int, lo: int, hi: int) -> int:
        """The line a continuation line belongs to (itself when it is a head)."""
        pos = start
        for _ in range(MAX_CONTINUATION):
            if pos <= lo or not _is_blank_start(buf, pos, hi):
                break
            pos = _line_bounds(buf, pos - 1, lo, hi)[0]
        return start if _is_blank_start(buf, pos, hi) else pos

    def record_lines(self, buf: bytes, head: int, lo: int, hi: int) -> list[str]:
        """The record's lines, decoded, junk lines dropped; [] when the head is junk."""
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

    def inherited_time(self, buf: bytes, head: int, lo: int) -> datetime | None:
        """The time of the nearest line above that has one (bounded look-back)."""
        pos = head
        floor = max(lo, head - INHERIT_BYTES)
        for _ in range(INHERIT_LINES):
            if pos <= floor:
                return None
            prev = buf.rfind(b"\n", floor, pos - 1) + 1 or floor
            text = _decode(buf[prev:min(pos - 1, prev + HEAD_SPAN)])
            if text is not None:
                when = parse_head_time(text)
                if when is not None:
                    return when
            pos = prev
        return None

    def scan(self, buf: bytes, lo: int, hi: int, first_line: int, count_all: bool = True) -> int:
        """Classify the records of ``buf[lo:hi]``, whose first line has number ``first_line``.

        Returns the number of the line after ``hi`` (counted only when asked:
        the last window of a file need not count its tail).
        """
        self.account_junk(buf, lo, hi)
        line = first_line
        last = lo
        for head in self.heads(buf, lo, hi):
            line += buf.count(b"\n", last, head)
            last = head
            lines = self.record_lines(buf, head, lo, hi)
            if not lines:
                continue
            text = "\n".join(lines)
            rule = classify(text, self.rules)
            if rule is None:
                continue
            rec = make_record(self.path, line, lines)
            if self.since is not None or self.until is not None:
                when = rec.time or self.inherited_time(buf, head, lo)
                # A line with no time of its own, and none above it, cannot be
                # placed inside the bounds: leave it out rather than guess.
                if when is None:
                    continue
                if self.since is not None and when < self.since:
                    continue
                if self.until is not None and when > self.until:
                    continue
            self.findings.append(
                Finding(rule.id, rule.severity, self.path, line, rec.time, rec.pid,
                        text[:MAX_TEXT])
            )
        return line + buf.count(b"\n", last, hi) if count_all else line


def _safe_cut(buf: bytes, lo: int, hi: int) -> int:
    """Where to end a window so no record is split: before its last head line."""
    pos = hi
    for _ in range(MAX_CONTINUATION + 1):
        nl = buf.rfind(b"\n", lo, pos)
        if nl == -1:
            return lo
        if not _is_blank_start(buf, nl + 1, hi):
            return nl + 1
        pos = nl
    return buf.rfind(b"\n", lo, hi) + 1 or lo


def read_file(
    fd: int,
    path: str,
    max_bytes: int,
    rules: Sequence[Rule] = RULES,
    since: datetime | None = None,
    until: datetime | None = None,
    chunk: int = CHUNK,
) -> _FileResult:
    """Read at most ``max_bytes`` from the end of an open file and classify them.

    The file is read in windows; a window ends before its last record, and
    the next window is read again from there (from the page cache) rather
    than glued to the rest, which would copy every byte once more.
    """
    reader = _Reader(path, rules, since, until)
    skipped: list[Skipped] = []
    size = os.fstat(fd).st_size
    start = offset = max(0, size - max_bytes)
    stop = start + max_bytes
    line = 1
    fragment = start > 0  # reading from the middle: the first line is a fragment
    while offset < stop:
        want = min(chunk, stop - offset)
        while True:
            try:
                data = os.pread(fd, want, offset)
            except OSError as exc:
                skipped.append(Skipped(path, f"read error at byte {offset}: {_describe(exc)}"))
                data = b""
            hi = len(data)
            at_end = hi < want or offset + hi >= stop
            lo = 0
            if fragment:
                nl = data.find(b"\n")
                lo = hi if nl == -1 else nl + 1
            cut = hi if at_end else _safe_cut(data, lo, hi)
            if cut > lo or at_end or want >= LONG_LINE:
                break
            # No whole record in this window: a long line. Read a bigger one.
            want = min(want * 2, stop - offset, LONG_LINE)
        if not data:
            break  # end of file, or the file was truncated under us
        if fragment and lo >= hi:
            offset += hi  # all of it is the fragment
            continue
        fragment = False
        if cut <= lo:
            cut = hi  # longer than LONG_LINE: take it as it is
        line = reader.scan(data, lo, cut, line, count_all=cut < hi)
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
    if reader.nul_lines:
        skipped.append(Skipped(path, f"{reader.nul_lines} line(s) with NUL bytes (binary) skipped"))
    if reader.bad_lines:
        skipped.append(Skipped(path, f"{reader.bad_lines} line(s) not UTF-8 text skipped"))
    return _FileResult(reader.findings, total, skipped)


# --- the whole scan ---------------------------------------------------------------


def _plan(
    paths: Sequence[str],
    patterns: Sequence[str],
    homes: Sequence[str],
    environ: Mapping[str, str] | None,
    since: datetime | None,
) -> _Plan:
    plan = _Plan()
    since_ts = since.timestamp() if since is not None else None
    for path in paths:
        _add_base(plan, os.path.abspath(path), (), since_ts, explicit=True)
    for pattern in patterns:
        globs, skipped = expand(pattern, homes, environ)
        plan.skipped.extend(skipped)
        for g in globs:
            base, parts = split_glob(g)
            _add_base(plan, base, parts, since_ts, explicit=False)
    return plan


def scan(
    paths: Sequence[str] = (),
    *,
    patterns: Sequence[str] = (),
    homes: Sequence[str] = (),
    since: datetime | None = None,
    until: datetime | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    environ: Mapping[str, str] | None = None,
    rules: Sequence[Rule] = RULES,
) -> ScanReport:
    """Scan explicit files/folders and/or configured globs, newest files first."""
    plan = _plan(paths, patterns, homes, environ, since)
    findings: list[Finding] = []
    skipped = list(plan.skipped)
    files = total = 0
    try:
        cands = sorted(plan.candidates)
        for result in _read_all(cands, max_bytes, rules, since, until):
            if isinstance(result, Skipped):
                skipped.append(result)
                continue
            files += 1
            total += result.bytes_read
            findings.extend(result.findings)
            skipped.extend(result.skipped)
    finally:
        for base in plan.bases:
            os.close(base.fd)
    return ScanReport(tuple(findings), files, total, tuple(skipped), plan.older)


def _read_one(cand: _Candidate, max_bytes: int, rules: Sequence[Rule],
              since: datetime | None, until: datetime | None) -> _FileResult | Skipped:
    try:
        fd = cand.base.fd if not cand.rel else _open_relative(cand.base.fd, cand.rel)
    except _Refused as exc:
        return Skipped(cand.display, str(exc))
    try:
        return read_file(fd, cand.display, max_bytes, rules, since, until)
    finally:
        if cand.rel:
            os.close(fd)


# Above this many bytes to read, files are shared among forked workers: the
# search is C code on bytes, but one core of it is the bottleneck. Below it
# (the sleep hook's usual case) a fork costs more than it saves.
PARALLEL_BYTES = 48 * 1024 * 1024
MAX_WORKERS = 4


def _read_all(cands: Sequence[_Candidate], max_bytes: int, rules: Sequence[Rule],
              since: datetime | None, until: datetime | None) -> list[_FileResult | Skipped]:
    """Each candidate's result, in the candidates' order."""
    sizes = [min(c.size, max_bytes) for c in cands]
    workers = min(MAX_WORKERS, os.cpu_count() or 1, len(cands))
    if workers <= 1 or sum(sizes) < PARALLEL_BYTES:
        return [_read_one(c, max_bytes, rules, since, until) for c in cands]
    # Largest files first, each to the least loaded worker.
    shares: list[list[int]] = [[] for _ in range(workers)]
    load = [0] * workers
    for i in sorted(range(len(cands)), key=lambda i: -sizes[i]):
        w = load.index(min(load))
        shares[w].append(i)
        load[w] += sizes[i]

    def work(share: list[int]) -> dict[int, _FileResult | Skipped]:
        return {i: _read_one(cands[i], max_bytes, rules, since, until) for i in share}

    def to_wire(results: dict[int, _FileResult | Skipped]) -> Any:
        return [[i, _to_wire(r)] for i, r in results.items()]

    def from_wire(wire: Any) -> dict[int, _FileResult | Skipped]:
        return {int(i): _from_wire(r) for i, r in wire}

    results: dict[int, _FileResult | Skipped] = {}
    for part in run_shares(shares, work, to_wire, from_wire):
        results.update(part)
    return [results[i] for i in range(len(cands))]


def _to_wire(result: _FileResult | Skipped) -> dict[str, Any]:
    if isinstance(result, Skipped):
        return {"refused": result.to_json()}
    return {
        "findings": [f.to_json() for f in result.findings],
        "bytes_read": result.bytes_read,
        "skipped": [k.to_json() for k in result.skipped],
    }


def _from_wire(wire: dict[str, Any]) -> _FileResult | Skipped:
    if "refused" in wire:
        return Skipped(**wire["refused"])
    findings = [
        Finding(f["rule"], f["severity"], f["file"], f["line"],
                datetime.fromisoformat(f["time"]) if f["time"] else None, f["pid"], f["text"])
        for f in wire["findings"]
    ]
    return _FileResult(findings, wire["bytes_read"], [Skipped(**k) for k in wire["skipped"]])
