"""The configured log globs: filled in for this host, and matched one path component at a time.

``**`` matches any number of folders. Matching is a small NFA over path
components: a walk carries the set of pattern positions it may be at, so
``**`` costs no recursion and the walk stops descending as soon as nothing
below a folder can match.
"""

from __future__ import annotations

import os
import pwd
import re
from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase

from suspendguard.logs.finding import Skipped

_WILD = re.compile(r"[*?\[]")
_VAR = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


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


# The walk starts at position 0 of the pattern's components.
START = frozenset({0})


def _closure(parts: tuple[str, ...], states: frozenset[int]) -> frozenset[int]:
    """The states plus every position a ``**`` there may skip to (it matches zero folders)."""
    out = set(states)
    todo = list(states)
    while todo:
        s = todo.pop()
        if s < len(parts) and parts[s] == "**" and s + 1 not in out:
            out.add(s + 1)
            todo.append(s + 1)
    return frozenset(out)


def step(parts: tuple[str, ...], states: frozenset[int], name: str) -> frozenset[int]:
    """The states after one more component ``name``; empty when it cannot match."""
    out: set[int] = set()
    for s in _closure(parts, states):
        if s >= len(parts):
            continue
        if parts[s] == "**":
            out.add(s)
        elif fnmatchcase(name, parts[s]):
            out.add(s + 1)
    return frozenset(out)


def accepts(parts: tuple[str, ...], states: frozenset[int]) -> bool:
    """Does the path walked so far match the whole pattern?"""
    return len(parts) in _closure(parts, states)


def ends_here(parts: tuple[str, ...], states: frozenset[int]) -> bool:
    """Has the pattern been used up, so that nothing below this folder can match?"""
    return _closure(parts, states) <= {len(parts)}
