"""Where the suite may run as root: the private PID namespace tools/test makes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = os.geteuid() == 0

needs_root = pytest.mark.skipif(not ROOT, reason="needs root (mknod, namespaces)")

# The rdev of the test nodes as root (that of /dev/full). Any process holding
# a node with this number is a holder to a guard: tools/test runs the suite in
# a private PID namespace so that the guard sees only the suite's processes,
# and starts its sentinel (tests/test_isolation.py) on a node with this rdev.
NODE_RDEV = os.makedev(1, 7)

# The system bus of every test that names none (tests/conftest.py): where nothing listens.
NO_HOST_BUS = "unix:path=/nonexistent/suspendguard-test-no-host-bus"


def isolation_problem() -> str | None:
    """Why this process may not run holder tests as root, or None.

    As root the tests make real nodes with NODE_RDEV and run real drains, so
    they must run where a guard can see and signal only processes the suite
    started: inside the PID namespace tools/test makes, whose PID 1 is
    tests/helpers/pidns_init.py, and with that namespace's own /proc.
    """
    if not ROOT:
        return None
    own = os.readlink("/proc/self/ns/pid")
    if os.environ.get("SUSPENDGUARD_TEST_PIDNS") != own:
        return "pytest is not in the PID namespace tools/test makes for it"
    if os.environ.get("SUSPENDGUARD_TEST_OUTER_PIDNS") in (None, "", own):
        return "pytest's PID namespace is the one tools/test was started in"
    try:
        init_ns = os.readlink("/proc/1/ns/pid")
        init_cmd = Path("/proc/1/cmdline").read_bytes().split(b"\0")
    except OSError as e:
        return f"cannot read PID 1 in /proc: {e}"
    if init_ns != own or not any(arg.endswith(b"pidns_init.py") for arg in init_cmd):
        return "/proc is not the private PID namespace's own /proc"
    return None
