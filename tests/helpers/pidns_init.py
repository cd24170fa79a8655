"""PID 1 of the test suite's private PID namespace: runs one command, reaps, exits with its status.

    unshare --pid --fork --mount-proc --kill-child -- python pidns_init.py -- CMD ...

Refuses to run unless it really is PID 1 of a PID namespace whose /proc is
its own: a guard under test then reads that /proc and can see and signal
only the processes started inside. Exports ``SUSPENDGUARD_TEST_PIDNS`` (this
namespace's identity) for tests/conftest.py to check.

It forks CMD and waits for every process that ends up as its child (orphans
are reparented to PID 1 and would otherwise stay zombies). SIGTERM, SIGHUP
and SIGQUIT are passed on to CMD; SIGINT is not, because a terminal's Ctrl-C
reaches CMD itself (same process group). CMD starts with every signal at its
default disposition, SIGINT included (none ignored). When CMD ends, this process exits with
CMD's status (128 + N for a signal N) and the kernel ends whatever is left in
the namespace.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

PASSED_ON = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("pidns_init: no command", file=sys.stderr)
        return 2
    if os.getpid() != 1 or os.readlink("/proc/self") != "1":
        print("pidns_init: not PID 1 of a PID namespace with its own /proc "
              "(unshare --pid --fork --mount-proc)", file=sys.stderr)
        return 2
    os.environ["SUSPENDGUARD_TEST_PIDNS"] = os.readlink("/proc/self/ns/pid")

    child = os.fork()
    if child == 0:
        # Python itself ignores SIGPIPE and SIGXFSZ; exec would pass that on.
        for signo in (signal.SIGINT, signal.SIGPIPE, signal.SIGXFSZ, *PASSED_ON):
            signal.signal(signo, signal.SIG_DFL)
        try:
            os.execvp(argv[0], argv)
        except OSError as e:
            print(f"pidns_init: {argv[0]}: {e}", file=sys.stderr)
            os._exit(127)

    def pass_on(signo: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signo)

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for signo in PASSED_ON:
        signal.signal(signo, pass_on)

    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return 1  # cannot happen while the command runs
        if pid == child:
            return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
