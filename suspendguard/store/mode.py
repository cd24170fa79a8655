"""The guard's mode, kept in the state folder: ``enforce``, ``observe`` or ``off``.

``enforce`` (no file, the default) drains and vetoes. ``observe`` looks at
every suspend as ``check`` does, records what it would have done, signals
nobody and never refuses: the safe way to roll the guard out. ``off`` lets
every suspend go without a look. The mode is a file rather than a key of the
configuration so that one command switches it (``suspendguard mode off``)
without editing an operator's file; it lives in ``[state] dir``, which the
trust rule already holds to root. A file that cannot be read or says
something else reads as ``enforce`` with a problem: an unreadable switch must
not turn the guard off.
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass

from suspendguard.config import DEFAULT_STATE_DIR

MODES = ("enforce", "observe", "off")
MODE_NAME = "mode"
# The veto unit's own StateDirectory=: where the mode is kept, and read, while the
# configuration (and with it [state] dir) cannot be loaded, so that `mode off` still works.
UNIT_STATE_DIR = DEFAULT_STATE_DIR


@dataclass(frozen=True, slots=True)
class Mode:
    name: str  # one of MODES, or "unknown" to a user who may not read the file
    problem: str | None = None  # why the file was not taken at its word

    @property
    def enforcing(self) -> bool:
        return self.name == "enforce"


ENFORCE = Mode("enforce")
UNKNOWN = Mode("unknown", "only root can read the guard's mode (sudo suspendguard status)")


def hidden(state_dir: str) -> bool:
    """This user may not read the mode file (the state folder is root's, 0700): what it says
    is unknown here, whatever the guard, which runs as root, reads in it. Never "enforce" in
    its place: the guard may be off or only observing."""
    if os.geteuid() == 0:
        return False
    path = os.path.join(state_dir, MODE_NAME)
    try:
        os.stat(path)
    except PermissionError:
        return True
    except OSError:
        return False
    return not os.access(path, os.R_OK)


def shown(state_dir: str) -> Mode:
    """The mode as this user may know it: :data:`UNKNOWN` where only root can read it."""
    return UNKNOWN if hidden(state_dir) else read(state_dir)


def read(state_dir: str) -> Mode:
    path = os.path.join(state_dir, MODE_NAME)
    try:
        # Never waits: a FIFO put there would hold every reader, the sleep hook included.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return ENFORCE
    except OSError as exc:
        return Mode("enforce", f"{path}: {exc.strerror}: enforcing")
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return Mode("enforce", f"{path}: not a regular file: enforcing")
        text = os.read(fd, 64).decode("ascii", "replace").strip()
    except OSError as exc:
        return Mode("enforce", f"{path}: {exc.strerror}: enforcing")
    finally:
        os.close(fd)
    if text not in MODES:
        return Mode("enforce", f"{path}: {text[:20]!r} is not one of {', '.join(MODES)}: enforcing")
    return Mode(text)


def write(state_dir: str, name: str) -> None:
    """Set the mode; ``enforce`` removes the file. Raises OSError."""
    if name not in MODES:
        raise ValueError(name)
    path = os.path.join(state_dir, MODE_NAME)
    if name == "enforce":
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return
    os.makedirs(state_dir, mode=0o700, exist_ok=True)  # as the history keeps it
    tmp = f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        try:
            os.write(fd, f"{name}\n".encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
