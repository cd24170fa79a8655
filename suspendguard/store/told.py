"""The last refusal told to the users, kept in the state folder: told once, not at each repeat.

With the lid closed logind asks for the sleep again by itself (about every
30 s, its HoldoffTimeoutSec), and its idle action at each IdleActionSec: each
ask runs the veto unit, and a refusal that did not change would stack a
critical notification and a terminal message per ask. The same words for the
same sleep are told again only after ``AGAIN_S``; the journal keeps every one.

The note is kept before the telling: a guard ended while it tells (the unit's
timeout) has told someone already, perhaps, and the next ask must not tell
them twice. A telling that reached nobody takes its note back (:func:`untold`):
the refusal was told to no one, and the next ask (an admin who logged in since)
tells it.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass

TOLD_NAME = "told.json"
AGAIN_S = 600.0


@dataclass(frozen=True, slots=True)
class Note:
    """The refusal kept as told, and what the file held before it, to be put back."""

    path: str
    kept: str  # the file's text as this note wrote it
    before: str | None  # its text before (None: there was none)


def first_time(state_dir: str, words: str, now: float | None = None) -> Note | None:
    """None when ``words`` were told in the last AGAIN_S seconds; else they are kept as told
    now, and the note says how to take that back. What cannot be read or written tells (a
    lost note costs a repeat, never a silence)."""
    now = time.time() if now is None else now
    path = os.path.join(state_dir, TOLD_NAME)
    before = _read(path)
    with contextlib.suppress(ValueError, TypeError, KeyError):
        last = json.loads(before or "")
        if last["words"] == words and 0 <= now - float(last["time"]) < AGAIN_S:
            return None
    kept = json.dumps({"words": words, "time": now})
    _write(path, kept)
    return Note(path, kept, before)


def untold(note: Note) -> None:
    """Take back ``note``, whose refusal reached nobody: the file holds what it held before.
    A note another run kept since is its own, and stays."""
    if _read(note.path) != note.kept:
        return
    if note.before is None:
        with contextlib.suppress(OSError):
            os.unlink(note.path)
    else:
        _write(note.path, note.before)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, ValueError):  # ValueError: not UTF-8, read as no note
        return None


def _write(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with contextlib.suppress(OSError):
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
