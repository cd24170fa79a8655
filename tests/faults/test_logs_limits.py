"""Issue 15 item 13: the logs command's limits never hide a real finding."""

from __future__ import annotations

import os
import time
from pathlib import Path

from suspendguard.logs import walk
from suspendguard.logs.search import search

HWTS = ("[ERROR] TSCH(-1,null):2023-01-01-02:53:45.850.781 1 (dieid:0,cpuid:0) "
        "device_management_plat.c:563 suspend_ack: suspend pre check fail, hwts is busy\n")


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
