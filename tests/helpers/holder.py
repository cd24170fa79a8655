"""A test job that holds a device node, with a chosen reaction to signals.

Prints "ready <pid>" once the node is held. Every signal it handles is
appended to --marker so tests can prove who was (not) signalled.
"""

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--node", required=True)
p.add_argument("--mode", default="graceful",
               choices=["graceful", "deaf", "slow", "inherit", "stubborn", "map", "supervisor",
                        "segv-handler", "faulthandler", "io_uring", "o_path", "ring-sockets",
                        "ring-empty"])
p.add_argument("--delay", type=float, default=0.3)
p.add_argument("--marker", default="")
p.add_argument("--exit", type=int, default=0, help="exit status after a graceful SIGINT")
p.add_argument("--leave-after", type=float, default=0.0,
               help="exit 0 by itself after this many seconds, unsignalled (0: never)")
args = p.parse_args()


def mark(what: str) -> None:
    if args.marker:
        with open(args.marker, "a") as f:
            f.write(f"{os.getpid()} {what}\n")


if args.mode == "supervisor":
    # Restarts its child whenever it exits, like a job supervisor would.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    child_args = [sys.executable, __file__, "--node", args.node, "--mode", "graceful",
                  "--delay", "0", "--marker", args.marker]
    child = subprocess.Popen(child_args, stdout=subprocess.PIPE, text=True)
    line = child.stdout.readline()
    print(f"ready {os.getpid()} child {line.split()[1]}", flush=True)
    child.wait()

    def hold_again() -> None:
        """A restarted child: holds the node, and leaves on SIGINT as a graceful one does."""
        # Its handler before its open: the guard signals only a process that holds the node.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            with open(args.node, "rb"):
                while True:
                    time.sleep(3600)
        except KeyboardInterrupt:
            mark("SIGINT")
            os._exit(0)
        except BaseException:
            import traceback

            traceback.print_exc()
            os._exit(1)

    while True:
        mark("restarted")
        # A fork, no fresh interpreter: it holds the node at once, where a Python start-up on
        # a loaded machine can outlast the guard's respawn grace before its rescan.
        pid = os.fork()
        if pid == 0:
            hold_again()
        if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 1:  # hold_again's failure
            sys.exit("holder.py: a restarted child could not hold the node")  # no loop of forks

if args.mode == "o_path":
    # Names the node, never opens it (as udevd sets a node's mode): no holder of it.
    named = os.open(args.node, os.O_PATH | os.O_CLOEXEC)
    signal.signal(signal.SIGINT, signal.default_int_handler)
else:
    f = open(args.node, "rb")  # noqa: SIM115 - held open for the life of the job
if args.mode == "map":
    from mapping import map_page  # beside this script

    map_page(f.fileno())  # this job holds the node through the mapping alone
    f.close()

if args.mode == "io_uring":
    # The node registered with an io_uring (io_uring_setup, then IORING_REGISTER_FILES), its
    # own fd closed: only the ring's fdinfo still names it.
    libc = ctypes.CDLL(None, use_errno=True)
    params = ctypes.create_string_buffer(120)  # struct io_uring_params, zeroed
    ring = libc.syscall(425, 4, params)
    assert ring >= 0, os.strerror(ctypes.get_errno())
    registered = (ctypes.c_int * 1)(f.fileno())
    assert libc.syscall(427, ring, 2, registered, 1) == 0, os.strerror(ctypes.get_errno())
    f.close()

if args.mode in ("ring-sockets", "ring-empty"):
    # Beside its fd on the node, a ring with a sparse table (-1: a free slot), which holds a
    # socket alone (a loader's network reads) or nothing yet.
    import socket

    libc = ctypes.CDLL(None, use_errno=True)
    params = ctypes.create_string_buffer(120)
    ring = libc.syscall(425, 4, params)
    assert ring >= 0, os.strerror(ctypes.get_errno())
    sock = socket.socket()
    slots = (ctypes.c_int * 3)(-1, sock.fileno() if args.mode == "ring-sockets" else -1, -1)
    assert libc.syscall(427, ring, 2, slots, 3) == 0, os.strerror(ctypes.get_errno())

if args.mode in ("graceful", "slow", "map", "io_uring", "ring-sockets", "ring-empty"):
    # Explicitly: a supervisor that ignores SIGINT must not pass that on.
    signal.signal(signal.SIGINT, signal.default_int_handler)
elif args.mode == "segv-handler":
    # Case 3 of the vendor notes: an application that catches fatal signals.
    signal.signal(signal.SIGSEGV, lambda s, _f: os._exit(1))
elif args.mode == "faulthandler":
    import faulthandler

    faulthandler.enable()
elif args.mode == "deaf":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
elif args.mode == "stubborn":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda s, _f: mark("SIGTERM"))

try:
    # Inside the try: a SIGINT that comes right after "ready" is handled too.
    print(f"ready {os.getpid()}", flush=True)
    if args.leave_after:
        time.sleep(args.leave_after)
        sys.exit(0)
    while True:
        time.sleep(3600)
except KeyboardInterrupt:
    mark("SIGINT")
    if args.mode == "slow":
        time.sleep(3600)
    time.sleep(args.delay)
    sys.exit(args.exit)
