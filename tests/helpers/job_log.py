"""One line into a job's signals.log, as the test jobs (torch_job.py, mpi_job.py) record what they got.

One write per line with O_APPEND: lines from several processes never mix.
"""

from __future__ import annotations

import os
from pathlib import Path


def note(out: Path, line: str) -> None:
    fd = os.open(out / "signals.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)
