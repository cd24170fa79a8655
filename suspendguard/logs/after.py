"""After resume: what did the device logs say since the suspend attempt began?

The sleep hook calls ``after_attempt`` on ``post``; the history stores the
findings, the journal gets one line per rule found.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from suspendguard.config import Config
from suspendguard.logs.finding import Finding, Skipped
from suspendguard.logs.rules import BY_ID
from suspendguard.logs.search import search


@dataclass(frozen=True, slots=True)
class AfterResult:
    findings: tuple[Finding, ...]
    files_read: int = 0
    bytes_read: int = 0
    skipped: tuple[Skipped, ...] = ()

    def rules(self) -> tuple[str, ...]:
        """Rule ids found, in catalog order (causes before consequences)."""
        found = {f.rule for f in self.findings}
        return tuple(r for r in BY_ID if r in found)

    def journal_lines(self, attempt_id: int) -> list[str]:
        lines = []
        for rule_id in self.rules():
            rule = BY_ID[rule_id]
            lines.append(
                f"suspend attempt {attempt_id}: device reported '{rule.quote}' "
                f"({rule.id}): {rule.summary}"
            )
        return lines


def after_attempt(
    config: Config,
    since: datetime,
    homes: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
) -> AfterResult:
    """Scan the configured logs for lines written since the attempt started.

    ``homes``: the home directories of the holders' users, searched for ``~``
    besides root's. Never raises for unreadable logs: they are reported in
    ``skipped``.
    """
    report = search(
        patterns=config.logs.paths,
        homes=homes,
        since=since,
        max_bytes=config.logs.max_bytes,
        environ=environ,
    )
    return AfterResult(report.findings, report.files_read, report.bytes_read, report.skipped)
