"""The last refusal told to the users, kept in the state folder: told once, not at each repeat.

With the lid closed logind asks for the sleep again by itself (about every
30 s, its HoldoffTimeoutSec), and its idle action at each IdleActionSec: each
ask runs the veto unit, and a refusal that did not change would stack a
critical notification and a terminal message per ask. The same words for the
same sleep are told again only after ``AGAIN_S``; the journal keeps every one.
"""

from __future__ import annotations

import contextlib
import json
import os
import time

TOLD_NAME = "told.json"
AGAIN_S = 600.0


def first_time(state_dir: str, words: str, now: float | None = None) -> bool:
    """Whether ``words`` were not told in the last AGAIN_S seconds; they are kept as told now.
    What cannot be read or written tells (a lost note costs a repeat, never a silence)."""
    now = time.time() if now is None else now
    path = os.path.join(state_dir, TOLD_NAME)
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
        with open(path, encoding="utf-8") as f:
            last = json.load(f)
        if last["words"] == words and 0 <= now - float(last["time"]) < AGAIN_S:
            return False
    tmp = f"{path}.tmp{os.getpid()}"
    with contextlib.suppress(OSError):
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"words": words, "time": now}, f)
        os.replace(tmp, path)
    return True
