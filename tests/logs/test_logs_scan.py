"""Searching log files: globs, --since, untrusted files, big and broken files."""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import pytest
from helpers import FIXTURES as ALL_FIXTURES

from suspendguard.logs import memmem, reader, safe_open
from suspendguard.logs import search as search_module
from suspendguard.logs.entries import read_text
from suspendguard.logs.globs import expand, split_glob
from suspendguard.logs.memmem import finder
from suspendguard.logs.naming import name_record
from suspendguard.logs.reader import read_file
from suspendguard.logs.rules import RULES
from suspendguard.logs.search import search

FIXTURES = ALL_FIXTURES / "ascend-logs"
HWTS = (
    "[ERROR] TSCH(-1,null):{t} 1 (dieid:0,cpuid:0) device_management_plat.c:563 "
    "suspend_ack: suspend pre check fail, hwts is busy\n"
)
INFO = "[INFO] RUNTIME(18401,main):{t} [stream.cc:700]18409 Setup:stream created, stream_id=1.\n"


def stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%d-%H:%M:%S.") + f"{when.microsecond // 1000:03d}.000"


def rules_of(report: object) -> list[tuple[str, int]]:
    return [(f.rule, f.line) for f in report.findings]  # type: ignore[attr-defined]


# --- where to look ------------------------------------------------------------


def test_expand_variables_and_homes() -> None:
    env = {"ASCEND_WORK_PATH": "/opt/work"}
    assert expand("$ASCEND_WORK_PATH/log/**", environ=env) == (["/opt/work/log/**"], [])
    globs, skipped = expand("$ASCEND_PROCESS_LOG_PATH/**", environ=env)
    assert globs == [] and "ASCEND_PROCESS_LOG_PATH is not set" in skipped[0].reason
    globs, _ = expand("~/ascend/log/**", homes=["/home/alice", "/home/bob/"], environ={})
    assert globs[1:] == ["/home/alice/ascend/log/**", "/home/bob/ascend/log/**"]
    assert globs[0].endswith("/ascend/log/**")  # root's home first
    assert split_glob("/home/a/ascend/log/**") == ("/home/a/ascend/log", ("**",))
    assert split_glob("/var/log/npu/slog/*/device-*/x.log") == (
        "/var/log/npu/slog", ("*", "device-*", "x.log"))


def test_configured_globs_and_extra_homes(tmp_path: Path) -> None:
    alice = tmp_path / "alice"
    plog = alice / "ascend" / "log" / "debug" / "plog"
    plog.mkdir(parents=True)
    shutil.copy(FIXTURES / "known-failures.log", plog / "plog-18401_1.log")
    work = tmp_path / "work" / "log" / "run"
    work.mkdir(parents=True)
    (work / "device-0.log").write_text(HWTS.format(t="2023-01-01-02:53:45.850.781"))
    report = search(
        patterns=["~/ascend/log/**", "$ASCEND_WORK_PATH/log/**", "$UNSET_VAR/**"],
        homes=[str(alice)],
        environ={"ASCEND_WORK_PATH": str(tmp_path / "work")},
    )
    assert report.files_read == 2
    assert sorted({f.rule for f in report.findings}) == [
        "event-id-exhausted", "hwts-busy-suspend", "stream-unbind-running"]
    assert any("UNSET_VAR" in s.reason for s in report.skipped)


def test_newest_files_first_and_duplicates_once(tmp_path: Path) -> None:
    old, new = tmp_path / "old.log", tmp_path / "new.log"
    old.write_text(HWTS.format(t="2023-01-01-00:00:00.000.000"))
    new.write_text(HWTS.format(t="2023-01-02-00:00:00.000.000"))
    os.utime(old, (1_000_000, 1_000_000))
    os.link(new, tmp_path / "hardlink.log")
    report = search([str(tmp_path), str(new)])
    assert [Path(f.file).name for f in report.findings][-1] == "old.log"
    assert report.files_read == 2


# --- --since -----------------------------------------------------------------


def test_since_filters_lines_and_skips_old_files_cheaply(tmp_path: Path) -> None:
    since = datetime(2024, 6, 1, 12, 0, 0)
    log = tmp_path / "plog.log"
    log.write_text(
        HWTS.format(t="2024-06-01-11:59:59.999.000")
        + HWTS.format(t="2024-06-01-12:00:01.000.000")
        + "[ERROR] RUNTIME ****** EventIdAlloc:drvEventIdAlloc:errorcode = 7\n"
    )
    masked_only = tmp_path / "masked.log"
    masked_only.write_text("[INFO] RUNTIME EventIdAlloc:id = -1\n")
    stale = tmp_path / "stale.log"
    stale.write_text(HWTS.format(t="2024-06-02-00:00:00.000.000"))
    os.utime(stale, (since.timestamp() - 10, since.timestamp() - 10))

    report = search([str(tmp_path)], since=since)
    # Line 1 is before --since; the masked line 3 inherits line 2's time;
    # a masked line with no time above it cannot be placed, so it is left out.
    assert rules_of(report) == [("hwts-busy-suspend", 2), ("event-id-exhausted", 3)]
    assert report.findings[1].time is None
    assert report.files_older == 1 and report.files_read == 2
    # ... and said: a failure left out is never passed off as none, nor is one stamped
    # before --since in a file written to since (an older line, or a device clock behind)
    assert sorted((Path(s.path).name, s.reason) for s in report.skipped) == [
        ("masked.log", "1 line(s) of event-id-exhausted with no time, and none above them, "
         "not placed in the time asked: not counted"),
        ("plog.log", "1 line(s) of hwts-busy-suspend stamped before the time asked, in a "
         "file written to since: not counted (a device clock behind the host's?)")]

    until = search([str(log)], until=datetime(2024, 6, 1, 12, 0, 0))
    assert rules_of(until) == [("hwts-busy-suspend", 1)]


@pytest.mark.parametrize("chunk", [150, 300, 1000, reader.CHUNK])
def test_a_masked_line_at_a_window_s_start_takes_the_time_above_it(tmp_path: Path,
                                                                   chunk: int) -> None:
    """However the file is cut into windows, a masked line takes the time of the timed line
    above it, which may lie in the window before."""
    masked = "[ERROR] RUNTIME ****** EventIdAlloc:drvEventIdAlloc:errorcode = 7\n"
    log = tmp_path / "plog.log"
    log.write_text("".join(INFO.format(t=stamp(datetime(2024, 6, 1, 12, 0, 1, i * 1000)))
                           + masked for i in range(100)))
    fd = os.open(log, os.O_RDONLY)
    try:
        got = read_file(fd, "plog.log", 1 << 30, since=datetime(2024, 6, 1, 12, 0, 0),
                        chunk=chunk)
    finally:
        os.close(fd)
    assert [f.line for f in got.findings] == list(range(2, 201, 2))
    assert got.skipped == ()


# --- untrusted files ------------------------------------------------------------


def test_symlink_to_a_secret_is_skipped_with_reason(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("root:suspend pre check fail, hwts is busy:secret\n")
    logdir = tmp_path / "home" / "ascend" / "log"
    logdir.mkdir(parents=True)
    (logdir / "plog-1.log").symlink_to(secret)
    (logdir / "linked-dir").symlink_to(tmp_path, target_is_directory=True)
    (logdir / "real.log").write_text(HWTS.format(t="2023-01-01-00:00:00.000.000"))

    report = search([str(logdir)])
    assert [Path(f.file).name for f in report.findings] == ["real.log"]
    reasons = {Path(s.path).name: s.reason for s in report.skipped}
    assert "symbolic link" in reasons["plog-1.log"]
    assert "symbolic link" in reasons["linked-dir"]
    assert all("secret" not in f.text for f in report.findings)


def test_symlinked_path_component_owned_by_a_user_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "x.log").write_text(HWTS.format(t="2023-01-01-00:00:00.000.000"))
    home = tmp_path / "home"
    home.mkdir()
    link = home / "ascend"
    link.symlink_to(target, target_is_directory=True)
    if os.geteuid() == 0:
        os.lchown(link, 12345, 12345)  # as a user would have made it
        report = search(patterns=[f"{home}/ascend/**"])
        assert report.findings == ()
        assert "owned by uid 12345" in report.skipped[0].reason
    # A link root owns (an administrator's) is followed for the fixed part.
    if os.geteuid() == 0:
        os.lchown(link, 0, 0)
        assert len(search(patterns=[f"{home}/ascend/**"]).findings) == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="a link root owns needs root")
