"""What the guard is doing now, for ``status`` to lead with: the check after resume.

The resume unit's check of the devices can take a minute (a chip that is
not ready yet, a repair, the check again) while the jobs it stopped wait
for it. Meanwhile ``status`` would say only that they are pending. The
check writes down what it does, since when and until when at the latest,
and who waits (``progress.json`` in the state folder, replaced whole), and
removes it when it ends. A file left by a check that was killed names a
process that is gone (its pid and start time no longer match) and is not
shown.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from suspendguard.record import iso
from suspendguard.system.procfs import ProcAccessError, ProcFS

NAME = "progress.json"


@dataclass(frozen=True, slots=True)
class Progress:
    """A check after resume in progress: what it checks, since when, until when at the latest,
    and the jobs that wait for it (their owners' names)."""

    what: str
    since: float
    until: float
    jobs: tuple[str, ...]
    pid: int
    start_time: int

    def describe(self, when: Any) -> str:
        """The line status leads with; ``when`` formats a time stamp for the reader."""
        n = len(self.jobs)
        waits = (f"; {n} job{' waits' if n == 1 else 's wait'} for it: "
                 + ", ".join(self.jobs)) if self.jobs else ""
        return (f"checking the devices after resume since {when(self.since)} (until "
                f"{when(self.until)} at the latest): {self.what}{waits}")

    def to_json(self) -> dict[str, Any]:
        return {"what": self.what, "since": iso(self.since), "until": iso(self.until),
                "jobs": list(self.jobs), "pid": self.pid}


@contextlib.contextmanager
def checking(state_dir: str, what: str, since: float, until: float, jobs: Sequence[str],
             proc: ProcFS | None = None) -> Iterator[None]:
    """Write down the check while it runs; a state folder that cannot take it changes nothing."""
    proc = proc or ProcFS()
    me = proc.stat(os.getpid())
    doc = {"what": what, "since": since, "until": until, "jobs": list(jobs),
           "pid": os.getpid(), "start_time": me.start_time if me else 0}
    path = os.path.join(state_dir, NAME)
    written = _write(path, json.dumps(doc))
    try:
        yield
    finally:
        if written:
            with contextlib.suppress(OSError):
                os.unlink(path)


def _write(path: str, text: str) -> bool:
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return False
    return True


def current(state_dir: str, proc: ProcFS | None = None) -> Progress | None:
    """The check in progress, or None: no file, a damaged one, or one whose process is gone."""
    proc = proc or ProcFS()
    try:
        fd = os.open(os.path.join(state_dir, NAME), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, encoding="utf-8") as f:
            doc = json.loads(f.read(65536))
        found = Progress(str(doc["what"]), float(doc["since"]), float(doc["until"]),
                         tuple(str(j) for j in doc["jobs"]), int(doc["pid"]),
                         int(doc["start_time"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        st = proc.stat(found.pid)
    except ProcAccessError:
        st = None
    return found if st is not None and st.start_time == found.start_time else None
