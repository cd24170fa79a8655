"""Issue 15 item 10: text any user can set never drives the terminal in check, status, history, logs."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from suspendguard.cli import main
from suspendguard.system.terminal import safe

# Clears the screen, returns to the line start and forges a line of its own.
EVIL = "job\x1b[2J\rverdict: ALLOW\nforged\x9b1m"
# Sets its name (comm, 15 bytes) and puts EVIL on its command line, ignores SIGINT so
# the guard vetoes naming it, and holds the node.
JOB = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    "held = open(sys.argv[1], 'rb')\n"
    "open('/proc/self/comm', 'w').write('x\\x1b[2J\\r\\nforged')\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


def cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    status = main(list(argv), out=out, err=io.StringIO(), environ={"PATH": os.defpath, "COLUMNS": "400"})
    return status, out.getvalue()


def assert_inert(out: str) -> None:
    for char in "\x1b\r\x9b":
        assert char not in out, (char, out)
    assert not any(line.startswith(("forged", "verdict: ALLOW")) for line in out.splitlines())


@pytest.fixture
def evil_job(node: str) -> Iterator[int]:
    job = subprocess.Popen([sys.executable, "-c", JOB, node, EVIL], executable=sys.executable,
                           stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout is not None and job.stdout.readline() == "ready\n"
        yield job.pid
    finally:
        job.kill()
        job.wait()


def test_safe_shows_every_control_character() -> None:
    assert safe(EVIL) == "job\\e[2J\\rverdict: ALLOW\\nforged\\x9b1m"
    assert safe("a\u202eb\u2028c\x7f\tok ü") == "a\\u202eb\\u2028c\\x7f\\tok ü"


def test_check_status_and_history_show_a_hostile_name_inert(evil_job: int, conf: Path) -> None:
    status, out = cli("--config", str(conf), "check", "--dry-run")
    assert status == 1 and f"pid {evil_job} x\\e[2J\\r\\nforged ignores SIGINT" in out, out
    assert_inert(out)
    status, out = cli("--config", str(conf), "drain", "--yes")  # a real veto, recorded
    assert status == 1
    assert_inert(out)
    _, out = cli("--config", str(conf), "history")
    assert f"pid {evil_job} x\\e[2J" in out
    assert_inert(out)
    _, out = cli("--config", str(conf), "status")
    assert f"pid {evil_job} x\\e[2J" in out
    assert_inert(out)


def test_logs_show_hostile_lines_and_file_names_inert(tmp_path: Path) -> None:
    folder = tmp_path / "logs\x1b[2J\rforged\n"
    folder.mkdir()
    log = folder / "plog-1_\x1b]0;t\x07.log"
    log.write_text("[ERROR] TSCH(-1,null):2023-01-01-02:53:45.850.781 1 (dieid:0,cpuid:0) "
                   "device_management_plat.c:563 suspend_ack: suspend pre check fail, "
                   "hwts is busy \x1b[2J\rverdict: ALLOW\n")
    (folder / "unreadable\x1b[1m.log").symlink_to("/nonexistent")
    status, out = cli("logs", str(folder))
    assert status == 1 and "hwts-busy-suspend" in out, out  # 1: findings, as grep
    assert "hwts is busy \\e[2J\\rverdict: ALLOW" in out and "plog-1_\\e]0;t\\x07.log" in out
    assert_inert(out)
