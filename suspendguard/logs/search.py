"""Searching the device logs: every file found read, in forked workers when there is much to read.

The one entry point of the package's reading side: ``search`` walks the
paths and globs (``walk``), reads each file (``reader``) and gathers what
they said, newest files first.
"""

from __future__ import annotations

import os
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from suspendguard.logs.finding import TIME_RAN_OUT, Finding, Skipped, UnknownCode
from suspendguard.logs.globs import expand
from suspendguard.logs.matching import Rule
from suspendguard.logs.reader import FileResult, prepare, read_file
from suspendguard.logs.rules import RULES
from suspendguard.logs.safe_open import Refused, open_relative
from suspendguard.logs.walk import Candidate, Plan, plan
from suspendguard.system.workers import run_shares

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
# Above this many bytes to read, files are shared among forked workers: the
# search is C code on bytes, but one core of it is the bottleneck. Below it
# (the sleep hook's usual case) a fork costs more than it saves. Measured on
# 2 cores, a fresh process each run (benchmarks/logs_throughput.py's corpus
# in 8 files): 4 MB take as long either way, 8 MB 28 ms in two workers
# against 33 ms in one process, 32 MB 74 against 127 ms.
PARALLEL_BYTES = 8 * 1024 * 1024
MAX_WORKERS = 4


