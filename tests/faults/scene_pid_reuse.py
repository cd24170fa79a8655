"""A holder's PID taken over mid-scan, run as PID 1 of a small PID namespace of its own.

    unshare --pid --fork --mount-proc python scene_pid_reuse.py NODE MARKER

Between the read of the holder's fds and the rest of the scan, the holder
is killed and ns_last_pid written so that an innocent process (it holds
nothing) gets its PID. Then the guard drains. Prints one JSON line: the
verdict and every signal marked; the innocent must have none.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from suspendguard.config import build
from suspendguard.guard.pipeline import run
from suspendguard.system.log import Logger
from suspendguard.system.procfs import ProcFS

HOLDER = str(Path(__file__).resolve().parent.parent / "helpers" / "holder.py")
INNOCENT = (
    "import os, signal, sys, time\n"
    "def hit(s, f):\n"
    "    open(sys.argv[1], 'a').write(f'{os.getpid()} innocent SIGINT\\n')\n"
    "signal.signal(signal.SIGINT, hit)\n"
    "print('ready', flush=True)\n"
    "time.sleep(30)\n"
)

node, marker = sys.argv[1], sys.argv[2]
holder = subprocess.Popen([sys.executable, HOLDER, "--node", node, "--marker", marker],
                          stdout=subprocess.PIPE, text=True)
assert holder.stdout is not None
holder.stdout.readline()
innocents: list[subprocess.Popen[str]] = []


class PidTakenOver(ProcFS):
    """/proc as it is, but the holder is replaced right after its fds were read."""

    def open_paths(self, pid: int, *args: object, **kw: object) -> list[tuple[str, str]]:
        paths = super().open_paths(pid, *args, **kw)  # type: ignore[arg-type]
        if pid == holder.pid and not innocents:
            holder.kill()
            holder.wait()
            Path("/proc/sys/kernel/ns_last_pid").write_text(str(pid - 1))
            innocent = subprocess.Popen([sys.executable, "-c", INNOCENT, marker],
                                        stdout=subprocess.PIPE, text=True)
            innocents.append(innocent)
            assert innocent.stdout is not None
            innocent.stdout.readline()
            assert innocent.pid == pid, (innocent.pid, pid)
        return paths


config = build({"devices": {"families": [], "nodes": [node]}, "idle": {"backends": []},
                "drain": {"timeout_s": 2},
                "state": {"dir": os.path.join(os.path.dirname(marker), "state")}})
report = run(config, dry_run=False, action="suspend", origin="test", proc=PidTakenOver(),
             idle_check=None, log=Logger(io.StringIO(), {}), record=False)
time.sleep(0.3)
marks = Path(marker).read_text().splitlines() if os.path.exists(marker) else []
for p in innocents:
    p.kill()
    p.wait()
print(json.dumps({"verdict": report.verdict.kind, "reused_pid": holder.pid, "marks": marks,
                  "holders": [h.decision.holder.pid for h in report.holders]}))
