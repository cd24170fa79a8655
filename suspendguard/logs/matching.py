"""How a catalog rule recognises a log line: patterns that stay linear in the line's length.

Matching must stay linear in the length of a line, because logs are untrusted
input and one line can be a megabyte. So a pattern is a plain substring (the
``needle``, also the scanner's prefilter), optional further substrings that
must all appear (``also``), and at most a small regex used only to check a
boundary next to the needle. The regexes use no unbounded repetition at all
(the tests enforce it), so each costs at most a constant per needle position.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

ERROR = "error"
WARNING = "warning"


@dataclass(frozen=True)
class Pattern:
    needle: str
    also: tuple[str, ...] = ()
    regex: str | None = None

    @functools.cached_property
    def compiled(self) -> re.Pattern[str] | None:
        # Compiled on first use: the catalog is built at import, on the
        # sleep hook's path, and most patterns never get this far.
        return re.compile(self.regex) if self.regex is not None else None

    def matches(self, text: str) -> bool:
        if self.needle not in text:
            return False
        for token in self.also:
            if token not in text:
                return False
        return self.compiled is None or self.compiled.search(text) is not None


def needle(needle: str, *also: str, regex: str | None = None) -> Pattern:
    return Pattern(needle, tuple(also), regex)


def wording(wording: str, anchor: str, *also: str, regex: str | None = None) -> Pattern:
    """A wording found through a shorter anchor several wordings share.

    Each distinct needle costs the scanner: a branch of the code shapes' tree
    where it holds an ``E`` or an ``r`` (codes.window_search), else a pass of
    its own over the data. So wordings are grouped under common anchors
    (" resource" for six of them); the wording itself is still required in
    full. Grouping pays only when the anchor covers several wordings: a short
    anchor finds more lines that are no finding, and a substring search skips
    ahead by up to the needle's length, so as a pass of its own it is slower
    than a long wording.
    """
    if anchor not in wording:
        raise ValueError(f"anchor {anchor!r} is not part of {wording!r}")
    return Pattern(anchor, (wording, *also), regex)


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    severity: str
    quote: str  # what the device said, short, for the journal line
    summary: str  # what it means, one short clause, for the journal line
    meaning: str
    remedy: str
    patterns: tuple[Pattern, ...]
    # The same fault's ids in Huawei's MindCluster fault-diagnosis knowledge
    # base (ascend-faultdiag kg-config.json), for cross-reference only.
    vendor_ids: tuple[str, ...] = ()

    def matches(self, text: str) -> bool:
        return any(p.matches(text) for p in self.patterns)


# Order matters: a record is reported under the first rule that matches it,
# so the rules that name a cause come before those that name a consequence
# (a RecentErrMsg block for an out-of-memory also says "open device failed").


def classify(text: str, rules: Sequence[Rule]) -> Rule | None:
    """The first rule (in catalog order) that matches a record's text, or None."""
    for rule in rules:
        if rule.matches(text):
            return rule
    return None


def needles(rules: Sequence[Rule]) -> tuple[str, ...]:
    """The scanner's prefilter: a record can only match if it contains one of these.

    A needle that contains another is dropped: finding the shorter one finds it too.
    """
    every = list(dict.fromkeys(p.needle for r in rules for p in r.patterns))
    return tuple(n for n in every if not any(o != n and o in n for o in every))


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def markdown_table(rules: Sequence[Rule]) -> str:
    """The README's troubleshooting table, generated so it cannot drift from the catalog."""
    lines = [
        "| rule | severity | meaning | remedy | vendor fault ids |",
        "|---|---|---|---|---|",
    ]
    for r in rules:
        ids = ", ".join(f"`{v}`" for v in r.vendor_ids)
        lines.append(
            f"| `{r.id}` | {r.severity} | {_cell(r.meaning)} | {_cell(r.remedy)} | {ids} |"
        )
    return "\n".join(lines) + "\n"
