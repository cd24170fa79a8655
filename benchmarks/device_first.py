"""What asking the device before the drain costs one guard run (run on demand).

    python benchmarks/device_first.py [--holders 4] [--runs 7]

N holders hold a test node (a plain file) and exit at once on SIGINT. Each
run is one real guard run (drain, history recorded) whose idle check is the
real nvidia-smi backend on the fake nvidia-smi (tests/fakes/idle/nvidia-smi,
printing the H200 capture's CSV): first the one reading before the drain,
then the settle after it. Measured in the same runs: the whole run, and
the reading before the drain alone; the run without that reading is the
difference. Printed: medians in ms and the ratio with / without.

The fake answers in the time it takes to start an interpreter; the real
nvidia-smi or npu-smi takes what its driver takes, and the cost of the step
is one call of the tool (two for nvidia-smi: utilization, then processes).
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
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from helpers.nvidia import IDLE_GPUS, TOOL

from suspendguard.config import IdleConfig, build
from suspendguard.guard.pipeline import run
from suspendguard.idle.base import IdleReport
from suspendguard.idle.nvidiasmi import NvidiaSmiBackend
from suspendguard.idle.sampler import check_idle
from suspendguard.store.history import History
from suspendguard.system.deadline import Deadline
from suspendguard.system.log import Logger

JOB = ("import signal, sys, time\nf = open(sys.argv[1], 'rb')\n"
       "signal.signal(signal.SIGINT, lambda s, fr: sys.exit(0))\nprint('ready', flush=True)\n"
       "time.sleep(60)\n")


def one_run(tmp: Path, holders: int) -> tuple[float, float]:
    """(whole run, the reading before the drain), in seconds."""
    node = tmp / "gpu0"
    node.write_bytes(b"")
    jobs = [subprocess.Popen([sys.executable, "-c", JOB, str(node)], stdout=subprocess.PIPE,
                             text=True) for _ in range(holders)]
    for job in jobs:
        assert job.stdout is not None
        job.stdout.readline()
    timings: list[float] = []

    def check(config: IdleConfig, families: Sequence[str], deadline: Deadline) -> IdleReport:
        cfg = replace(config, nvidia_smi=str(TOOL), backends=("nvidia-smi",))
        started = time.monotonic()
        report = check_idle(cfg, ["nvidia"], deadline, backends=[NvidiaSmiBackend(cfg)])
        timings.append(time.monotonic() - started)
        return report

    cfg = build({"devices": {"families": [], "nodes": [str(node)]},
                 "state": {"dir": str(tmp / "state")}, "drain": {"timeout_s": 5},
                 "idle": {"samples": 1, "settle_s": 0.5, "interval_ms": 10}})
    started = time.monotonic()
    report = run(cfg, dry_run=False, action="suspend", origin="bench", idle_check=check,
                 log=Logger(io.StringIO(), {}), history=History.open)
    took = time.monotonic() - started
    for job in jobs:
        job.wait()
    assert report.verdict.kind == "allow", report.verdict.reasons
    assert len(timings) == 2, timings  # before the drain, and after it
    return took, timings[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--holders", type=int, default=4)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args(argv)
    gpus = Path(tempfile.mkdtemp(prefix="suspendguard-bench-"))
    (gpus / "gpus.csv").write_text("\n".join(IDLE_GPUS) + "\n")
    (gpus / "apps.csv").write_text("gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n")
    os.environ["FAKE_NVIDIA_SMI_GPUS"] = str(gpus / "gpus.csv")
    os.environ["FAKE_NVIDIA_SMI_APPS"] = str(gpus / "apps.csv")
    whole, first = [], []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="suspendguard-bench-") as tmp:
            took, query = one_run(Path(tmp), args.holders)
        whole.append(took)
        first.append(query)
    with_ms = statistics.median(whole) * 1000
    query_ms = statistics.median(first) * 1000
    without_ms = statistics.median(w - f for w, f in zip(whole, first, strict=True)) * 1000
    print(f"holders {args.holders}, runs {args.runs} (medians)")
    print(f"  guard run, device asked first: {with_ms:7.1f} ms")
    print(f"  the reading before the drain:  {query_ms:7.1f} ms")
    print(f"  guard run without it:          {without_ms:7.1f} ms")
    print(f"  ratio with / without:          {with_ms / without_ms:7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
