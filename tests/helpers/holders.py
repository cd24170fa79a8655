"""Test jobs that hold a device node (helpers/holder.py), always cleaned up."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

HOLDER = str(Path(__file__).parent / "holder.py")
# A parent that holds the node (argv[1]) and a worker it forked after the open, the node
# inherited, as a rank and its DataLoader worker; it prints "PARENT WORKER". Its SIGINT
# handler saves for longer than a drain waits.
SLOW_FAMILY = """
import os, signal, sys, time
node = open(sys.argv[1], "rb")
signal.signal(signal.SIGINT, lambda *_: time.sleep(30))
child = os.fork()
if child == 0:
    time.sleep(60)
    os._exit(0)
print(os.getpid(), child, flush=True)
time.sleep(60)
"""


class Holders:
    """Starts holder processes and always cleans them up."""

    def __init__(self, tmp_path: Path) -> None:
        self.procs: list[subprocess.Popen[str]] = []
        self.marker = str(tmp_path / "signals.log")
        self.extra_pids: list[int] = []

    def start(self, node: str, mode: str = "graceful", delay: float = 0.3,
              argv_prefix: list[str] | None = None,
              leave_after: float = 0.0,
              python: str | None = None) -> tuple[subprocess.Popen[str], int]:
        """``leave_after``: the job exits 0 by itself after that many seconds (0: never);
        ``python``: the interpreter it runs under (this one's if None)."""
        argv = [python or sys.executable, HOLDER, "--node", node, "--mode", mode, "--delay", str(delay),
                "--marker", self.marker, "--leave-after", str(leave_after)]
        proc = subprocess.Popen((argv_prefix or []) + argv, stdout=subprocess.PIPE, text=True,
                                start_new_session=True)
        self.procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        assert line and line[0] == "ready", f"holder did not start: {line}"
        pid = int(line[1])
        if len(line) > 3:
            self.extra_pids.append(int(line[3]))
        if pid != proc.pid:
            self.extra_pids.append(pid)
        return proc, pid

    def signals(self) -> list[str]:
        try:
            return Path(self.marker).read_text().splitlines()
        except FileNotFoundError:
            return []

    def cleanup(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for pid in self.extra_pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
