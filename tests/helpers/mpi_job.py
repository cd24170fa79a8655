"""A real Open MPI job (mpi4py) for mpirun: each rank holds the test node and saves on SIGINT.

Each rank opens the node, then works in steps, meeting the others in an
allreduce now and then. On SIGINT a rank notes it (``sigint PID rank`` in
``--out``/signals.log, one line per SIGINT received; SIGTERM is noted as
``sigterm PID``), writes ``rank-N.tmp`` for ``--save-s`` seconds and renames
it to ``rank-N.ckpt``, then exits 0. ``--out``/ready-N says rank N is in
its loop. With ``--fail-rank N`` rank N leaves at once on SIGINT, with
status 1 and no MPI_Finalize, as a rank that crashes while the others save.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

import job_log
from mpi4py import MPI

p = argparse.ArgumentParser()
p.add_argument("--node", required=True)
p.add_argument("--out", required=True)
p.add_argument("--save-s", type=float, default=3.0)
p.add_argument("--fail-rank", type=int, default=-1,
               help="this rank leaves at once on SIGINT, with an error and no MPI_Finalize")
args = p.parse_args()
out = Path(args.out)
comm = MPI.COMM_WORLD
rank = comm.Get_rank()
stop = [False]


def note(line: str) -> None:
    job_log.note(out, line)


def on_sigint(signum: int, frame: object) -> None:
    note(f"sigint {os.getpid()} rank")
    stop[0] = True


def on_sigterm(signum: int, frame: object) -> None:
    note(f"sigterm {os.getpid()} rank")
    os._exit(143)


signal.signal(signal.SIGINT, on_sigint)
signal.signal(signal.SIGTERM, on_sigterm)
node = open(args.node, "rb")  # noqa: SIM115 - held for the job's life
comm.allreduce(1)
(out / f"ready-{rank}").write_text(f"{os.getpid()}\n")
step = 0
while not stop[0]:
    time.sleep(0.05)
    step += 1
if rank == args.fail_rank:
    note(f"failed {os.getpid()} {rank}")
    os._exit(1)
tmp = out / f"rank-{rank}.tmp"
tmp.write_text(f"step {step}\n")
time.sleep(args.save_s)  # a large checkpoint takes this long to write
os.replace(tmp, out / f"rank-{rank}.ckpt")
note(f"saved {os.getpid()} {rank}")
node.close()
sys.exit(0)
