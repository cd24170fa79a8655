"""A real torch.distributed training job, for torchrun: it holds the test node and checkpoints on SIGINT.

Each rank opens the node (as a rank opens its device) and then iterates a
DataLoader with forked workers, which inherit the node's fd as real ones
inherit the device's. Between steps the ranks all_reduce over gloo. On
SIGINT a rank raises its stop flag, which the next all_reduce carries to
every rank, so all stop at the same step; rank 0 then writes ``ckpt.tmp``
for ``--save-s`` seconds and renames it to ``ckpt.pt`` (a torch.save of the
step reached), and every rank re-raises KeyboardInterrupt, the pattern most
training scripts follow.

Every process of the job, ranks and DataLoader workers, appends one line
``sigint PID ROLE`` to ``--out``/signals.log per SIGINT it receives, so a
test counts the signals in the job itself. ``--out``/ready-RANK says the
rank is in its loop; ``--out``/pids-RANK lists the rank's worker pids.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

import job_log
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

p = argparse.ArgumentParser()
p.add_argument("--node", required=True)
p.add_argument("--out", required=True)
p.add_argument("--save-s", type=float, default=3.0)
p.add_argument("--workers", type=int, default=2)
args = p.parse_args()
out = Path(args.out)
rank = int(os.environ["RANK"])
restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


def note(line: str) -> None:
    job_log.note(out, line)


stop = [False]


def counting(role: str) -> None:
    def handler(signum: int, frame: object) -> None:
        note(f"sigint {os.getpid()} {role}")
        if role == "worker":
            raise KeyboardInterrupt  # a DataLoader worker's own default: it leaves quietly
        stop[0] = True  # the rank stops at the end of this step, with the others

    signal.signal(signal.SIGINT, handler)


class Steps(Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 1 << 30

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(0.01)
        return torch.full((4,), float(i))


def worker_init(_worker_id: int) -> None:
    counting("worker")


counting("rank")
node = open(args.node, "rb")  # noqa: SIM115 - held for the job's life; the workers inherit it
dist.init_process_group("gloo")
loader = DataLoader(Steps(), batch_size=2, num_workers=args.workers,
                    multiprocessing_context="fork", worker_init_fn=worker_init)
step = 0
batches = iter(loader)
try:
    for batch in batches:
        # The stop flag travels with the step's own all_reduce: every rank
        # stops at the same step, the way distributed trainers agree on it.
        total = torch.cat([batch.sum().reshape(1), torch.tensor([float(stop[0])])])
        dist.all_reduce(total)
        step += 1
        if step == 3:
            pids = [w.pid for w in batches._workers]  # type: ignore[attr-defined]
            (out / f"pids-{rank}").write_text(" ".join(map(str, pids)))
            (out / f"ready-{rank}").write_text(f"{os.getpid()} {restart}\n")
        if total[1] > 0:
            raise KeyboardInterrupt
except KeyboardInterrupt:
    if rank == 0:
        tmp = out / "ckpt.tmp"
        torch.save({"step": step}, tmp)
        deadline = time.monotonic() + args.save_s
        while time.monotonic() < deadline:  # a large checkpoint takes this long to write
            time.sleep(0.05)
        os.replace(tmp, out / "ckpt.pt")
        note(f"saved {os.getpid()} {step}")
    raise
finally:
    node.close()
sys.exit(0)
