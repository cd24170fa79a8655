"""A unit's journal: recorded ``journalctl -o json`` output parsed, and journalctl itself run."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from helpers import FIXTURES as ALL_FIXTURES

from suspendguard.logs.journal import (
    MAX_ENTRIES,
    KernelLog,
    journal_argv,
    parse_journal,
    read_kernel,
    read_unit,
    unit_name,
)
from suspendguard.model import Unavailable
from suspendguard.system import runner
from suspendguard.system.runner import RunResult

RECORDED = ALL_FIXTURES / "journal" / "sg-job.service.json"
UNIT = "sg-job.service"


def usec_time(usec: int) -> datetime:
    return datetime.fromtimestamp(usec // 1_000_000) + timedelta(microseconds=usec % 1_000_000)


def test_recorded_output_findings() -> None:
    findings, entries, notes = parse_journal(RECORDED.read_text(), UNIT)
    assert entries == 7 and notes == []
    assert [(f.rule, f.line) for f in findings] == [
        ("device-held-by-previous-job", 2),
        ("device-held-by-previous-job", 4),
        ("heartbeat-lost", 5),
        ("heartbeat-lost", 6),
    ]
    first = findings[0]
    assert first.file == "journal:sg-job.service" and first.unit == UNIT
    # the indented line from the same process continues the entry, as in plog files
    assert first.text.splitlines() == [
        "EJ0001: 2024-05-21-11:57:54.167.645 Failed to initialize the HCCP process. "
        "Reason: Maybe the last training process is running.",
        "        Solution: Wait for 10s after killing the last training process and try again.",
    ]
    # the journal's own time (the host's clock), not the one the job printed
    assert first.time == usec_time(1796110007038222)
    assert first.pid == 58  # _PID: the process that wrote it (cat)
    assert findings[1].pid == 57
    # printed as an array of byte values (ANSI colour codes), decoded
    assert findings[3].text.startswith("\x1b[31mERROR\x1b[0m Device[1] lost heartbeat.")


def test_continuation_only_from_the_same_process() -> None:
    lines = [
        {"_PID": "10", "__REALTIME_TIMESTAMP": "1700000000000000",
         "MESSAGE": "EJ0001: Failed to initialize the HCCP process. "
                    "Reason: Maybe the last training process is running."},
        {"_PID": "11", "__REALTIME_TIMESTAMP": "1700000000000001",
         "MESSAGE": "        Solution: another process's indented line"},
        {"_PID": "10", "__REALTIME_TIMESTAMP": "1700000000000002", "MESSAGE": "  own line"},
    ]
    text = "\n".join(json.dumps(d) for d in lines)
    [finding], entries, _ = parse_journal(text, UNIT)
    assert entries == 3
    assert finding.text == lines[0]["MESSAGE"]


def test_what_is_not_a_journal_entry_is_counted_and_skipped() -> None:
    text = "\n".join([
        "not json at all",
        json.dumps({"MESSAGE": None, "__REALTIME_TIMESTAMP": "1"}),  # over 4 KiB without --all
        json.dumps(["a", "list"]),
        "",
        json.dumps({"MESSAGE": ["EJ0001: Failed to initialize the HCCP process. Reason: Maybe "
                                "the last training process is running.", "second copy"],
                    "__REALTIME_TIMESTAMP": "bad", "_PID": "x"}),
    ])
    [finding], entries, notes = parse_journal(text, UNIT)
    assert entries == 1 and notes == ["3 journal line(s) not understood, skipped"]
    assert finding.time is None and finding.pid is None  # no time, no pid: not guessed


def test_an_entry_with_a_unicode_line_separator_is_one_entry() -> None:
    """journalctl ends an entry with "\\n" alone, and leaves U+2028, U+2029 and U+0085 in
    its text unescaped: they are part of the entry, not ends of lines."""
    message = ("EJ0001: Failed to initialize the HCCP process.\u2028Reason: Maybe the last "
               "training process is running.\u2029\x85")
    text = json.dumps({"MESSAGE": message, "_PID": "10",
                       "__REALTIME_TIMESTAMP": "1700000000000000"}, ensure_ascii=False) + "\n"
    [finding], entries, notes = parse_journal(text, UNIT)
    assert (finding.rule, finding.text, entries, notes) == (
        "device-held-by-previous-job", message, 1, [])

    def kernel(argv: Sequence[str], timeout: float, max_output: int) -> RunResult:
        return RunResult(tuple(argv), 0, text, "")

    assert read_kernel(datetime.now(), run=kernel) == KernelLog((message,))


def test_argv_matches_the_units_own_output() -> None:
    since = datetime(2026, 11, 29, 3, 0, 0, 250000)
    argv = journal_argv(UNIT, since, None, "journalctl")
    assert argv[:3] == ["journalctl", "-o", "json"]
    assert "--all" in argv and "-n" in argv and str(MAX_ENTRIES) in argv
    assert f"--since=@{since.timestamp():.6f}" in argv
    assert not any(a.startswith("--until") for a in argv)
    assert argv[-3:] == [f"_SYSTEMD_UNIT={UNIT}", "+", f"_SYSTEMD_USER_UNIT={UNIT}"]


@pytest.mark.parametrize("given, name", [
    ("job", "job.service"),
    ("job.service", "job.service"),
    ("session-3.scope", "session-3.scope"),
    ("train@0", "train@0.service"),
    ("my.job", "my.job.service"),
])
def test_unit_names(given: str, name: str) -> None:
    assert unit_name(given) == name


@pytest.mark.parametrize("given", ["", "two words", "-n", "a/b.service", "x" * 256, "a=b"])
def test_bad_unit_names(given: str) -> None:
    with pytest.raises(ValueError, match="is not a systemd unit name"):
        unit_name(given)


def test_no_journalctl_is_not_available(tmp_path: Path) -> None:
    journal = read_unit(UNIT, None, journalctl=str(tmp_path / "journalctl"))
    assert journal.unavailable is not None
    assert journal.unavailable.reason.endswith("journalctl: command not found")
    assert journal.to_json()["available"] is False and journal.findings == ()


def test_a_failing_journalctl_is_not_available() -> None:
    # journalctl itself refusing, as a broken journal would make it: its own words kept
    now = datetime.now()
    journal = read_unit("x.service", now, now - timedelta(hours=1))
    assert journal.unavailable is not None
    assert journal.unavailable.reason == (
        "journalctl: exit status 1: --since= must be before --until=.")


def journalctl_of(tmp_path: Path, directory: Path) -> str:
    """The real journalctl, reading the journal files of ``directory`` only."""
    wrapper = tmp_path / "journalctl"
    wrapper.write_text(f'#!/bin/sh\nexec journalctl --directory="{directory}" "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def test_real_journalctl_with_no_journal_is_not_available(tmp_path: Path) -> None:
    """journald keeping none (Storage=none): journalctl -o json answers nothing and exit 0,
    as for a unit without entries; no entry read is then no "0 entries, nothing found"."""
    (tmp_path / "journal").mkdir()
    journalctl = journalctl_of(tmp_path, tmp_path / "journal")
    journal = read_unit("sg-test-no-such-unit.service", datetime.now() - timedelta(minutes=1),
                        journalctl=journalctl)
    assert journal.unavailable is not None, journal
    assert journal.unavailable.reason == (
        f"{journalctl}: the journal holds no entry at all (journald keeps none here, "
        "Storage=none, or none this user may read)")
    assert journal.to_json()["available"] is False
    # -k asks for this boot, which journalctl says it does not hold (exit status 1)
    kernel = read_kernel(datetime.now() - timedelta(minutes=1), journalctl=journalctl)
    assert isinstance(kernel, Unavailable) and "No such boot ID" in kernel.reason, kernel


def test_an_empty_kernel_log_of_no_journal_is_not_available() -> None:
    def nothing(argv: Sequence[str], timeout: float, max_output: int) -> RunResult:
        return RunResult(tuple(argv), 0, "", "")

    kernel = read_kernel(datetime.now() - timedelta(minutes=1), run=nothing)
    assert isinstance(kernel, Unavailable) and "holds no entry at all" in kernel.reason


def last_entry_only(argv: Sequence[str], timeout: float, max_output: int) -> RunResult:
    """A journal with entries, none of them the ones asked for (a real one: the container
    tests of test_journal_container.py)."""
    entry = json.dumps({"MESSAGE": "systemd[1]: Started x.", "__REALTIME_TIMESTAMP": "1"})
    return RunResult(tuple(argv), 0, entry + "\n" if argv[-2:] == ["-n", "1"] else "", "")


def test_no_entries_of_a_journal_that_holds_some_are_read_as_none() -> None:
    journal = read_unit(UNIT, datetime.now() - timedelta(minutes=1), run=last_entry_only)
    assert journal.unavailable is None, journal
    assert (journal.entries_read, journal.findings) == (0, ())
    assert read_kernel(datetime.now() - timedelta(minutes=1), run=last_entry_only) == KernelLog()


def test_output_over_the_bound_is_cut_at_a_whole_entry() -> None:
    def cat_bounded(argv: Sequence[str], timeout: float, max_output: int) -> RunResult:
        return runner.run_bounded(["cat", str(RECORDED)], timeout, 1200)

    journal = read_unit(UNIT, None, run=cat_bounded)
    assert journal.unavailable is None
    assert 0 < journal.entries_read < 7 and journal.bytes_read <= 1200
    assert journal.notes[-1].startswith("only the first")
    assert "not understood" not in " ".join(journal.notes)  # no half entry parsed


def test_the_entry_bound_reached_is_said() -> None:
    """A job that printed more than -n lets since the attempt: the rest was never read."""
    line = json.dumps({"MESSAGE": "step 1 loss 0.5", "_PID": "42",
                       "__REALTIME_TIMESTAMP": "1700000000000000"}) + "\n"

    def flood(argv: Sequence[str], timeout: float, max_output: int) -> RunResult:
        assert "-n" in argv and argv[argv.index("-n") + 1] == str(MAX_ENTRIES)
        return RunResult(tuple(argv), 0, line * MAX_ENTRIES, "")

    journal = read_unit(UNIT, datetime.now() - timedelta(hours=1), run=flood)
    assert journal.entries_read == MAX_ENTRIES
    assert journal.notes == (f"the bound of {MAX_ENTRIES} entries reached (journalctl -n): "
                             "entries of the time asked beyond it not read",)


def test_run_bounded_stops_a_flood_and_a_hang() -> None:
    flood = runner.run_bounded(["yes", "line"], 10.0, 100_000)
    assert flood.truncated and not flood.timed_out and flood.returncode is None
    assert 0 < len(flood.stdout) <= 100_000 and flood.stdout.endswith("line\n")
    hang = runner.run_bounded(["sleep", "30"], 0.3, 1000)
    assert hang.timed_out and hang.returncode is None and not hang.ok
    done = runner.run_bounded(["sh", "-c", "printf 'a\\r\\nb'; echo oops >&2; exit 3"], 5.0, 100)
    assert (done.returncode, done.stdout, done.stderr) == (3, "a\r\nb", "oops\n")
    missing = runner.run_bounded(["/nonexistent/tool"], 1.0, 100)
    assert missing.error == "command not found"
