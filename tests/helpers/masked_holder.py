"""A test job that holds a device node with SIGINT blocked, and maybe a way to take it all the same.

Modes: ``blocked`` (blocked in every thread, nobody waits: Ray's daemons
start so), ``sigwait`` (a thread waits in sigwait and exits on SIGINT),
``signalfd`` (the main thread reads a signalfd for SIGINT and exits),
``other-thread`` (a thread started before the main one blocked it takes it).
Each has a second thread that sleeps. Prints "ready <pid>" once set up;
appends "<pid> SIGINT" to --marker when it takes SIGINT.
"""

import argparse
import ctypes
import os
import signal
import threading
import time

p = argparse.ArgumentParser()
p.add_argument("--node", required=True)
p.add_argument("--mode", required=True, choices=["blocked", "sigwait", "signalfd", "other-thread"])
p.add_argument("--marker", default="")
args = p.parse_args()


def mark(what: str) -> None:
    if args.marker:
        with open(args.marker, "a") as f:
            f.write(f"{os.getpid()} {what}\n")


def took_sigint() -> None:
    mark("SIGINT")
    os._exit(0)


def sleeper() -> None:
    while True:
        time.sleep(3600)


def waiter() -> None:
    signal.sigwait({signal.SIGINT})
    took_sigint()


def open_signalfd() -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    mask = (ctypes.c_ulong * (128 // ctypes.sizeof(ctypes.c_ulong)))()
    mask[0] = 1 << (signal.SIGINT - 1)
    fd: int = libc.signalfd(-1, ctypes.byref(mask), os.O_CLOEXEC)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "signalfd")
    return fd


def wchan(tid: int) -> str:
    with open(f"/proc/self/task/{tid}/wchan") as f:
        return f.read().strip()


node = open(args.node, "rb")  # noqa: SIM115 - held open for the life of the job
signal.signal(signal.SIGINT, lambda _s, _f: took_sigint())
if args.mode == "other-thread":
    threading.Thread(target=sleeper, daemon=True).start()  # its mask is the unblocked one
# Before any other thread: they all inherit the mask.
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
threading.Thread(target=sleeper, daemon=True).start()
sfd = open_signalfd() if args.mode == "signalfd" else -1
if args.mode == "sigwait":
    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    assert thread.native_id is not None
    # Ready only once it waits: a scan before would rightly see nobody waiting.
    deadline = time.monotonic() + 10
    while wchan(thread.native_id).partition(".")[0] != "do_sigtimedwait":
        assert time.monotonic() < deadline, "the sigwait thread never waited"
        time.sleep(0.01)
print(f"ready {os.getpid()}", flush=True)
if args.mode == "signalfd":
    os.read(sfd, 128)
    took_sigint()
sleeper()
