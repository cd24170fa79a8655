"""A ring's registered files as this kernel lists them, against rings made for real."""

from __future__ import annotations

import os

import pytest
from helpers.holders import Holders

from suspendguard.config import DevicesConfig
from suspendguard.guard.inventory import take_inventory
from suspendguard.guard.scan import scan_holders
from suspendguard.system.io_uring import kernel_version, unlisted


def _ring_fdinfo(pid: int) -> bytes:
    for fd in os.listdir(f"/proc/{pid}/fd"):
        if os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:[io_uring]":
            with open(f"/proc/{pid}/fdinfo/{fd}", "rb") as f:
                return f.read()
    raise AssertionError(f"pid {pid} has no io_uring")


@pytest.mark.parametrize("mode", ["ring-sockets", "ring-empty"])
def test_a_sparse_ring_that_holds_no_node_is_read_whole(node: str, holders: Holders,
                                                        mode: str) -> None:
    """From Linux 6.14 a ring lists the slots in use alone: a socket (no path) or nothing of a
    count over 0 is its whole table, not a list left out. The job holds the node by its fd:
    a holder, never an unreadable pid (which vetoes where no device view covers the node)."""
    if kernel_version(os.uname().release) < (6, 14, 8):
        pytest.skip("a kernel before 6.14.8 lists no slot of a sparse table that is empty")
    _, pid = holders.start(node, mode=mode)
    fdinfo = _ring_fdinfo(pid)
    assert b"UserFiles:\t3\n" in fdinfo
    assert (b"socket:[" in fdinfo) == (mode == "ring-sockets")
    assert not unlisted(fdinfo)
    result = scan_holders(take_inventory(DevicesConfig((), (node,), ())))
    assert [h.pid for h in result.holders] == [pid] and result.unreadable_pids == ()


def test_an_older_kernels_count_with_no_list_is_unlisted() -> None:
    """Before 6.15 (and 6.14.8, which took its locking) a count over 0 with no slot listed is
    a ring whose lock was taken."""
    busy = b"SqThread:\t4242\nUserFiles:\t2\nUserBufs:\t0\nPollList:\n"
    assert unlisted(busy, "5.15.0-91-generic") and unlisted(busy, "6.14.2")
    assert not unlisted(busy, "6.14.8") and not unlisted(busy, "6.15")
    assert not unlisted(busy, "6.15.0") and not unlisted(busy, "6.18.44-fc-v1252")
    assert unlisted(busy, "not a release")  # unknown: the careful reading
