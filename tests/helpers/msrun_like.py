"""A launcher shaped like MindSpore's msrun: it SIGKILLs the other ranks as soon as one fails.

Starts two ranks (helpers/holder.py, both holding ``--node``): rank 0 takes
``--save-s`` seconds to leave after its SIGINT (a checkpoint), rank 1
leaves at once with status 1 (a rank that fails on its way out). Like
msrun's join loop it polls its ranks, and on the first non-zero exit kills
the rest. It holds nothing, installs no signal handler, and writes each
rank's exit status to ``--out`` (``RANK STATUS`` lines) once all ended.
With ``--restart-after`` it then starts a new rank, as an elastic launcher
does, and writes its pid to ``--out``.restarted.
Prints "ready PID ranks PID0 PID1" once both ranks hold the node.
"""

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

p = argparse.ArgumentParser()
p.add_argument("--node", required=True)
p.add_argument("--out", required=True)
p.add_argument("--save-s", type=float, default=2.0)
p.add_argument("--restart-after", type=float, default=0.0,
               help="once its ranks ended, start a new rank this many seconds later and run "
                    "on, as an elastic launcher restarts them (0: exit)")
args = p.parse_args()
holder = str(Path(__file__).with_name("holder.py"))
ranks = [subprocess.Popen([sys.executable, holder, "--node", args.node, "--delay", delay,
                           "--exit", code], stdout=subprocess.PIPE, text=True)
         for delay, code in ((str(args.save_s), "0"), ("0", "1"))]
pids = []
for rank in ranks:
    assert rank.stdout is not None
    pids.append(rank.stdout.readline().split()[1])
print(f"ready {os.getpid()} ranks {' '.join(pids)}", flush=True)
while [r.poll() for r in ranks].count(None):
    if any(r.returncode not in (None, 0) for r in ranks):
        for r in ranks:
            if r.poll() is None:
                r.kill()
    time.sleep(0.05)
Path(args.out).write_text("".join(f"{i} {r.returncode}\n" for i, r in enumerate(ranks)))
if args.restart_after:
    time.sleep(args.restart_after)
    again = subprocess.Popen([sys.executable, holder, "--node", args.node], stdout=subprocess.PIPE,
                             text=True)
    assert again.stdout is not None
    Path(args.out + ".restarted").write_text(again.stdout.readline().split()[1])
    again.wait()
