"""Start-up of the sleep hook's path (run on demand).

    python benchmarks/hook_startup.py [--runs 15]

Runs `python -m suspendguard sleep-hook pre suspend` after a recorded unit
attempt (the normal path: record and go) and `sleep-hook post suspend` over
an empty log folder, and `check --dry-run` on a host without
accelerators, as fresh processes, and prints the median wall time next to
a bare `python -c pass`. Target: each under 250 ms on a 2-core machine.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _installed import installed_python

from suspendguard.config import load
from suspendguard.guard.pipeline import run
from suspendguard.system.log import Logger


def wall(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=15)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="sg-hook-"))
    (tmp / "logs").mkdir()
    conf = tmp / "config.toml"
    conf.write_text(f'[state]\ndir = "{tmp / "state"}"\n[logs]\npaths = ["{tmp / "logs"}/**"]\n')
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    python = installed_python()
    base = [python, "-I", "-m", "suspendguard"]
    results = {}
    for name, argv in {
        "python -c pass": [python, "-c", "pass"],
        "sleep-hook pre": [*base, "sleep-hook", "pre", "suspend", "--config", str(conf)],
        "sleep-hook post": [*base, "sleep-hook", "post", "suspend", "--config", str(conf)],
        "check --dry-run": [*base, "check", "--dry-run", "--config", str(conf)],
    }.items():
        times = []
        for _ in range(args.runs):
            if name == "sleep-hook pre":
                run(load(str(conf)), dry_run=False, action="suspend", origin="unit",
                    idle_check=None, log=Logger(io.StringIO(), {}))
            times.append(wall(argv, env))
        results[name] = statistics.median(times)
    for name, t in results.items():
        print(f"  {name:16s} median {t * 1000:6.1f} ms wall")
    print("  target: each under 250 ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
