"""Plain text to man(7) markup: the few escapes a page needs."""

from __future__ import annotations

import re


def text(value: str) -> str:
    """Running text: backslashes and hyphens escaped, no line starting as a request."""
    out = value.replace("\\", "\\e").replace("-", "\\-")
    return re.sub(r"^([.'])", r"\\&\1", out, flags=re.MULTILINE)


def bold(value: str) -> str:
    return f"\\fB{text(value)}\\fR"


def italic(value: str) -> str:
    return f"\\fI{text(value)}\\fR"


def code(value: str) -> str:
    """Inline `code` of the README's texts: bold, as man pages show literals."""
    parts = value.split("`")
    return "".join(bold(p) if i % 2 else text(p) for i, p in enumerate(parts))


def paragraphs(*blocks: str) -> str:
    """Blocks of running text (with `code`), one .PP between each."""
    return "\n.PP\n".join(code(" ".join(b.split())) for b in blocks)


def tagged(tag: str, body: str) -> str:
    """One .TP item: the tag (already marked up) and its body (running text with `code`)."""
    return f".TP\n{tag}\n{code(' '.join(body.split()))}"
