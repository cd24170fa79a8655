"""The suite cannot see or signal a process it did not start.

As root every holder test makes its node with the same rdev (NODE_RDEV), so
any process on the machine holding a node of that number is, to a guard, a
holder to drain. tools/test runs pytest in a private PID namespace with its
own /proc and, before entering it, starts a sentinel outside: a graceful
holder (SIGINT ends it, after writing to its marker) of a node with that
rdev. This test runs a real guard over the sentinel's own node: the guard
must list and drain the holder the test starts there, and must not list or
signal the sentinel. After pytest, tools/test checks the sentinel is still
running and was never signalled.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.holders import Holders
from helpers.isolation import NODE_RDEV, ROOT

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(not ROOT, reason="needs root: as another user the test nodes are plain "
                                        "files no process outside the test can hold"),
]


def sentinel(name: str) -> str:
    value = os.environ.get(f"SUSPENDGUARD_TEST_SENTINEL_{name}")
    if not value:
        pytest.fail(f"SUSPENDGUARD_TEST_SENTINEL_{name} is not set: tools/test starts the sentinel "
                    "outside the test namespace; run the suite through it")
    return value


@pytest.fixture
def node() -> str:
    """The node the sentinel outside holds, instead of a fresh one (conf uses it)."""
    return sentinel("NODE")


def guard(conf: Path, *args: str) -> tuple[int, Any]:
    """The guard as a real process: ``suspendguard COMMAND --json``."""
    proc = subprocess.run([sys.executable, "-m", "suspendguard", *args, "--json",
                           "--config", str(conf)], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    return proc.returncode, json.loads(proc.stdout)


def test_a_holder_outside_the_suite_is_neither_listed_nor_signalled(
        conf: Path, node: str, holders: Holders) -> None:
    marker = Path(sentinel("MARKER"))
    st = os.stat(node)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == NODE_RDEV, "not the suite's node identity"
    assert not marker.exists() or marker.read_text() == "", (
        f"the sentinel was signalled before this test's guard ran, by something outside the "
        f"suite that signals holders of this rdev: {marker.read_text()!r}")

    proc, pid = holders.start(node)  # the positive control, inside: it must be found and drained
    code, listed = guard(conf, "check")
    assert code == 0, listed
    assert [h["pid"] for h in listed["holders"]] == [pid]

    code, report = guard(conf, "drain", "--yes")
    assert code == 0 and report["verdict"] == "allow", report
    [held] = report["holders"]
    assert held["pid"] == pid and held["outcome"]["kind"] == "exited", held
    assert proc.wait(timeout=5) == 0
    assert holders.signals() == [f"{pid} SIGINT"]

    assert not marker.exists() or marker.read_text() == "", f"sentinel signalled: {marker.read_text()!r}"
