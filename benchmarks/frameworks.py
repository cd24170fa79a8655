"""Seconds from the drain signal to the verdict: a real torchrun job beside a plain holder (on demand).

    python benchmarks/frameworks.py [--runs 5] [--save-s 0]

Needs Debian's python3-torch under /usr/bin/python3 (tools/test installs it
as root). In each run, in turn: a torchrun job of 2 ranks, each with 2
forked DataLoader workers (tests/helpers/torch_job.py; rank 0 saves for
``--save-s`` seconds), and one plain holder that exits on SIGINT
(tests/helpers/holder.py), each drained through the real pipeline (history
recorded, no idle backends). The clock starts at the log line that says the
signal went (to torchrun's agent for the job, to the holder itself for the
plain one) and stops at the verdict line. The torchrun job's figure is
what its framework takes to stop: the agent's forward, each rank's
exception, gloo's teardown, the workers' exit, the agent's own exit. A
plain file stands in for the node, so no other process can count as a
holder.
"""

from __future__ import annotations

import argparse
import io
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from helpers.frameworks import SYSTEM_PYTHON, torchrun
from helpers.holders import HOLDER

from suspendguard.config import build
from suspendguard.guard.pipeline import run
from suspendguard.store.history import History
from suspendguard.system.log import Logger


class Clock(Logger):
    """Notes when the signal went and when the verdict was given."""

    def __init__(self) -> None:
        super().__init__(io.StringIO(), {})
        self.sent = 0.0
        self.verdict = 0.0

    def log(self, priority: int, message: str) -> None:
        now = time.monotonic()
        if message.startswith("sent SIGINT") and not self.sent:
            self.sent = now
        if "): allow" in message or "): veto" in message or "): unknown" in message:
            self.verdict = now
        super().log(priority, message)


def drained(config: object) -> tuple[float, str]:
    clock = Clock()
    report = run(config, dry_run=False, log=clock, idle_check=None,  # type: ignore[arg-type]
                 history=History.open)
    return clock.verdict - clock.sent, report.verdict.kind


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--save-s", type=float, default=0.0)
    args = p.parse_args()
    if subprocess.run([SYSTEM_PYTHON, "-c", "import torch"], capture_output=True).returncode:
        print(f"{SYSTEM_PYTHON} has no torch (python3-torch)", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="sg-frameworks-"))
    node = tmp / "npu0"
    node.write_bytes(b"")
    config = build({"devices": {"families": [], "nodes": [str(node)]},
                    "state": {"dir": str(tmp / "state")}, "idle": {"backends": []},
                    "drain": {"timeout_s": 30 + args.save_s}})
    jobs: list[float] = []
    plain: list[float] = []
    for i in range(args.runs):
        job = torchrun(str(node), tmp / f"job-{i}", save_s=args.save_s)
        try:
            job.wait_ready()
            seconds, verdict = drained(config)
            saved = (job.out / "ckpt.pt").exists()
        finally:
            job.end()
        if verdict != "allow" or not saved:
            print(f"run {i}: torchrun job: verdict {verdict}, checkpoint saved: {saved}")
            return 1
        jobs.append(seconds)
        holder = subprocess.Popen([sys.executable, HOLDER, "--node", str(node), "--mode",
                                   "graceful", "--delay", "0"], stdout=subprocess.PIPE,
                                  text=True, start_new_session=True)
        assert holder.stdout is not None
        holder.stdout.readline()
        try:
            seconds, verdict = drained(config)
        finally:
            holder.kill()
            holder.wait()
        if verdict != "allow":
            print(f"run {i}: plain holder: verdict {verdict}")
            return 1
        plain.append(seconds)
    for name, xs in (("torchrun job (2 ranks, 4 workers)", jobs), ("plain holder", plain)):
        print(f"{name:36} signal -> verdict  min {min(xs):.3f} s  median "
              f"{statistics.median(xs):.3f} s  max {max(xs):.3f} s")
    print(f"ratio of medians: {statistics.median(jobs) / statistics.median(plain):.1f}x "
          f"({args.runs} runs each, save {args.save_s:g} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
