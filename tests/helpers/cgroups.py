"""A cgroup of a test's own: made, written to, and cleaned up (its processes killed, the
folder removed)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator

import pytest

from helpers.wait import wait_for


def remove_cgroup(path: str) -> None:
    """SIGKILL what is left in the test's own cgroup ``path`` (thawed first), then remove it."""
    with open(os.path.join(path, "cgroup.procs")) as f:
        members = [int(p) for p in f.read().split()]
    for pid in members:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    for _ in range(50):
        try:
            os.rmdir(path)
            return
        except OSError:
            time.sleep(0.05)


@contextlib.contextmanager
def own_cgroup(root: str, what: str, suffix: str = "") -> Iterator[str]:
    """A cgroup of the test's own under ``root`` (its name ending in ``suffix``: ".slice"),
    removed after it (remove_cgroup); the test is skipped where ``what`` (its kind, for the
    reason) cannot be made."""
    path = os.path.join(root, f"suspendguard-test-{os.getpid()}{suffix}")
    try:
        os.mkdir(path)
    except OSError as exc:
        pytest.skip(f"cannot make {what} here: {exc.strerror}")
    try:
        yield path
    finally:
        remove_cgroup(path)


def set_control(cgroup: str, name: str, value: str) -> None:
    """``value`` written into the cgroup's file ``name`` (cgroup.procs, freezer.state...)."""
    with open(os.path.join(cgroup, name), "w") as f:
        f.write(value)


def control(cgroup: str, name: str) -> str:
    with open(os.path.join(cgroup, name)) as f:
        return f.read()


@contextlib.contextmanager
def freezing(root: str, what: str, state: str, frozen: str, thawed: str,
             is_frozen: Callable[[str], bool]) -> Iterator[Callable[[int], str]]:
    """A cgroup of the test's own under ``root`` (own_cgroup) and the means to freeze a pid in
    it: ``frozen`` written into its control file ``state``, then a wait for ``is_frozen(cgroup)``;
    ``thawed`` written into ``state`` after the test."""
    with own_cgroup(root, what) as path:

        def freeze(pid: int) -> str:
            set_control(path, "cgroup.procs", str(pid))
            set_control(path, state, frozen)
            wait_for(lambda: is_frozen(path), interval=0.02, message=f"{path} never froze")
            return os.path.join(path, state)

        try:
            yield freeze
        finally:
            set_control(path, state, thawed)
