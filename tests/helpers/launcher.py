"""A test launcher that holds nothing itself and starts jobs that hold the node (helpers/holder.py).

``--shape torchrun``: starts ``--workers`` workers and exits once all of
them exited (status 1 if any failed), as torchrun does when its workers end.
``--shape cron``: starts one job and stays running after the job ended, as
cron, a CI runner's shell executor or a spawner does. Neither touches
SIGINT: only the jobs hold the node, so only they should get the signal.
Prints "ready PID" once every job printed its own "ready".
"""

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

p = argparse.ArgumentParser()
p.add_argument("--node", required=True)
p.add_argument("--shape", choices=["torchrun", "cron"], required=True)
p.add_argument("--workers", type=int, default=2)
p.add_argument("--delay", type=float, default=0.5)
p.add_argument("--marker", default="")
args = p.parse_args()

holder = str(Path(__file__).with_name("holder.py"))
count = args.workers if args.shape == "torchrun" else 1
jobs = [subprocess.Popen([sys.executable, holder, "--node", args.node, "--delay", str(args.delay),
                          "--marker", args.marker], stdout=subprocess.PIPE, text=True)
        for _ in range(count)]
pids = []
for job in jobs:
    assert job.stdout is not None
    pids.append(job.stdout.readline().split()[1])
print(f"ready {os.getpid()} jobs {' '.join(pids)}", flush=True)
codes = [job.wait() for job in jobs]
if args.shape == "torchrun":
    sys.exit(1 if any(codes) else 0)
print(f"job ended {codes}; the launcher goes on", flush=True)
while True:
    time.sleep(3600)
