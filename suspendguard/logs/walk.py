"""Which log files to read: explicit paths and the globs' folders walked, newest files first.

A folder is walked depth-first by descriptor (see ``safe_open``), at most
``MAX_DEPTH`` levels and ``MAX_ENTRIES`` entries below each base; of its
files the newest ``MAX_FILES`` are read, whatever the walk's order (a
folder of thousands of old or empty files must not hide the newest log
beside it); empty files are never candidates. A file reached twice (hard
link, overlapping globs) is read once; with ``--since``, a file last
modified before it is counted and left unread.
"""

from __future__ import annotations

import heapq
import os
import stat
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from suspendguard.logs.finding import NOT_FOLLOWED, Skipped
from suspendguard.logs.globs import START, accepts, ends_here, expand, split_glob, step
from suspendguard.logs.safe_open import Refused, describe, open_base, open_dir

MAX_DEPTH = 16
MAX_FILES = 20000
# Entries looked at below one base: bounds the walk's time on a hostile tree.
MAX_ENTRIES = 200_000


@dataclass(frozen=True, slots=True)
class Base:
    """The open fixed start of a path or glob: a folder to walk, or one file."""

    display: str
    fd: int
    is_dir: bool


@dataclass(frozen=True, slots=True, order=True)
class Candidate:
    """A file to read, opened later relative to its base; candidates sort newest first."""

    sort_key: float
    display: str = field(compare=False)
    base: Base = field(compare=False)
    rel: tuple[str, ...] = field(compare=False)
    mtime: float = field(compare=False)
    size: int = field(default=0, compare=False)
    ident: tuple[int, int] = field(default=(0, 0), compare=False)  # (st_dev, st_ino)


@dataclass(slots=True)
class Plan:
    """What the walk found: files to read, paths not read, and the open bases to close."""

    candidates: list[Candidate] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    bases: list[Base] = field(default_factory=list)
    seen: set[tuple[int, int]] = field(default_factory=set)
    older: int = 0  # files left unread because modified before --since
    empty: int = 0  # empty files met in folders: read, as it were, without opening them

    def close(self) -> None:
        for base in self.bases:
            os.close(base.fd)

    def first_look(self, st: os.stat_result, since_ts: float | None) -> bool:
        """Whether a file is new to the walk and recent enough to read (each counted once)."""
        key = (st.st_dev, st.st_ino)
        if key in self.seen:
            return False
        self.seen.add(key)
        if since_ts is not None and st.st_mtime < since_ts:
            self.older += 1
            return False
        return True


def plan(
    paths: Sequence[str],
    patterns: Sequence[str],
    homes: Sequence[str],
    environ: Mapping[str, str] | None,
    since: datetime | None,
    globs: Sequence[str] = (),
    folders: Mapping[str, Collection[int]] | None = None,
) -> Plan:
    """Every file to read; the caller closes the plan's bases once they are read.
    ``globs``: absolute globs, filled in already (``patterns`` are filled in here).
    ``folders``: holders' own log folders, each with its holders' uids: a path (no glob)
    walked whole, and only when one of those users owns it as opened."""
    found = Plan()
    since_ts = since.timestamp() if since is not None else None
    for path in paths:
        _add_base(found, os.path.abspath(path), (), since_ts, explicit=True)
    for glob in globs:
        _add_glob(found, glob, since_ts)
    for folder, owners in (folders or {}).items():
        _add_base(found, folder, ("**",), since_ts, explicit=False, owners=owners)
    for pattern in patterns:
        filled, skipped = expand(pattern, homes, environ)
        found.skipped.extend(skipped)
        for glob in filled:
            _add_glob(found, glob, since_ts)
    return found


def _add_glob(found: Plan, glob: str, since_ts: float | None) -> None:
    base, parts = split_glob(glob)
    _add_base(found, base, parts, since_ts, explicit=False)


