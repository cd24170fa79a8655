"""The disk is full before the attempt begins; run in a mount namespace of its own.

    unshare --mount --propagation private python scene_full_at_start.py NODE STATE MARKS KEPT

Mounts a 4 MiB tmpfs (no room kept for root) on STATE, the guard's state folder; writes
one attempt there (which keeps the room of ``history.reserve``), removes that room unless
KEPT is "kept", and fills the disk. A job holding NODE then saves for a minute on SIGINT,
appending a line to MARKS (outside the tmpfs) for each one. Two guard runs follow, one
after the other, each waiting 1 s; prints one JSON line: the warnings of each, the notes
the second has on the job, and the SIGINTs the job got.
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
from suspendguard.store.reserve import RESERVE_NAME
from suspendguard.system.log import Logger

SAVES = (
    "import signal, sys, time\n"
    "node, marks = sys.argv[1], sys.argv[2]\n"
    "held = open(node, 'rb')\n"
    "def saving(s, f):\n"
    "    with open(marks, 'a') as out:\n"
    "        out.write('SIGINT\\n')\n"
    "signal.signal(signal.SIGINT, saving)\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)

node, state, marks, kept = sys.argv[1:5]
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", state], check=True)
with History.open(state) as h:
    h.begin("suspend", "cli", True, "digest")
if kept != "kept":
    os.unlink(os.path.join(state, RESERVE_NAME))
try:
    with open(os.path.join(state, "filler"), "wb") as out:
        while True:
            out.write(b"x" * 65536)
            out.flush()
except OSError:
    pass
job = subprocess.Popen([sys.executable, "-c", SAVES, node, marks], stdout=subprocess.PIPE,
                       text=True)
assert job.stdout is not None and job.stdout.readline() == "ready\n"
config = build({"devices": {"families": [], "nodes": [node]}, "idle": {"backends": []},
                "drain": {"timeout_s": 1}, "state": {"dir": state}})
try:
    first, second = (run(config, dry_run=False, action="suspend", origin="unit",
                         idle_check=None, log=Logger(io.StringIO(), {}), history=History.open)
                     for _ in range(2))
    notes = [n for hr in second.holders if hr.decision.holder.pid == job.pid
             for n in hr.decision.notes]
finally:
    job.kill()
    job.wait()
with open(marks) as got:
    signals = got.read().split()
print(json.dumps({"first": list(first.verdict.warnings), "second": list(second.verdict.warnings),
                  "attempt": first.attempt.id, "notes": notes, "signals": signals}))
