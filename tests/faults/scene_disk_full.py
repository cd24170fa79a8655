"""The disk fills during the drain; run in a mount namespace of its own.

    unshare --mount --propagation private python scene_disk_full.py NODE STATE

Mounts a 4 MiB tmpfs on STATE (the guard's state folder), starts a job
holding NODE that, on SIGINT, writes its "checkpoint" there until the disk
is full and then exits; runs the guard; prints one JSON line: the verdict
given and the attempt as the history has it.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

from suspendguard.config import build
from suspendguard.guard.pipeline import run
from suspendguard.store.history import History
from suspendguard.system.log import Logger

FILLER = (
    "import os, signal, sys, time\n"
    "node, fill = sys.argv[1], sys.argv[2]\n"
    "held = open(node, 'rb')\n"
    "def checkpoint(s, f):\n"
    "    with open(fill, 'wb') as out:\n"
    "        try:\n"
    "            while True:\n"
    "                out.write(b'x' * 65536)\n"
    "                out.flush()\n"
    "        except OSError:\n"
    "            pass\n"
    "    os._exit(0)\n"
    "signal.signal(signal.SIGINT, checkpoint)\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)

node, state = sys.argv[1], sys.argv[2]
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", state], check=True)
job = subprocess.Popen([sys.executable, "-c", FILLER, node, os.path.join(state, "checkpoint")],
                       stdout=subprocess.PIPE, text=True)
assert job.stdout is not None
job.stdout.readline()
config = build({"devices": {"families": [], "nodes": [node]}, "idle": {"backends": []},
                "drain": {"timeout_s": 5}, "state": {"dir": state}})
report = run(config, dry_run=False, action="suspend", origin="unit", idle_check=None,
             log=Logger(io.StringIO(), {}), history=History.open)
job.wait()
reserve_left = os.path.exists(os.path.join(state, "history.reserve"))
with History.open(state, readonly=True) as h:
    [attempt] = h.attempts()
print(json.dumps({"verdict": report.verdict.kind, "warnings": report.verdict.warnings,
                  "reserve_left": reserve_left, "job": job.pid, "recorded": attempt.to_json()}))
