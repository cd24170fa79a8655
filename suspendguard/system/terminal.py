"""Text for a terminal: control characters made visible, tables fitted to its width, local times.

Any user can put ESC, CR or a newline in a process name or command line, a
log line or a file name; printed as they are, they move the cursor, rewrite
lines already shown or forge new ones in `check`, `status`, `history` and
`logs`. Every such string goes through :func:`safe` before it reaches a
terminal. (JSON output needs nothing: json escapes them itself.)

Every command's tables are fitted to the terminal (:func:`terminal_width`,
:func:`table`), their long cells cut with "…", each measured in the columns it
takes (:func:`columns`: a Chinese character takes two); times are shown with
their zone (:func:`when`).
"""

from __future__ import annotations

import contextlib
import os
import time
import unicodedata
from collections.abc import Mapping, Sequence
from typing import TextIO

ELLIPSIS = "…"
DEFAULT_WIDTH = 80  # as shutil.get_terminal_size, when nothing says otherwise
MIN_CUT = 8  # a column is never cut narrower than this (its header included)

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\x1b": "\\e"}


def _escape(code: int) -> str:
    char = chr(code)
    if char in _NAMED:
        return _NAMED[char]
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


# C0 controls, DEL, C1 controls (0x9b is a one-byte CSI on some terminals),
# and the Unicode line separators and bidirectional overrides that reorder
# or break what is shown.
_CONTROLS = [*range(0x20), 0x7F, *range(0x80, 0xA0), 0x2028, 0x2029, *range(0x202A, 0x202F),
             *range(0x2066, 0x206A)]
_TABLE = {code: _escape(code) for code in _CONTROLS}


def safe(text: str) -> str:
    """``text`` with every control character shown as an escape (``\\e``, ``\\n``, ``\\x9b``)."""
    return text.translate(_TABLE)


def terminal_width(environ: Mapping[str, str], out: TextIO) -> int:
    """$COLUMNS, else the width of the terminal ``out`` writes to, else 80."""
    columns = environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        if out.isatty():
            return os.get_terminal_size(out.fileno()).columns
    except (OSError, ValueError, AttributeError):
        pass
    return DEFAULT_WIDTH


# East Asian wide and full-width characters: a terminal shows each in two columns.
_WIDE = frozenset({"W", "F"})


def _char_columns(char: str) -> int:
    return 2 if unicodedata.east_asian_width(char) in _WIDE else 1


def columns(text: str) -> int:
    """The terminal columns ``text`` takes: two for a wide or full-width character (CJK)."""
    if text.isascii():
        return len(text)
    return sum(_char_columns(c) for c in text)


def cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` columns, its end replaced by "…" when cut."""
    if columns(text) <= width:
        return text
    room = max(width - 1, 0)
    kept = 0
    for end, char in enumerate(text):
        kept += _char_columns(char)
        if kept > room:
            return text[:end] + ELLIPSIS
    return text + ELLIPSIS


def pad(text: str, width: int) -> str:
    """``text`` filled with spaces to ``width`` columns."""
    return text + " " * (width - columns(text))


def table(rows: Sequence[Sequence[str]], indent: str = "  ", width: int | None = None,
          flex: Sequence[int] = (-1,)) -> list[str]:
    """Aligned rows (the first is the header), at most ``width`` columns each.

    Only the ``flex`` columns are cut, the widest first; ``width`` None (the
    ``--wide`` option) cuts nothing. Every cell is made safe for a terminal
    first (:func:`safe`): commands and names carry text any user sets.
    """
    if not rows:
        return []
    rows = [[safe(c) for c in r] for r in rows]
    n = len(rows[0])
    widths = [max(columns(r[i]) for r in rows) for i in range(n)]
    if width is not None:
        cols = [i % n for i in flex]
        floor = {i: min(widths[i], MIN_CUT) for i in cols}
        excess = len(indent) + sum(widths) + 2 * (n - 1) - width
        while excess > 0:
            can = [i for i in cols if widths[i] > floor[i]]
            if not can:
                break
            widest = max(can, key=lambda i: widths[i])
            widths[widest] -= 1
            excess -= 1
    return [indent + "  ".join(pad(cut(c, w), w) for c, w in zip(r, widths, strict=False)).rstrip()
            for r in rows]


def when(ts: float) -> str:
    """A local time with its zone: ``2026-12-01 02:14:05 UTC`` or ``... +0100``."""
    local = time.localtime(ts)
    zone = "UTC" if local.tm_gmtoff == 0 else time.strftime("%z", local)
    return time.strftime("%Y-%m-%d %H:%M:%S", local) + " " + zone


def discard(stream: TextIO) -> None:
    """``stream``'s descriptor pointed at /dev/null once writing to it failed: what it still
    holds, and whatever is written to it after, go nowhere instead of failing again (at the
    interpreter's exit too). A stream with no descriptor is left as it is."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, stream.fileno())
        finally:
            os.close(devnull)
