"""Test jobs that change what they hold while the guard drains another holder.

Each prints "ready <pid>" once it holds what it holds first. ``--go`` and
``--done`` are FIFOs: the order of events is fixed by them, not by time.

- ``trigger`` holds --node; on SIGINT it writes --go, waits for --done, and
  exits: whatever the other job did by then is there at the guard's rescan.
- ``opener`` holds --node as it is (a management node), waits for --go, then
  opens --also (a compute node), writes --done and waits; SIGINT ends it.
- ``map-forker`` maps --node and closes its fd; on SIGINT it forks a child
  that ignores SIGINT and keeps the mapping (it prints "child <pid>"), and exits.
"""

import argparse
import ctypes
import mmap
import os
import signal
import time

p = argparse.ArgumentParser()
p.add_argument("--mode", required=True, choices=["trigger", "opener", "map-forker"])
p.add_argument("--node", required=True)
p.add_argument("--also", default="")
p.add_argument("--go", default="")
p.add_argument("--done", default="")
args = p.parse_args()

held = [open(args.node, "rb")]  # noqa: SIM115 - held open for the life of the job


def on_sigint_trigger(_signum: int, _frame: object) -> None:
    with open(args.go, "w") as go:
        go.write("go")
    with open(args.done) as done:
        done.read()
    os._exit(0)


def on_sigint_fork(_signum: int, _frame: object) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # before the fork: the child never takes it
    if os.fork() == 0:
        print(f"child {os.getpid()}", flush=True)
        while True:
            time.sleep(3600)
    os._exit(0)


if args.mode == "map-forker":
    # libc mmap directly: Python's mmap object keeps a dup of the fd.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    addr = libc.mmap(None, 4096, mmap.PROT_READ, mmap.MAP_PRIVATE, held[0].fileno(), 0)
    assert addr not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
    held.pop().close()
    signal.signal(signal.SIGINT, on_sigint_fork)
elif args.mode == "trigger":
    signal.signal(signal.SIGINT, on_sigint_trigger)
else:
    signal.signal(signal.SIGINT, signal.SIG_DFL)

print(f"ready {os.getpid()}", flush=True)
if args.mode == "opener":
    with open(args.go) as go:
        go.read()
    held.append(open(args.also, "rb"))  # noqa: SIM115
    with open(args.done, "w") as done:
        done.write("done")
while True:
    time.sleep(3600)
