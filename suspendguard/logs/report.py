"""What ``suspendguard logs`` reports: the device logs and the units' journals, their findings as one.

With an attempt's start, each finding is placed against it, so the report
can say which lines were stamped before the attempt began. The device
logs are read from ``since`` (the attempt's start less ``[logs]
clock_slack_s``: the device's clock may differ from the host's); the
journals, stamped by the host, from the attempt's start itself.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from suspendguard.config import Config
from suspendguard.logs.finding import Finding
from suspendguard.logs.journal import UnitJournal, read_unit
from suspendguard.logs.search import SearchReport, search


@dataclass(frozen=True, slots=True)
class LogsReport:
    """The files' report, the journals read, and every finding of both (marked when placed)."""

    files: SearchReport
    journals: tuple[UnitJournal, ...]
    findings: tuple[Finding, ...]
    attempt_started: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        doc = self.files.to_json()
        doc["findings"] = [f.to_json() for f in self.findings]
        doc["journals"] = [j.to_json() for j in self.journals]
        doc["attempt_started"] = self.attempt_started.isoformat() if self.attempt_started else None
        return doc


def search_logs(
    config: Config,
    paths: Sequence[str],
    since: datetime | None,
    until: datetime | None,
    environ: Mapping[str, str] | None = None,
    homes: Sequence[str] = (),
    log_dirs: Mapping[str, Collection[int]] | None = None,
) -> SearchReport:
    """Explicit paths, or else the configured globs and the holders' own ``log_dirs``
    (``walk.plan``'s folders); [logs] max_bytes either way."""
    if paths:
        return search(paths, since=since, until=until, max_bytes=config.logs.max_bytes)
    return search(
        patterns=config.logs.paths,
        homes=homes,
        since=since,
        until=until,
        max_bytes=config.logs.max_bytes,
        environ=environ,
        folders=log_dirs,
    )


def logs_report(config: Config, paths: Sequence[str], units: Sequence[str],
                since: datetime | None, until: datetime | None,
                started: datetime | None = None,
                environ: Mapping[str, str] | None = None,
                homes: Sequence[str] = (),
                log_dirs: Mapping[str, Collection[int]] | None = None) -> LogsReport:
    """The files (``paths``, or the configured globs, ``~`` in them each of ``homes`` besides
    root's, and the holders' ``log_dirs``) and the units' journals, read from ``since`` to
    ``until``; with ``started`` (an attempt's start), each finding placed against it."""
    files = search_logs(config, paths, since, until, environ, homes, log_dirs)
    # The journal's times are the host's own: read from the attempt's start itself.
    journals = tuple(read_unit(u, started or since, until) for u in units)
    findings = [*files.findings, *(f for j in journals for f in j.findings)]
    if started is not None:
        findings = [f.placed(started, None) for f in findings]
    return LogsReport(files, journals, tuple(findings), started)