def _add_base(
    found: Plan, path: str, parts: tuple[str, ...], since_ts: float | None, explicit: bool,
    owners: Collection[int] | None = None,
) -> None:
    try:
        fd, is_dir = open_base(path, (0,) if owners is None else (0, *owners))
    except Refused as exc:
        # A default glob whose folder this host lacks is normal; a path the
        # operator typed, or a folder there that cannot be opened, is not.
        if explicit or not exc.missing:
            found.skipped.append(Skipped(path, str(exc)))
        return
    if owners is not None:
        # A path a user chose, read as root: only a folder of that user's (root's only for
        # a root holder: "/" or /tmp would have root walk the whole tree), checked on what
        # was opened, not on a name that may have changed since.
        uid = os.fstat(fd).st_uid
        if uid not in owners:
            os.close(fd)
            found.skipped.append(Skipped(
                path, f"not read: owned by uid {uid}, not by the holder's user"))
            return
    base = Base(path, fd, is_dir)
    found.bases.append(base)
    if is_dir:
        _walk(found, base, parts or ("**",), since_ts)
        return
    if parts:
        return  # a file where the glob wants a directory
    st = os.fstat(fd)
    if not found.first_look(st, since_ts):
        return
    found.candidates.append(Candidate(-st.st_mtime, path, base, (), st.st_mtime, st.st_size,
                                     (st.st_dev, st.st_ino)))


def _walk(found: Plan, base: Base, parts: tuple[str, ...], since_ts: float | None) -> None:
    # The newest MAX_FILES files, as a heap whose top is the oldest kept.
    kept: list[tuple[float, int, Candidate]] = []
    dropped = 0
    entries_seen = 0
    # Iterative depth-first walk: (dir fd, relative path, NFA states).
    stack: list[tuple[int, tuple[str, ...], frozenset[int]]] = [(base.fd, (), START)]
    while stack:
        dfd, rel, states = stack.pop()
        try:
            try:
                entries = sorted(os.scandir(dfd), key=lambda e: e.name)
            except OSError as exc:
                found.skipped.append(Skipped(_join(base.display, rel), describe(exc)))
                continue
            entries_seen += len(entries)
            if entries_seen > MAX_ENTRIES:
                found.skipped.append(Skipped(
                    base.display, f"more than {MAX_ENTRIES} entries; the rest not walked"))
                for fd, _, _ in stack:
                    if fd != base.fd:
                        os.close(fd)
                stack.clear()
                break
            for entry in entries:
                name = entry.name
                sub = step(parts, states, name)
                if not sub:
                    continue
                shown = _join(base.display, (*rel, name))
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue  # vanished between listing and stat: rotation
                if stat.S_ISLNK(st.st_mode):
                    found.skipped.append(Skipped(shown, NOT_FOLLOWED))
                    continue
                if stat.S_ISDIR(st.st_mode):
                    if len(rel) + 1 >= MAX_DEPTH:
                        found.skipped.append(Skipped(shown, f"deeper than {MAX_DEPTH} levels"))
                        continue
                    if ends_here(parts, sub):
                        continue
                    try:
                        sub_fd = open_dir(name, dfd)
                    except Refused as exc:
                        found.skipped.append(Skipped(shown, str(exc)))
                        continue
                    stack.append((sub_fd, (*rel, name), sub))
                    continue
                if not accepts(parts, sub):
                    continue
                if not stat.S_ISREG(st.st_mode):
                    found.skipped.append(Skipped(shown, "not a regular file"))
                    continue
                if st.st_size == 0:
                    found.empty += 1  # nothing to find in it, and no place in the cap
                    continue
                if not found.first_look(st, since_ts):
                    continue
                cand = Candidate(-st.st_mtime, shown, base, (*rel, name), st.st_mtime, st.st_size,
                                 (st.st_dev, st.st_ino))
                heapq.heappush(kept, (st.st_mtime, len(found.seen), cand))
                if len(kept) > MAX_FILES:
                    heapq.heappop(kept)
                    dropped += 1
        finally:
            if dfd != base.fd:
                os.close(dfd)
    if dropped:
        found.skipped.append(Skipped(
            base.display, f"more than {MAX_FILES} files; the {dropped} oldest not read"))
    found.candidates.extend(c for _, _, c in kept)


def _join(base: str, rel: tuple[str, ...]) -> str:
    return "/".join((base.rstrip("/") or "", *rel)) if rel else base
