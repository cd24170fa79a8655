"""Text for a terminal: control characters from untrusted strings made visible, never obeyed.

Any user can put ESC, CR or a newline in a process name or command line, a
log line or a file name; printed as they are, they move the cursor, rewrite
lines already shown or forge new ones in `check`, `status`, `history` and
`logs`. Every such string goes through :func:`safe` before it reaches a
terminal. (JSON output needs nothing: json escapes them itself.)
"""

from __future__ import annotations

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
