"""The device logs read after resume: each glob in a bounded worker of its own, against one
search in the hook's own process (run on demand).

    farm-bench -n 10 -- python benchmarks/after_resume_logs.py apart \
        --vs 'python benchmarks/after_resume_logs.py together'

Both read the same corpus, made once in a folder of the system's temporary space: GLOBS
globs (the default [logs] paths fill in three on a host with one holder's home), each
over FILES device logs of SIZE bytes, a documented failure near each file's end. ``apart``
is what the sleep hook's post runs (logs/search.py search_apart: a forked worker per
glob, each answered by a bound, so that a folder that never answers costs only its own
glob); ``together`` is one search in this process, which a hung folder would hold up
whole. Each prints the findings it made, which must agree.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from suspendguard.logs.search import search, search_apart

GLOBS = 3
FILES = 20
SIZE = 256 * 1024
LINE = ("[INFO] RUNTIME(4242,python3):2026-03-01-12:00:00.000.000 [runtime.cc:100] "
        "step done\n")
HWTS = ("[ERROR] TSCH(-1,null):2026-03-01-12:00:01.000.000 1 (dieid:0,cpuid:0) "
        "device_management_plat.c:563 suspend_ack: suspend pre check fail, hwts is busy\n")


def corpus() -> list[str]:
    """The globs, over a corpus made once and kept for the runs that follow."""
    root = Path(tempfile.gettempdir()) / f"suspendguard-bench-logs-{GLOBS}-{FILES}-{SIZE}"
    if not (root / "done").exists():
        for g in range(GLOBS):
            folder = root / f"glob-{g}" / "device-0"
            folder.mkdir(parents=True, exist_ok=True)
            body = LINE * (SIZE // len(LINE)) + HWTS
            for f in range(FILES):
                (folder / f"device-0_{f}.log").write_text(body)
        (root / "done").write_text("")
    return [f"{root}/glob-{g}/**" for g in range(GLOBS)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("apart", "together"), nargs="?", default="apart")
    mode = parser.parse_args().mode
    globs = corpus()
    stop_at = time.monotonic() + 40.0
    if mode == "apart":
        report = search_apart(globs, stop_at=stop_at)
    else:
        report = search(patterns=globs, stop_at=stop_at)
    print(mode, len(report.findings), report.files_read)
    return 0


if __name__ == "__main__":
    sys.exit(main())
