"""A job a Jupyter cell starts with subprocess (the kernel's process group): it holds NODE and
saves a checkpoint in OUT on SIGINT, taking 1 s; SIGTERM ends it at once, unsaved.

Run by the kernel's interpreter: ``cell_job.py NODE OUT [stays]`` (stays: SIGINT marked, no exit).
Each signal it gets is a line of OUT/signals; the checkpoint is OUT/ckpt, written as
OUT/ckpt.tmp and renamed when whole.
"""

import os
import signal
import sys
import time

node, out = sys.argv[1], sys.argv[2]
held = open(node, "rb")  # noqa: SIM115 - held until the process ends


def mark(name: str) -> None:
    with open(os.path.join(out, "signals"), "a") as f:
        f.write(name + "\n")


def save(signum: int, frame: object) -> None:
    mark("SIGINT")
    with open(os.path.join(out, "ckpt.tmp"), "w") as f:
        f.write("state\n")
    time.sleep(1.0)
    os.rename(os.path.join(out, "ckpt.tmp"), os.path.join(out, "ckpt"))
    sys.exit(0)


def terminated(signum: int, frame: object) -> None:
    mark("SIGTERM")
    os._exit(143)


signal.signal(signal.SIGINT, (lambda s, f: mark("SIGINT")) if sys.argv[3:] == ["stays"] else save)
signal.signal(signal.SIGTERM, terminated)
print("ready", flush=True)
while True:
    time.sleep(1)