def test_a_root_owned_link_removed_before_it_is_read_is_said(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An administrator's link in a user's home, removed by that user between its stat and
    its readlink: the path is not read, and said; the search goes on."""
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "x.log").write_text(HWTS.format(t="2023-01-01-00:00:00.000.000"))
    home = tmp_path / "home"
    home.mkdir()
    (home / "ascend").symlink_to(target, target_is_directory=True)
    (tmp_path / "real.log").write_text(HWTS.format(t="2023-01-01-00:00:00.000.000"))
    real_readlink = os.readlink

    def removed_first(name: str, *, dir_fd: int | None = None) -> str:
        os.unlink(name, dir_fd=dir_fd)
        return real_readlink(name, dir_fd=dir_fd)

    monkeypatch.setattr(safe_open.os, "readlink", removed_first)
    report = search(patterns=[f"{home}/ascend/**", f"{tmp_path}/real.log"])
    assert [Path(f.file).name for f in report.findings] == ["real.log"]
    assert [(s.path, s.reason) for s in report.skipped] == [
        (f"{home}/ascend", "No such file or directory")]


def test_fifo_and_unreadable_things_do_not_hang(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.log")
    (tmp_path / "ok.log").write_text(HWTS.format(t="2023-01-01-00:00:00.000.000"))
    report = search([str(tmp_path)])
    assert len(report.findings) == 1
    assert any(s.reason == "not a regular file" for s in report.skipped)
    missing = search([str(tmp_path / "nope")])
    assert missing.skipped[0].reason == "No such file or directory"


# --- big, broken and hostile contents ----------------------------------------------


def test_sparse_200mb_file_reads_only_max_bytes(tmp_path: Path) -> None:
    big = tmp_path / "plog-big.log"
    tail = INFO.format(t="2023-01-01-00:00:00.000.000") * 50 + HWTS.format(
        t="2023-01-01-00:00:01.000.000")
    with open(big, "wb") as fh:
        fh.truncate(200 * 1024 * 1024 - len(tail))
        fh.seek(0, os.SEEK_END)
        fh.write(tail.encode())
    report = search([str(big)], max_bytes=64 * 1024)
    assert report.bytes_read == 64 * 1024
    assert [f.rule for f in report.findings] == ["hwts-busy-suspend"]
    reasons = " / ".join(s.reason for s in report.skipped)
    # The hole reads as zeros with no newline: all of it is the first line's
    # fragment, dropped as such.
    assert "only the last 65536" in reasons


def test_junk_bytes_are_skipped_line_by_line(tmp_path: Path) -> None:
    log = tmp_path / "junk.log"
    log.write_bytes(
        b"\xff\xfe\xfa garbage suspend pre check fail, hwts is busy\n"
        + HWTS.format(t="2023-01-01-00:00:00.000.000").encode()
        + b"bin\x00ary suspend pre check fail, hwts is busy\n"
        + "[INFO] RUNTIME(1,a):2023-01-01-00:00:00.000.000 \u6587\u5b57 ok\n".encode()
        + b"\r\n"
        + HWTS.format(t="2023-01-01-00:00:02.000.000").replace("\n", "\r\n").encode()
    )
    report = search([str(log)])
    assert rules_of(report) == [("hwts-busy-suspend", 2), ("hwts-busy-suspend", 6)]
    assert not report.findings[1].text.endswith("\r")
    reasons = " / ".join(s.reason for s in report.skipped)
    assert "1 line(s) not UTF-8" in reasons and "1 line(s) with NUL" in reasons


def test_a_line_after_a_power_loss_padding_of_nuls_is_read(tmp_path: Path) -> None:
    """A file whose size reached the disk and whose data did not reads as NULs up to its
    end, and what the next boot appends follows them on the same line."""
    log = tmp_path / "device-0.log"
    log.write_bytes(b"[INFO] TSCH(-1,null):2023-01-01-00:00:00.000.000 1 up\n" + b"\0" * 4096
                    + HWTS.format(t="2023-01-01-00:00:02.000.000").encode()
                    + b"\0" * 10 + b"\n")
    report = search([str(log)])
    assert rules_of(report) == [("hwts-busy-suspend", 2)]
    assert report.findings[0].text == HWTS.format(t="2023-01-01-00:00:02.000.000").rstrip("\n")
    assert report.skipped == ()  # padding only: nothing of the file left out


def test_pathological_megabyte_line_in_a_file(tmp_path: Path) -> None:
    log = tmp_path / "evil.log"
    chunk = "hwts is bus" + "unbin" + "EventIdAllo" + "Code=0x7020" + " ("
    log.write_text("[ERROR] X(1,a):" + chunk * (1_000_000 // len(chunk)) + "\n")
    report = search([str(log)])
    assert report.findings == () and report.files_read == 1


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_windows_and_truncation_agree_with_the_reader(tmp_path: Path, newline: str) -> None:
    """Small windows split blocks and lines everywhere; results must not change, whatever
    the line ends and wherever a window ends (a sweep of sizes puts a window's end after
    every line of the first ones)."""
    text = "".join((FIXTURES / n).read_text() for n in sorted(os.listdir(FIXTURES)))
    want = [
        (c.id, r.line) for r in read_text(text) if (c := name_record(r.text, RULES).rule)
    ]
    log = tmp_path / "all.log"
    log.write_bytes(text.replace("\n", newline).encode())
    fd = os.open(log, os.O_RDONLY)
    try:
        for window in (97, 256, 1000, 4096, 1 << 20, *range(100, 300)):
            got = read_file(fd, "all.log", 1 << 30, chunk=window)
            assert [(f.rule, f.line) for f in got.findings] == want, window
            assert got.bytes_read == log.stat().st_size
    finally:
        os.close(fd)


RECENT_ERR_MSG = (
    "[ERROR] RecentErrMsg: [PID: 1613532] 2026-03-24-12:14:45.885.234 "
    "Memory_Allocation_Failure(EL0004): Failed to allocate memory.\n"
    "        Possible Cause: Available memory is insufficient.\n"
    "        TraceBack (most recent call last):\n"
    "        allocate device memory failed.[FUNC:Init][FILE:memory_pool_manager.cc][LINE:50]\n"
    "        open device 2 failed, runtime result = 507033.[FUNC:ReportCallError]"
    "[FILE:log_inner.cpp][LINE:148]\n"
)


@pytest.mark.parametrize("since", [None, datetime(2026, 3, 24, 12, 0, 0)])
def test_a_window_that_ends_on_a_head_line_s_end_keeps_its_block_whole(
        tmp_path: Path, since: datetime | None) -> None:
    """The window ended right after the head's newline: its indented lines, not seen yet, began
    the next window, each a finding of its own, a false device-busy (the 507033 of the
    traceback) among them, which holds the jobs after resume."""
    before = INFO.format(t="2026-03-24-12:14:45.000.000") * 3
    head = RECENT_ERR_MSG.split("\n", 1)[0] + "\n"
    log = tmp_path / "block.log"
    log.write_text(before + RECENT_ERR_MSG)
    fd = os.open(log, os.O_RDONLY)
    try:  # the first window ends right after the head line
        got = read_file(fd, "block.log", 1 << 30, since=since, chunk=len(before + head))
    finally:
        os.close(fd)
    assert [(f.rule, f.line, f.text.count("\n") + 1) for f in got.findings] == [
        ("device-oom", 4, 5)]


def test_a_window_that_ends_on_a_line_end_counts_that_line(tmp_path: Path) -> None:
    # A head line (here an unrecognised code's) that fills a window to its last byte, its
    # newline included, was not counted: every later line number came out one short.
    line = "b" * 26 + " EL0099 error " + "a" * 56
    log = tmp_path / "edge.log"
    log.write_text("x\n" * 3 + line + "\n" + "Device[1] lost heartbeat.\n")
    fd = os.open(log, os.O_RDONLY)
    try:
        got = read_file(fd, "edge.log", 1 << 30, chunk=len(line) + 1)
    finally:
        os.close(fd)
    assert [(f.rule, f.line) for f in got.findings] == [("heartbeat-lost", 5)]


@pytest.mark.parametrize("kind", [bytes, bytearray])
def test_finder_answers_as_bytes_find_at_every_bound(kind: type) -> None:
    text = b"lost heartbe lost heartbeat\nxx lost heartbeat\0lost heartbe"
    buf = kind(text)
    find = finder(buf)
    for needle in (b"lost heartbe", b"heartbeat", b"t", text, text + b"x"):
        for pos in range(len(text) + 2):
            for hi in range(pos, len(text) + 3):
                assert find(needle, pos, hi) == text.find(needle, pos, hi), (needle, pos, hi)


def test_read_file_gives_the_same_answer_without_memmem(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    text = "".join((FIXTURES / n).read_text() for n in sorted(os.listdir(FIXTURES)))
    log = tmp_path / "all.log"
    log.write_text(text)
    fd = os.open(log, os.O_RDONLY)
    try:
        with_memmem = read_file(fd, "all.log", 1 << 30, chunk=4096)
        monkeypatch.setattr(memmem, "_MEMMEM", None)
        without = read_file(fd, "all.log", 1 << 30, chunk=4096)
    finally:
        os.close(fd)
    assert memmem._libc_memmem() is not None  # glibc and musl have one
    assert with_memmem == without and len(with_memmem.findings) > 6


def test_file_shrinking_while_read(tmp_path: Path) -> None:
    log = tmp_path / "rotating.log"
    log.write_text(HWTS.format(t="2023-01-01-00:00:00.000.000") * 1000)
    fd = os.open(log, os.O_RDONLY)
    try:
        os.truncate(log, 500)  # rotated (copytruncate) after it was opened
        result = read_file(fd, "rotating.log", 1 << 20)
    finally:
        os.close(fd)
    assert result.bytes_read <= 500
    assert [f.line for f in result.findings] == [1, 2, 3]


@pytest.mark.parametrize("mode", [0o000])
def test_unreadable_file_is_reported(tmp_path: Path, mode: int) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads everything")
    log = tmp_path / "locked.log"
    log.write_text("x\n")
    log.chmod(mode)
    report = search([str(tmp_path)])
    assert report.skipped and "ermission" in report.skipped[0].reason


def as_nobody(call: Callable[[], object]) -> object:
    """``call()`` in a forked child that runs as nobody (65534), its answer pickled back."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(rfd)
            os.setgroups([])
            os.setresgid(65534, 65534, 65534)
            os.setresuid(65534, 65534, 65534)
            with os.fdopen(wfd, "wb") as out:
                pickle.dump(call(), out)
        finally:
            os._exit(0)
    os.close(wfd)
    with os.fdopen(rfd, "rb") as got:
        data = got.read()
    os.waitpid(pid, 0)
    return pickle.loads(data)


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A folder every user can walk to (pytest's tmp_path lies under root's 0700 one)."""
    path = Path(tempfile.mkdtemp(prefix="suspendguard-logs-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path)


def test_a_glob_folder_there_but_not_readable_is_said(open_dir: Path) -> None:
    """As a user, /var/log/npu/slog (root's) is no folder without failures; a missing one is."""
    if os.geteuid() != 0:
        pytest.skip("needs root to make a folder another user cannot open")
    slog = open_dir / "slog"
    (slog / "device-0").mkdir(parents=True)
    (slog / "device-0" / "device-0.log").write_text(HWTS.format(t="2023-01-01-00:00:00.000.000"))
    slog.chmod(0o700)
    report = as_nobody(lambda: search(patterns=[f"{slog}/**", f"{open_dir}/absent/**"]))
    assert isinstance(report, search_module.SearchReport)
    assert report.findings == () and report.files_read == 0
    assert [(s.path, s.reason) for s in report.skipped] == [(str(slog), "Permission denied")]


def test_forked_workers_give_the_serial_answer(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    fixtures = ALL_FIXTURES / "ascend-logs"
    for i, name in enumerate(sorted(os.listdir(fixtures)) * 3):
        target = tmp_path / f"device-{i}" / name
        target.parent.mkdir()
        shutil.copy(fixtures / name, target)
        os.utime(target, (1_700_000_000 + i, 1_700_000_000 + i))
    os.symlink("/etc/passwd", tmp_path / "device-0" / "planted.log")
    serial = search([str(tmp_path)])
    monkeypatch.setattr(search_module, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(search_module, "MAX_WORKERS", 3)
    parallel = search([str(tmp_path)])
    assert parallel.findings == serial.findings and len(serial.findings) > 6
    assert parallel.skipped == serial.skipped and any("planted" in s.path for s in serial.skipped)
    assert (parallel.files_read, parallel.bytes_read) == (serial.files_read, serial.bytes_read)


def test_a_failure_loop_lists_its_first_findings_and_its_newest_and_counts_the_rest(
        tmp_path: Path) -> None:
    """A job stuck in a loop writes the same failure at every step: the reader keeps the
    first ones and the newest, and says how many more it read."""
    n = reader.MAX_PER_RULE * 5
    log = tmp_path / "loop.log"
    log.write_text("".join(HWTS.format(t=stamp(datetime(2026, 12, 1, 10, 0, i % 60, 1000 * i)))
                           + INFO.format(t=stamp(datetime(2026, 12, 1, 10, 0, 0)))
                           for i in range(n)))
    fd = os.open(log, os.O_RDONLY)
    try:
        got = read_file(fd, "loop.log", 1 << 30, chunk=4096)
    finally:
        os.close(fd)
    lines = [f.line for f in got.findings]
    assert len(lines) == reader.MAX_PER_RULE
    assert lines[:-1] == list(range(1, 2 * reader.MAX_PER_RULE - 2, 2))  # the first ones
    assert lines[-1] == 2 * n - 1  # the newest
    [note] = got.skipped
    assert note.reason == (f"{n - reader.MAX_PER_RULE} more line(s) of hwts-busy-suspend than the "
                           f"{reader.MAX_PER_RULE} listed (the newest among them): read, "
                           "not listed")
