"""Issue 15 item 13: the logs command's limits never hide a real finding."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.isolation import needs_root

from suspendguard.logs import walk
from suspendguard.logs.search import search

HWTS = ("[ERROR] TSCH(-1,null):2023-01-01-02:53:45.850.781 1 (dieid:0,cpuid:0) "
        "device_management_plat.c:563 suspend_ack: suspend pre check fail, hwts is busy\n")
HERE = Path(__file__).resolve().parent


def many_files(folder: Path, n: int, content: bytes) -> None:
    folder.mkdir()
    for i in range(n):
        fd = os.open(folder / f"plog-{i}.log", os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, content)
        os.close(fd)


def test_a_sibling_folder_of_empty_files_hides_nothing(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    (logs / "a").mkdir(parents=True)
    real = logs / "a" / "plog-1_1.log"
    real.write_text(HWTS)
    os.utime(real, (time.time() - 3600, time.time() - 3600))  # older than the junk
    many_files(logs / "z", walk.MAX_FILES + 1, b"")  # walked first, newer
    report = search([str(logs)])
    assert [(f.rule, f.file) for f in report.findings] == [("hwts-busy-suspend", str(real))]
    assert report.files_read == walk.MAX_FILES + 2


def test_the_file_cap_keeps_the_newest_files_whatever_the_walk_order(
        tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    (logs / "a").mkdir(parents=True)
    many_files(logs / "z", walk.MAX_FILES + 1, b"[INFO] X(1,a):old and quiet\n")
    past = time.time() - 3600
    for p in (logs / "z").iterdir():
        os.utime(p, (past, past))
    (logs / "a" / "plog-2_2.log").write_text(HWTS)  # the newest, walked last
    report = search([str(logs)])
    assert [f.rule for f in report.findings] == ["hwts-busy-suspend"]
    assert report.files_read == walk.MAX_FILES
    assert any("the 2 oldest not read" in s.reason for s in report.skipped), report.skipped


def test_a_needle_near_the_end_of_a_100mb_single_line_file_is_found(tmp_path: Path) -> None:
    big = tmp_path / "plog-big.log"
    size = 100 * 1000 * 1000
    needle = HWTS.rstrip("\n").encode()
    with open(big, "wb") as f:
        block = b"x" * (1 << 20)
        while f.tell() < size - 20 * 1000 * 1000:
            f.write(block)
        f.write(needle)  # in the last 64 MiB, on the one line the file has
        while f.tell() < size:
            f.write(block)
    report = search([str(big)], max_bytes=64 * 1024 * 1024)
    assert [f.rule for f in report.findings] == ["hwts-busy-suspend"], report.skipped


@needs_root
def test_a_log_folder_that_never_answers_costs_only_its_own_glob(tmp_path: Path) -> None:
    """A home on NFS whose server is gone: its walk waits in the kernel, where no check of
    the time ends it, and the sleep hook would be killed at systemd-sleep's 90 s with every
    finding lost. Here a real FUSE mount that never answers: its glob is given up, said as
    not read, and the other glob's failure is still found."""
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable,
                           str(HERE / "scene_hung_mount.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    if "skip" in result:
        pytest.skip(f"no FUSE mount here: {result['skip']}")
    assert result["rules"] == ["hwts-busy-suspend"], result
    assert result["skipped"] == [[f"{tmp_path}/hung/log/**", (
        "not read: its folder did not answer within 2 s (a network mount whose server is "
        "gone?)")]]
    assert result["files_read"] == 1
