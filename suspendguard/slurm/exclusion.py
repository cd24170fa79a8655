"""The SuspendExcNodes file slurm.conf includes: its lock, and its writes by a rename.

Kept in SlurmUser's folder and written by SuspendProgram (SlurmUser) and the sync
timer (root) alike: every name made there refuses a link planted in its place.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

# The lock and the re-read mark are made in SlurmUser's folder by root's run too (the
# timer's): a link planted in their place must not have root create a file elsewhere.
_MARK_FLAGS = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC

EXCLUDE_HEAD = ("# Written by suspendguard slurm: the nodes its guard drained, and [slurm] "
                "exclude.\n# Included by slurm.conf; edits here are overwritten.\n")


@contextlib.contextmanager
def exclusion_lock(path: Path) -> Iterator[None]:
    """The lock beside the exclusion file, held for the ``with`` block."""
    # Read-only: the timer's run (root) and SuspendProgram's (SlurmUser) share one lock file.
    with open(os.open(f"{path}.lock", _MARK_FLAGS, 0o644)) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def write_if_changed(path: Path, text: str, owed: Path | None = None) -> bool:
    """``text`` into ``path`` by a rename (the caller holds :func:`exclusion_lock`); False when
    it already held it. ``owed`` is made first, when given."""
    try:
        # As bytes: an edit in another encoding (a Latin-1 comment) is a change, rewritten.
        if path.read_bytes() == text.encode():
            return False
    except FileNotFoundError:
        pass
    if owed is not None:  # read-only, as the lock: root's may be there for SlurmUser's run
        os.close(os.open(owed, _MARK_FLAGS, 0o644))
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            # Through the descriptor: in SlurmUser's folder the name may be a link by now.
            os.fchmod(f.fileno(), 0o644)
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True