@dataclass(frozen=True, slots=True)
class SearchReport:
    findings: tuple[Finding, ...]
    files_read: int
    bytes_read: int
    skipped: tuple[Skipped, ...]
    files_older: int = 0  # left unread because modified before --since
    unknown_codes: tuple[UnknownCode, ...] = ()  # notes, never findings

    def to_json(self) -> dict[str, Any]:
        return {
            "findings": [f.to_json() for f in self.findings],
            "files_read": self.files_read,
            "bytes_read": self.bytes_read,
            "files_older_than_since": self.files_older,
            "skipped": [s.to_json() for s in self.skipped],
            "unrecognised_vendor_codes": [u.to_json() for u in self.unknown_codes],
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> SearchReport:
        return cls(tuple(Finding.from_json(f) for f in doc["findings"]), doc["files_read"],
                   doc["bytes_read"], tuple(Skipped.from_json(s) for s in doc["skipped"]),
                   doc["files_older_than_since"],
                   tuple(UnknownCode.from_json(u) for u in doc["unrecognised_vendor_codes"]))


def search(
    paths: Sequence[str] = (),
    *,
    patterns: Sequence[str] = (),
    homes: Sequence[str] = (),
    since: datetime | None = None,
    until: datetime | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    environ: Mapping[str, str] | None = None,
    rules: Sequence[Rule] = RULES,
    stop_at: float | None = None,
    folders: Mapping[str, Collection[int]] | None = None,
) -> SearchReport:
    """Search explicit files/folders and/or configured globs, and holders' own log
    ``folders`` (``walk.plan``), newest files first; ``stop_at`` (time.monotonic): no file
    is read past it, each said as not read."""
    found = plan(paths, patterns, homes, environ, since, folders=folders)
    return _search(found, since, until, max_bytes, rules, stop_at)[0]


@dataclass(frozen=True, slots=True)
class _Read:
    """One file a search read: as it was shown, which file it is, and how much was read."""

    display: str
    ident: tuple[int, int]  # (st_dev, st_ino)
    bytes_read: int


def _search(found: Plan, since: datetime | None, until: datetime | None, max_bytes: int,
            rules: Sequence[Rule], stop_at: float | None
            ) -> tuple[SearchReport, list[_Read]]:
    """Every file ``found`` read (its bases closed after), and which files they were."""
    findings: list[Finding] = []
    unknown: list[UnknownCode] = []
    skipped = list(found.skipped)
    reads: list[_Read] = []
    files, total = found.empty, 0
    try:
        cands = sorted(found.candidates)
        for cand, result in zip(cands, _read_all(cands, max_bytes, rules, since, until,
                                                 stop_at), strict=True):
            if isinstance(result, Skipped):
                skipped.append(result)
                continue
            files += 1
            total += result.bytes_read
            reads.append(_Read(cand.display, cand.ident, result.bytes_read))
            findings.extend(result.findings)
            unknown.extend(result.unknown_codes)
            skipped.extend(result.skipped)
    finally:
        found.close()
    report = SearchReport(tuple(findings), files, total, tuple(skipped), found.older,
                          tuple(unknown))
    return report, reads


# How long past its reading's stop_at a glob's worker is waited for: the walk's last folder,
# and its answer crossing back.
ANSWER_S = 5.0


def search_apart(
    patterns: Sequence[str],
    *,
    stop_at: float,
    homes: Sequence[str] = (),
    since: datetime | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    environ: Mapping[str, str] | None = None,
    folders: Mapping[str, Collection[int]] | None = None,
) -> SearchReport:
    """``search`` of the configured globs, each glob they fill in searched in a worker of its
    own: files are read until ``stop_at`` (time.monotonic), and each worker is waited for
    ``ANSWER_S`` longer. ``folders``: holders' own log folders, each with its holders' uids,
    each walked whole in a worker of its own, if one of those users owns it (``walk.plan``).

    A folder that does not answer (a home on NFS whose server is gone) holds a walk or a
    read in the kernel, where no check of the time can end it: its glob's worker is then
    killed and the glob said as not read, and the other globs' findings stand. A file two
    globs reach is counted once, as in one search.
    """
    globs: list[str] = []
    skipped: list[Skipped] = []
    for pattern in patterns:
        filled, unfilled = expand(pattern, homes, environ)
        globs += filled
        skipped += unfilled
    # Each share: a glob (no owners), or a holder's folder with the uids that may own it.
    shares: list[tuple[str, Collection[int] | None]] = [
        *((glob, None) for glob in dict.fromkeys(globs)), *(folders or {}).items()]
    until = stop_at + ANSWER_S

    def work(share: tuple[str, Collection[int] | None]) -> tuple[SearchReport, list[_Read]]:
        path, owners = share
        found = (plan((), (), (), None, since, globs=(path,)) if owners is None
                 else plan((), (), (), None, since, folders={path: owners}))
        return _search(found, since, None, max_bytes, RULES, stop_at)

    def late(share: tuple[str, Collection[int] | None]) -> tuple[SearchReport, list[_Read]]:
        return SearchReport((), 0, 0, (Skipped(share[0], (
            f"not read: its folder did not answer within {until - started:.0f} s (a network "
            "mount whose server is gone?)")),)), []

    started = time.monotonic()
    return _merged(run_shares(shares, work, _searched_to_wire, _searched_from_wire,
                              until=until, late=late), skipped)


def _merged(searched: Sequence[tuple[SearchReport, list[_Read]]],
            skipped: Sequence[Skipped]) -> SearchReport:
    """The globs' reports as one, in order; a file an earlier glob read is left out."""
    seen: set[tuple[int, int]] = set()
    findings: list[Finding] = []
    unknown: list[UnknownCode] = []
    unread = list(skipped)
    files = total = older = 0
    for report, reads in searched:
        again = {r.display for r in reads if r.ident in seen}
        seen.update(r.ident for r in reads)
        files += report.files_read - len(again)
        total += report.bytes_read - sum(r.bytes_read for r in reads if r.display in again)
        older += report.files_older
        findings += [f for f in report.findings if f.file not in again]
        unknown += [u for u in report.unknown_codes if u.file not in again]
        unread += [s for s in report.skipped if s.path not in again]
    return SearchReport(tuple(findings), files, total, tuple(unread), older, tuple(unknown))


def _read_one(cand: Candidate, max_bytes: int, rules: Sequence[Rule],
              since: datetime | None, until: datetime | None,
              stop_at: float | None = None) -> FileResult | Skipped:
    if stop_at is not None and time.monotonic() >= stop_at:
        return Skipped(cand.display, TIME_RAN_OUT)
    try:
        fd = cand.base.fd if not cand.rel else open_relative(cand.base.fd, cand.rel)
    except Refused as exc:
        return Skipped(cand.display, str(exc))
    try:
        return read_file(fd, cand.display, max_bytes, rules, since, until, stop_at=stop_at)
    finally:
        if cand.rel:
            os.close(fd)


def _read_all(cands: Sequence[Candidate], max_bytes: int, rules: Sequence[Rule],
              since: datetime | None, until: datetime | None,
              stop_at: float | None = None) -> list[FileResult | Skipped]:
    """Each candidate's result, in the candidates' order."""
    sizes = [min(c.size, max_bytes) for c in cands]
    workers = min(MAX_WORKERS, os.cpu_count() or 1, len(cands))
    if workers <= 1 or sum(sizes) < PARALLEL_BYTES:
        return [_read_one(c, max_bytes, rules, since, until, stop_at) for c in cands]
    prepare(rules)
    # Largest files first, each to the least loaded worker.
    shares: list[list[int]] = [[] for _ in range(workers)]
    load = [0] * workers
    for i in sorted(range(len(cands)), key=lambda i: -sizes[i]):
        w = load.index(min(load))
        shares[w].append(i)
        load[w] += sizes[i]

    def work(share: list[int]) -> dict[int, FileResult | Skipped]:
        return {i: _read_one(cands[i], max_bytes, rules, since, until, stop_at) for i in share}

    def to_wire(results: dict[int, FileResult | Skipped]) -> Any:
        return [[i, _to_wire(r)] for i, r in results.items()]

    def from_wire(wire: Any) -> dict[int, FileResult | Skipped]:
        return {int(i): _from_wire(r) for i, r in wire}

    results: dict[int, FileResult | Skipped] = {}
    for part in run_shares(shares, work, to_wire, from_wire):
        results.update(part)
    return [results[i] for i in range(len(cands))]


# A file refused when its worker opened it crosses as {"refused": ...}.
def _to_wire(result: FileResult | Skipped) -> dict[str, Any]:
    if isinstance(result, Skipped):
        return {"refused": result.to_json()}
    return result.to_json()


def _from_wire(wire: dict[str, Any]) -> FileResult | Skipped:
    if "refused" in wire:
        return Skipped.from_json(wire["refused"])
    return FileResult.from_json(wire)


def _searched_to_wire(searched: tuple[SearchReport, list[_Read]]) -> Any:
    report, reads = searched
    return {"report": report.to_json(),
            "reads": [[r.display, *r.ident, r.bytes_read] for r in reads]}


def _searched_from_wire(wire: Any) -> tuple[SearchReport, list[_Read]]:
    reads = [_Read(display, (dev, ino), size) for display, dev, ino, size in wire["reads"]]
    return SearchReport.from_json(wire["report"]), reads
