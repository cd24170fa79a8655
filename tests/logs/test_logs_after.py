"""The after-resume check: device clocks ([logs] clock_slack_s), and the units it reads."""

from __future__ import annotations

import json
import os
import pwd
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from helpers import FIXTURES as ALL_FIXTURES
from helpers.runners import cli

from suspendguard.config import Config, build
from suspendguard.logs import after
from suspendguard.logs.after import after_attempt, job_units
from suspendguard.logs.journal import MAX_ENTRIES
from suspendguard.logs.reader import read_file
from suspendguard.model import Action, Outcome
from suspendguard.record import Attempt, KeptRecord
from suspendguard.store.history import History
from suspendguard.verdict import Verdict

START = datetime(2026, 3, 1, 12, 0, 0, 700000)
RESUMED = START + timedelta(seconds=40)
FIXTURES = ALL_FIXTURES / "ascend-logs"


def stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%d-%H:%M:%S.") + f"{when.microsecond // 1000:03d}.000"


def hwts_line(when: datetime) -> str:
    return (f"[ERROR] TSCH(-1,null):{stamp(when)} 1 (dieid:0,cpuid:0) device_management_plat.c:"
            "563 suspend_ack: suspend pre check fail, hwts is busy\n")


def device_log(tmp_path: Path, *times: datetime) -> Path:
    log = tmp_path / "slog" / "device-0" / "device-0_20260301.log"
    log.parent.mkdir(parents=True)
    log.write_text("".join(hwts_line(t) for t in times))
    now = RESUMED.timestamp()
    os.utime(log, (now, now))  # written by the host while the attempt ran
    return log


def config(tmp_path: Path, **logs: object) -> Config:
    return build({"logs": {"paths": [f"{tmp_path}/slog/**"], **logs}})


def test_a_line_from_earlier_in_the_starting_second_is_read_and_marked(tmp_path: Path) -> None:
    """Seen: stamped in the attempt's second, 400 ms before its fractional start: it was lost."""
    early = START.replace(microsecond=300000)
    device_log(tmp_path, early)
    result = after_attempt(config(tmp_path), START, until=RESUMED)
    [finding] = result.findings
    assert finding.rule == "hwts-busy-suspend" and finding.time == early
    assert finding.outside is not None
    assert (finding.outside.side, round(finding.outside.by_s, 6)) == ("before", 0.4)
    assert finding.to_json()["outside_attempt"] == {"side": "before", "by_s": 0.4}
    [line] = result.journal_lines(7)
    assert line.endswith("; stamped 0.400 s before the attempt began (device clock?)"), line


def test_without_slack_that_line_is_not_read(tmp_path: Path) -> None:
    device_log(tmp_path, START.replace(microsecond=300000))
    result = after_attempt(config(tmp_path, clock_slack_s=0), START,
                           until=RESUMED)
    assert result.findings == ()


EARLY = ("1 line(s) of hwts-busy-suspend stamped before the time asked, in a file written to "
         "since: not counted (a device clock behind the host's?)")


def test_the_slack_bounds_what_is_read(tmp_path: Path) -> None:
    inside = START + timedelta(seconds=1)
    log = device_log(tmp_path, START - timedelta(seconds=5.2), START - timedelta(seconds=4.8),
                     inside, RESUMED + timedelta(seconds=2))
    result = after_attempt(config(tmp_path), START, until=RESUMED)
    assert [f.time for f in result.findings] == [
        START - timedelta(seconds=4.8), inside, RESUMED + timedelta(seconds=2)]
    marks = [f.outside.to_json() if f.outside else None for f in result.findings]
    assert marks == [{"side": "before", "by_s": 4.8}, None, {"side": "after", "by_s": 2.0}]
    # one line inside the attempt: the journal line makes no clock remark
    [line] = result.journal_lines(8)
    assert line == ("suspend attempt 8: device reported 'hwts is busy' (hwts-busy-suspend): "
                    "AI processes were still running on the NPU")
    # The line from before the slack is not counted, and said: the file was written to in the
    # attempt, and the stamp alone cannot tell an older line from a device clock behind.
    assert [(s.path, s.reason) for s in result.skipped] == [(str(log), EARLY)]
    assert result.notes() == [f"device log {log}: {EARLY}"]


def test_a_failure_stamped_before_the_attempt_is_never_a_clean_bill(tmp_path: Path) -> None:
    """The vendor's own sample line, stamped 2023 by its device's clock, written while the
    attempt ran: it is not counted for the attempt, and the answer says so."""
    log = tmp_path / "slog" / "device-0" / "device-0_20260301.log"
    log.parent.mkdir(parents=True)
    log.write_text((FIXTURES / "known-failures.log").read_text().splitlines()[4] + "\n")
    os.utime(log, (RESUMED.timestamp(), RESUMED.timestamp()))
    result = after_attempt(config(tmp_path), START, until=RESUMED)
    assert result.findings == ()
    assert result.notes() == [f"device log {log}: {EARLY}"]
    assert result.nothing_found() == (
        "documented device failure(s) stamped before the attempt in 1 device log(s) (above), "
        "not counted (a device clock behind the host's?); none inside it in 1 device log "
        "file(s)")
    # Two rules' lines in that one file: two notes, still one log.
    lines = (FIXTURES / "known-failures.log").read_text().splitlines()
    log.write_text("\n".join(lines[:5]) + "\n")
    os.utime(log, (RESUMED.timestamp(), RESUMED.timestamp()))
    two = after_attempt(config(tmp_path), START, until=RESUMED)
    assert len(two.notes()) >= 2, two.notes()
    assert "stamped before the attempt in 1 device log(s)" in two.nothing_found()


def test_findings_recorded_with_the_attempt_already_are_left_out_once_each(
        tmp_path: Path) -> None:
    """An earlier step of the attempt read and recorded them; what it did not is kept."""
    first, second = START + timedelta(seconds=1), START + timedelta(seconds=2)
    device_log(tmp_path, first, first, second)
    whole = after_attempt(config(tmp_path), START, until=RESUMED)
    recorded = [whole.findings[0].record()]
    result = after_attempt(config(tmp_path), START, until=RESUMED, recorded=recorded)
    assert [(f.line, f.time) for f in result.findings] == [(2, first), (3, second)]
    assert result.known == 1
    again = after_attempt(config(tmp_path), START, until=RESUMED,
                          recorded=[f.record() for f in whole.findings])
    assert again.findings == () and again.known == 3
    assert again.nothing_found() == ("no documented device failure in 1 device log file(s) "
                                     "besides the 3 already recorded with the attempt")


def test_logs_the_time_ran_out_for_are_said_and_never_a_clean_bill(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hook runs inside systemd-sleep's 90 s: past its time for device logs it reads no
    more, says which logs it left, and its answer for them is unknown, never "none found"."""
    log = device_log(tmp_path, START + timedelta(seconds=1))
    monkeypatch.setattr(after, "FILES_DEADLINE_S", 0.0)
    result = after_attempt(config(tmp_path), START, until=RESUMED)
    assert result.findings == ()
    assert [(s.path, s.reason) for s in result.skipped] == [
        (str(log), "the time for reading logs ran out")]
    assert "what they hold is unknown" in result.nothing_found()


def test_a_log_the_time_ran_out_in_is_read_in_part(tmp_path: Path) -> None:
    log = device_log(tmp_path, *(START + timedelta(seconds=i) for i in range(1, 30)))
    fd = os.open(log, os.O_RDONLY)
    try:
        whole = read_file(fd, str(log), 1 << 20, chunk=256)
        cut = read_file(fd, str(log), 1 << 20, chunk=256, stop_at=time.monotonic() - 1)
    finally:
        os.close(fd)
    assert len(whole.findings) == 29 and whole.skipped == ()
    assert cut.findings == ()
    assert [s.reason for s in cut.skipped] == [
        "read only in part, to line 1: the time for reading logs ran out"]


def test_a_missing_journal_is_a_note_not_a_failure(tmp_path: Path) -> None:
    device_log(tmp_path, START + timedelta(seconds=1))
    result = after_attempt(config(tmp_path), START, until=RESUMED,
                           units=["job.service", "job.service"],
                           journalctl=str(tmp_path / "no-journalctl"))
    assert [f.rule for f in result.findings] == ["hwts-busy-suspend"]
    [journal] = result.journals  # read once per unit
    assert journal.unit == "job.service" and journal.unavailable is not None
    assert result.notes() == [
        f"journal of job.service: not available: {tmp_path}/no-journalctl: command not found"]


def test_the_default_globs_of_unset_variables_are_no_unread_log(tmp_path: Path) -> None:
    """Every host without $ASCEND_PROCESS_LOG_PATH would hear of logs not read at each resume."""
    device_log(tmp_path, START + timedelta(seconds=1))
    conf = build({"logs": {"paths": ["$ASCEND_PROCESS_LOG_PATH/**", "$ASCEND_WORK_PATH/log/**",
                                     f"{tmp_path}/slog/**", f"{tmp_path}/absent/**"]}})
    result = after_attempt(conf, START, until=RESUMED, environ={})
    assert [f.rule for f in result.findings] == ["hwts-busy-suspend"]
    assert result.skipped == () and result.notes() == []


def test_a_journal_read_in_part_is_said_and_never_a_clean_bill(tmp_path: Path) -> None:
    """A job that printed more lines than the bound: the rest of its journal is unknown."""
    journalctl = tmp_path / "journalctl"
    entry = '{"MESSAGE": "step 1 loss 0.5", "_PID": "42", "__REALTIME_TIMESTAMP": "1"}'
    journalctl.write_text(f"#!/bin/sh\nyes '{entry}' | head -n {MAX_ENTRIES}\n")
    journalctl.chmod(0o755)
    result = after_attempt(config(tmp_path), START, until=RESUMED, units=["train.service"],
                           journalctl=str(journalctl))
    assert result.findings == ()
    assert result.notes() == [f"journal of train.service: the bound of {MAX_ENTRIES} entries "
                              "reached (journalctl -n): entries of the time asked beyond it "
                              "not read"]
    assert result.nothing_found() == (
        "no documented device failure in 0 device log file(s), the journal of train.service; "
        "1 log(s) not read or read only in part (above): what they hold is unknown")


def holder(unit: str | None, action: Action, user: str = "root") -> KeptRecord:
    return KeptRecord.of(pid=10, start_time=1, user=user, unit=unit, comm="python3",
                             command="python3 train.py", action=action, rule="",
                             outcome=Outcome("exited", 0.5))


def test_units_read_after_resume_are_the_jobs() -> None:
    attempt = Attempt(1, 0.0, 1.0, "suspend", "unit", False, Verdict("allow", ()), "",
                      holders=(holder("train.service", "drain"), holder("train.service", "drain"),
                               holder("infer.service", "protect"),
                               holder("ascend-dmp.service", "ignore"),
                               holder("suspendguard@suspend.service", "never"),
                               holder(None, "drain")))
    assert job_units(attempt) == ["ascend-dmp.service", "infer.service", "train.service"]


def test_logs_since_last_attempt_reads_what_the_check_after_resume_reads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The holder's own plog under ~ and its unit's journal: both were skipped, exit 0."""
    now = time.time()
    home = tmp_path / "alice"
    plog = home / "ascend" / "log" / "debug" / "plog" / "plog-4242_20991231.log"
    plog.parent.mkdir(parents=True)
    plog.write_text(hwts_line(datetime.fromtimestamp(now - 5)))
    real_getpwnam = pwd.getpwnam

    def getpwnam(name: str) -> pwd.struct_passwd:
        if name == "alice":
            return pwd.struct_passwd(("alice", "x", 4242, 4242, "", str(home), "/bin/sh"))
        return real_getpwnam(name)

    monkeypatch.setattr(pwd, "getpwnam", getpwnam)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    entry = json.dumps({"MESSAGE": "Device[1] lost heartbeat.[FUNC:SyncTask]", "_PID": "4242",
                        "__REALTIME_TIMESTAMP": str(int(now * 1e6))})
    (bin_dir / "journalctl").write_text(
        f"#!/bin/sh\ncase \"$*\" in *_SYSTEMD_UNIT=train.service*) echo '{entry}';; esac\n")
    (bin_dir / "journalctl").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    state = tmp_path / "state"
    with History.open(str(state)) as h:
        attempt_id = h.begin("suspend", "unit", False, "", started=now - 10)
        h.finish(Attempt(attempt_id, now - 10, now - 8, "suspend", "unit", False,
                         Verdict("allow", ()), "",
                         holders=(holder("train.service", "drain", user="alice"),)))
    conf = tmp_path / "config.toml"
    conf.write_text(f'[state]\ndir = "{state}"\n[logs]\npaths = ["~/ascend/log/**"]\n')
    code, out, err = cli("logs", "--config", str(conf), "--since", "last-attempt",
                         "--unit", "extra", "--json")
    assert code == 1, (out, err)
    doc = json.loads(out)
    assert {(f["rule"], f["file"], f["unit"]) for f in doc["findings"]} == {
        ("hwts-busy-suspend", str(plog), None),
        ("heartbeat-lost", "journal:train.service", "train.service")}
    # Units given with --unit are read besides the holders'.
    assert [j["unit"] for j in doc["journals"]] == ["extra.service", "train.service"]


def test_a_log_two_globs_reach_is_read_for_the_attempt_once(tmp_path: Path) -> None:
    """Each glob is searched in a worker of its own: a file both reach is one file still."""
    log = device_log(tmp_path, START + timedelta(seconds=1))
    conf = build({"logs": {"paths": [f"{tmp_path}/slog/**", f"{log.parent}/*.log"]}})
    result = after_attempt(conf, START, until=RESUMED)
    assert [(f.rule, f.file) for f in result.findings] == [("hwts-busy-suspend", str(log))]
    assert (result.files_read, result.bytes_read) == (1, log.stat().st_size)


@pytest.mark.skipif(os.geteuid() != 0, reason="a folder of root's needs root to make")
def test_a_folder_of_root_s_that_a_user_s_job_named_is_not_read(tmp_path: Path) -> None:
    """ASCEND_PROCESS_LOG_PATH=/ in a user's job: root must not walk the whole tree for it."""
    log = device_log(tmp_path, START + timedelta(seconds=1))
    result = after_attempt(config(tmp_path), START, until=RESUMED,
                           log_dirs={str(log.parent): (1000,)})
    assert [f.file for f in result.findings] == [str(log)]  # through [logs] paths alone
    assert [(s.path, s.reason) for s in result.skipped] == [
        (str(log.parent), "not read: owned by uid 0, not by the holder's user")]


@pytest.mark.skipif(os.geteuid() != 0, reason="another user's folder needs root to make")
def test_a_users_own_log_folder_is_read_through_the_users_own_link(tmp_path: Path) -> None:
    """A job of uid 4242 logging to ~/plog, a link of its own to its folder on a data disk:
    the link is followed (the folder's owner is checked once opened), the folder read."""
    log = device_log(tmp_path / "disk", START + timedelta(seconds=1))
    for path in (tmp_path / "disk", tmp_path / "disk" / "slog", log.parent, log):
        os.chown(path, 4242, 4242)
    home = tmp_path / "home"
    home.mkdir()
    (home / "plog").symlink_to(tmp_path / "disk" / "slog")
    os.lchown(home / "plog", 4242, 4242)
    conf = build({"logs": {"paths": []}})
    result = after_attempt(conf, START, until=RESUMED, log_dirs={str(home / "plog"): (4242,)})
    assert [f.rule for f in result.findings] == ["hwts-busy-suspend"], result.skipped
    # another user's link on the way is not followed
    os.lchown(home / "plog", 4343, 4343)
    result = after_attempt(conf, START, until=RESUMED, log_dirs={str(home / "plog"): (4242,)})
    assert result.findings == ()
    assert [s.reason for s in result.skipped] == [
        "symbolic link owned by uid 4343 in the path, not followed"]
