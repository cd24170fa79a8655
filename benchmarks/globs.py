"""The log globs: the guard's descriptor walk against the kept libraries' globbing (on demand).

    python benchmarks/globs.py [--homes 3] [--files 10000] [--runs 5]

Builds HOMES home folders of FILES source files each beside an
``ascend/log/debug/plog`` folder of 30 logs, then lists the logs of
``HOME/*/ascend/log/**`` with: suspendguard's walk (logs/walk.py: each folder
opened relative to its parent's descriptor, symbolic links refused, a folder
left as soon as nothing below it can match the glob); the standard library's
``glob.glob(recursive=True)``; and, where wcmatch is installed, its
``glob.glob`` and a walk of every folder with ``globmatch`` on each path (a
matcher of whole paths, which cannot tell the walk that nothing below a
folder can match). Medians and minimums of --runs runs.

The libraries' globs find files by path and follow symbolic links to
folders, so they cannot stand in for the walk, which reads users' folders as
root; what a library could replace is the matcher inside it, and the last row
is what that costs.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from suspendguard.logs import walk


def build(root: Path, homes: int, files: int) -> None:
    for u in range(homes):
        home = root / f"u{u}"
        for i in range(files):
            folder = home / "project" / f"src{i // 500}" / f"mod{i // 25}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"f{i}.py").write_text("x")
        logs = home / "ascend" / "log" / "debug" / "plog"
        logs.mkdir(parents=True)
        for i in range(30):
            (logs / f"plog-{i}_1.log").write_text("x\n")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--homes", type=int, default=3)
    p.add_argument("--files", type=int, default=10000)
    p.add_argument("--runs", type=int, default=5)
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="sg-globs-"))
    try:
        build(root, args.homes, args.files)
        pattern = f"{root}/*/ascend/log/**"

        def ours() -> int:
            found = walk.plan([], [pattern], [], {}, None)
            found.close()
            return len(found.candidates)

        def stdlib() -> int:
            return sum(1 for f in glob.glob(pattern, recursive=True) if os.path.isfile(f))

        ways: dict[str, Callable[[], int]] = {"suspendguard walk": ours, "stdlib glob.glob": stdlib}
        try:
            from wcmatch import glob as wglob
        except ImportError:
            print("(wcmatch is not installed: its rows are left out)")
        else:
            flags = wglob.GLOBSTAR | wglob.DOTGLOB

            def wc_glob() -> int:
                return sum(1 for f in wglob.glob(pattern, flags=flags) if os.path.isfile(f))

            def wc_match() -> int:
                return sum(1 for top, _, names in os.walk(root) for n in names
                           if wglob.globmatch(os.path.join(top, n), pattern, flags=flags))

            ways["wcmatch glob.glob"] = wc_glob
            ways["walk all + wcmatch globmatch"] = wc_match
        print(f"{args.homes} homes x {args.files} files, pattern HOME/*/ascend/log/**; "
              f"{args.runs} runs")
        for name, way in ways.items():
            walls = []
            for _ in range(args.runs):
                start = time.perf_counter()
                count = way()
                walls.append(time.perf_counter() - start)
            assert count == 30 * args.homes, (name, count)
            print(f"  {name:30s} median {statistics.median(walls) * 1000:8.1f} ms   "
                  f"min {min(walls) * 1000:8.1f} ms")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
