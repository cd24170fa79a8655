"""The sleep hook's side: pre after the unit (and without it: no drain), post with log findings."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.holders import Holders

from suspendguard.cli import main
from suspendguard.guard.pipeline import run
from suspendguard.store.history import History
from suspendguard.system.log import Logger


@pytest.fixture
def conf(tmp_path: Path, node: str) -> Path:
    logs = tmp_path / "logs"
    logs.mkdir()
    path = tmp_path / "config.toml"
    path.write_text(
        f'[devices]\nfamilies = []\nnodes = ["{node}"]\n'
        f'[state]\ndir = "{tmp_path / "state"}"\n'
        '[idle]\nbackends = []\n[drain]\ntimeout_s = 5\n'
        f'[logs]\npaths = ["{logs}/**"]\n'
    )
    return path


def hook(conf: Path, *argv: str) -> tuple[int, str]:
    err = io.StringIO()
    code = main(["sleep-hook", *argv, "--config", str(conf)], out=io.StringIO(), err=err,
                environ={"JOURNAL_STREAM": "8:1"})
    return code, err.getvalue()


def state(conf: Path) -> str:
    return str(conf.parent / "state")


def test_pre_after_the_unit_only_records(conf: Path, node: str, holders: Holders) -> None:
    from suspendguard.config import load
    cfg = load(str(conf))
    report = run(cfg, dry_run=False, action="suspend", origin="unit", idle_check=None,
                 log=Logger(io.StringIO(), {}), history=History.open)
    proc, _pid = holders.start(node)  # started after the unit's drain
    code, err = hook(conf, "pre", "suspend")
    assert code == 0
    assert f"attempt {report.attempt.id}: system going down" in err
    assert holders.signals() == [] and proc.poll() is None  # the hook did not drain again
    with History.open(state(conf), readonly=True) as h:
        events = h.events()
    assert events[0].phase == "pre" and events[0].attempt_id == report.attempt.id


@pytest.mark.parametrize("fails", ["reading", "recording"])
def test_pre_with_a_history_it_cannot_use_warns_and_still_ends_0(
        conf: Path, monkeypatch: pytest.MonkeyPatch, fails: str) -> None:
    """A history that opens but then cannot be read (damaged) or written (a full disk,
    locked) is one warning: the hook only records, and the database is closed."""
    from suspendguard.config import load
    from suspendguard.errors import HistoryError
    run(load(str(conf)), dry_run=False, action="suspend", origin="unit", idle_check=None,
        log=Logger(io.StringIO(), {}), history=History.open)
    if fails == "reading":
        def damaged(self: History, **_: object) -> None:
            raise HistoryError("cannot read history.db: database disk image is malformed")
        monkeypatch.setattr(History, "last_slept_on", damaged)
    else:
        import contextlib
        import sqlite3
        with contextlib.closing(sqlite3.connect(Path(state(conf)) / "history.db")) as c, c:
            c.execute("CREATE TRIGGER full BEFORE INSERT ON events "
                      "BEGIN SELECT RAISE(FAIL, 'database or disk is full'); END")
    closed: list[History] = []
    close = History.close
    monkeypatch.setattr(History, "close", lambda self: closed.append(self) or close(self))
    code, err = hook(conf, "pre", "suspend")
    assert code == 0, err
    [line] = err.splitlines()
    assert line.startswith("<4>") and "history not recorded: " in line, err
    assert ("malformed" if fails == "reading" else "database or disk is full") in line, err
    assert len(closed) == 1


def test_pre_with_a_history_it_cannot_open_never_says_the_unit_did_not_run(
        conf: Path, tmp_path: Path) -> None:
    # The state folder a symlink, which the guard refuses: the unit's attempt cannot be
    # looked up, so the hook cannot tell whether the unit ran and drained.
    real = tmp_path / "real-state"
    real.mkdir()
    Path(state(conf)).symlink_to(real)
    code, err = hook(conf, "pre", "suspend")
    assert code == 0, err
    assert "did not run" not in err and "nothing was drained" not in err, err
    assert "history not recorded: " in err, err
    assert ("the veto unit's attempt of this suspend cannot be looked up (the history did not "
            "open, above): whether it ran and what it drained is unknown here") in err, err


def test_pre_without_the_unit_drains_nothing_and_says_so(conf: Path, node: str,
                                                         holders: Holders) -> None:
    proc, _pid = holders.start(node)
    code, err = hook(conf, "pre", "suspend")
    assert code == 0  # a hook can never veto
    assert "the veto unit did not run before this suspend: nothing was drained" in err
    assert holders.signals() == [] and proc.poll() is None  # no drain around the owners
    with History.open(state(conf), readonly=True) as h:
        assert h.attempts(1) == []  # no attempt of the hook's own
        [event] = h.events()
    assert event.phase == "pre" and "nothing was drained" in event.note


def test_a_sleep_soon_after_a_veto_is_not_filed_under_it(conf: Path, node: str,
                                                          holders: Holders) -> None:
    # The unit vetoed (nothing slept); the operator switched the guard off and suspended:
    # that sleep had no attempt, and its going down and resume are not the veto's.
    from suspendguard.config import load
    from suspendguard.store import mode

    holders.start(node, mode="deaf")
    vetoed = run(load(str(conf)), dry_run=False, action="suspend", origin="unit",
                 idle_check=None, log=Logger(io.StringIO(), {}), history=History.open)
    assert vetoed.verdict.kind == "veto"
    mode.write(state(conf), "off")
    code, err = hook(conf, "pre", "suspend")
    assert code == 0 and f"attempt {vetoed.attempt.id}" not in err, err
    with History.open(state(conf), readonly=True) as h:
        [event] = [e for e in h.events() if e.phase == "pre"]
    assert event.attempt_id is None, event
    assert event.note == ("the veto unit's attempt is not found, and the guard's mode is off: "
                          "nothing was drained")


def test_a_long_attempt_still_counts_from_its_end(conf: Path, node: str) -> None:
    """The look-back runs from the attempt's end: a drain that took longer
    than the look-back itself is still this sleep's attempt."""
    from suspendguard.config import load
    cfg = load(str(conf))
    report = run(cfg, dry_run=False, action="suspend", origin="unit", idle_check=None,
                 log=Logger(io.StringIO(), {}), history=History.open)
    import contextlib
    import sqlite3
    with contextlib.closing(sqlite3.connect(Path(state(conf)) / "history.db")) as c, c:
        # As if it had begun 10 minutes ago and ended just now.
        c.execute("UPDATE attempts SET started = started - 600 WHERE id = ?",
                  (report.attempt.id,))
    code, err = hook(conf, "pre", "suspend")
    assert code == 0 and f"attempt {report.attempt.id}: system going down" in err


def test_post_records_hwts_busy_for_the_attempt(conf: Path) -> None:
    from suspendguard.config import load
    cfg = load(str(conf))
    report = run(cfg, dry_run=False, action="suspend", origin="unit", idle_check=None,
                 log=Logger(io.StringIO(), {}), history=History.open)
    log = conf.parent / "logs" / "device-0" / "device-4242_20991231.log"
    log.parent.mkdir()
    import time
    stamp = time.strftime("%Y-%m-%d-%H:%M:%S.000.000", time.localtime(time.time() + 1))
    log.write_text(f"[ERROR] TSCH(-1,null):{stamp} (dieid:0,cpuid:0) task_scheduler_lowpower.c:"
                   "204 suspend_ack: suspend pre check fail, hwts is busy\n")
    code, err = hook(conf, "post", "suspend")
    assert code == 0
    assert any(line.startswith("<4>") and "hwts-busy-suspend" in line
               for line in err.splitlines()), err
    out = io.StringIO()
    main(["history", "--json", "--config", str(conf)], out=out, err=io.StringIO(), environ={})
    [attempt] = json.loads(out.getvalue())["attempts"]
    assert attempt["id"] == report.attempt.id
    assert [f["rule"] for f in attempt["findings"]] == ["hwts-busy-suspend"]
    assert [e["phase"] for e in attempt["events"]] == ["post"]


def test_post_after_a_weekend_s_sleep_reads_the_logs_of_the_attempt_pre_went_down_after(
        conf: Path) -> None:
    from suspendguard.config import load
    report = run(load(str(conf)), dry_run=False, action="suspend", origin="unit",
                 idle_check=None, log=Logger(io.StringIO(), {}), history=History.open)
    assert hook(conf, "pre", "suspend")[0] == 0
    import sqlite3
    import time
    days = 3 * 24 * 3600
    with sqlite3.connect(Path(state(conf)) / "history.db") as db:  # the sleep lasted 3 days
        db.execute("UPDATE attempts SET started = started - ?, finished = finished - ?",
                   (days, days))
        db.execute("UPDATE events SET time = time - ?", (days,))
    stamp = time.strftime("%Y-%m-%d-%H:%M:%S.000.000", time.localtime(time.time() - days + 2))
    (conf.parent / "logs" / "plog-4242_1.log").write_text(
        f"[ERROR] TSCH(-1,null):{stamp} (dieid:0,cpuid:0) task_scheduler_lowpower.c:204 "
        "suspend_ack: suspend pre check fail, hwts is busy\n")
    code, err = hook(conf, "post", "suspend")
    assert code == 0 and "hwts-busy-suspend" in err, err
    with History.open(state(conf), readonly=True) as h:
        attempt = h.attempt(report.attempt.id)
    assert attempt is not None and [f.rule for f in attempt.findings] == ["hwts-busy-suspend"]
    assert [e.phase for e in attempt.events] == ["pre", "post"]


def test_post_says_what_it_could_not_read_as_unknown(conf: Path, tmp_path: Path) -> None:
    """A log left unread is never passed off as a log without failures."""
    from suspendguard.config import load
    run(load(str(conf)), dry_run=False, action="suspend", origin="unit", idle_check=None,
        log=Logger(io.StringIO(), {}), history=History.open)
    logs = conf.parent / "logs"
    secret = tmp_path / "elsewhere.log"
    secret.write_text("suspend pre check fail, hwts is busy\n")
    (logs / "plog-1.log").symlink_to(secret)
    # masked lines (the vendor's older form) carry no time: this one cannot be placed
    (logs / "plog-2.log").write_text(
        "[ERROR] RUNTIME ****** EventIdAlloc:drvEventIdAlloc:errorcode = 7\n")
    code, err = hook(conf, "post", "suspend")
    assert code == 0
    assert f"device log {logs}/plog-1.log: symbolic link, not followed" in err, err
    assert "plog-2.log: 1 line(s) of event-id-exhausted with no time" in err, err
    [last] = [line for line in err.splitlines() if "no documented device failure" in line]
    assert last.endswith("no documented device failure in 1 device log file(s); 2 log(s) not "
                         "read or read only in part (above): what they hold is unknown"), err


def busy_plog(folder: Path) -> Path:
    """A plog file in ``folder`` with the hwts-busy line, stamped now as the host does."""
    import time
    stamp = time.strftime("%Y-%m-%d-%H:%M:%S.000.000", time.localtime(time.time() + 1))
    log = folder / "debug" / "plog" / "plog-4242_20991231.log"
    log.parent.mkdir(parents=True)
    log.write_text(f"[ERROR] TSCH(-1,null):{stamp} (dieid:0,cpuid:0) task_scheduler_lowpower.c:"
                   "204 suspend_ack: suspend pre check fail, hwts is busy\n")
    return log


def drained_with_log_folders(conf: Path, node: str, holders: Holders, tmp_path: Path
                             ) -> tuple[int, Path, Path]:
    """A job that sets both CANN log variables, drained by a recorded run: the attempt's id,
    its ASCEND_PROCESS_LOG_PATH and its ASCEND_WORK_PATH."""
    from suspendguard.config import load
    plog, work = tmp_path / "job" / "plog", tmp_path / "job" / "work"
    plog.mkdir(parents=True)
    (work / "log").mkdir(parents=True)
    # Written as a job script may: a trailing slash, a "." in the path.
    _, pid = holders.start(node, argv_prefix=[
        "env", f"ASCEND_PROCESS_LOG_PATH={plog}/", f"ASCEND_WORK_PATH={tmp_path}/job/./work"])
    report = run(load(str(conf)), dry_run=False, action="suspend", origin="unit",
                 idle_check=None, log=Logger(io.StringIO(), {}), history=History.open)
    assert report.verdict.kind == "allow", report.verdict.texts
    with History.open(state(conf), readonly=True) as h:
        attempt = h.attempt(report.attempt.id)
    assert attempt is not None
    [row] = attempt.holders
    assert row.holder.pid == pid and row.outcome.kind == "exited"
    assert row.holder.log_dirs == (str(plog), str(work / "log"))
    return report.attempt.id, plog, work / "log"


def test_post_reads_each_holder_s_own_log_folders(conf: Path, node: str, holders: Holders,
                                                  tmp_path: Path) -> None:
    """The folders a job named in its environment, which the hook's own lacks, are read
    after resume, by the hook and by logs --since last-attempt alike."""
    attempt_id, plog, work_log = drained_with_log_folders(conf, node, holders, tmp_path)
    written = [busy_plog(plog), busy_plog(work_log)]
    code, err = hook(conf, "post", "suspend")
    assert code == 0
    assert any(line.startswith("<4>") and "hwts-busy-suspend" in line
               for line in err.splitlines()), err
    with History.open(state(conf), readonly=True) as h:
        attempt = h.attempt(attempt_id)
    assert attempt is not None
    assert sorted((f.rule, f.file) for f in attempt.findings) == [
        ("hwts-busy-suspend", str(log)) for log in written]
    out = io.StringIO()
    main(["logs", "--since", "last-attempt", "--json", "--config", str(conf)], out=out,
         err=io.StringIO(), environ={})
    assert sorted(f["file"] for f in json.loads(out.getvalue())["findings"]) == [
        str(log) for log in written]


def test_post_leaves_a_holder_s_log_folder_another_user_owns(conf: Path, node: str,
                                                              holders: Holders,
                                                              tmp_path: Path) -> None:
    """Root reads the folder a job chose: one owned by neither the job's user nor root is
    not read, and said, and no finding is made of what it holds."""
    attempt_id, plog, _ = drained_with_log_folders(conf, node, holders, tmp_path)
    busy_plog(plog)
    os.chown(plog, 65534, 65534)
    code, err = hook(conf, "post", "suspend")
    assert code == 0
    assert (f"attempt {attempt_id}: device log {plog}: not read: owned by uid 65534, not by "
            "the holder's user") in err, err
    assert "hwts-busy-suspend" not in err, err
    assert err.rstrip().endswith("1 log(s) not read or read only in part (above): what they "
                                 "hold is unknown"), err
    with History.open(state(conf), readonly=True) as h:
        attempt = h.attempt(attempt_id)
    assert attempt is not None and attempt.findings == ()


def test_post_says_failures_stamped_before_the_attempt_and_counts_none(conf: Path) -> None:
    """A device clock an hour behind the host's: the line it wrote in this attempt is stamped
    before the attempt began. Not counted, and said: never "no documented device failure"."""
    from suspendguard.config import load
    report = run(load(str(conf)), dry_run=False, action="suspend", origin="unit",
                 idle_check=None, log=Logger(io.StringIO(), {}), history=History.open)
    import time
    stamp = time.strftime("%Y-%m-%d-%H:%M:%S.000.000", time.localtime(time.time() - 3600))
    log = conf.parent / "logs" / "device-0" / "device-0_1.log"
    log.parent.mkdir()
    log.write_text(f"[ERROR] TSCH(-1,null):{stamp} (dieid:0,cpuid:0) task_scheduler_lowpower.c:"
                   "204 suspend_ack: suspend pre check fail, hwts is busy\n")
    code, err = hook(conf, "post", "suspend")
    assert code == 0
    assert (f"attempt {report.attempt.id}: device log {log}: 1 line(s) of hwts-busy-suspend "
            "stamped before the time asked, in a file written to since: not counted (a device "
            "clock behind the host's?)") in err, err
    assert "no documented device failure" not in err, err
    assert err.rstrip().endswith(
        "resumed from suspend; documented device failure(s) stamped before the attempt in 1 "
        "device log(s) (above), not counted (a device clock behind the host's?); none inside "
        "it in 1 device log file(s)"), err
    with History.open(state(conf), readonly=True) as h:
        attempt = h.attempt(report.attempt.id)
    assert attempt is not None and attempt.findings == ()


def test_a_later_step_keeps_once_a_line_the_step_before_it_read(
        conf: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Suspend-then-hibernate: a line stamped after the first step's resume was recorded, and
    on disk before that step read the logs (what the device writes as it wakes). The
    hibernate step's post reads it too: it is kept once, and warned of once."""
    import time

    from suspendguard.commands import sleep_hook
    from suspendguard.config import load
    action = "suspend-then-hibernate"
    report = run(load(str(conf)), dry_run=False, action=action, origin="unit",
                 idle_check=None, log=Logger(io.StringIO(), {}), history=History.open)
    log = conf.parent / "logs" / "plog-4242_1.log"
    after_attempt = sleep_hook.after_attempt

    def woken(*args: Any, **kwargs: Any) -> Any:
        # After the first step's resume is recorded, before its read: stamped past that
        # record's time, whatever the rounding of the stamp's milliseconds.
        at = time.time() + 0.002
        stamp = (time.strftime("%Y-%m-%d-%H:%M:%S", time.localtime(at))
                 + f".{int(at % 1 * 1000):03d}.000")
        log.write_text(f"[ERROR] RUNTIME(4242,python3):{stamp} Device[0] lost heartbeat\n")
        return after_attempt(*args, **kwargs)

    monkeypatch.setattr(sleep_hook, "after_attempt", woken)
    assert hook(conf, "pre", action)[0] == 0
    code, first = hook(conf, "post", action)
    assert code == 0 and "heartbeat-lost" in first, first
    monkeypatch.setattr(sleep_hook, "after_attempt", after_attempt)
    with History.open(state(conf)) as h:  # the hibernate step's pre, as systemd-sleep runs it
        h.record_event("pre", action, f"going down again after attempt {report.attempt.id}",
                       report.attempt.id)
    code, second = hook(conf, "post", action)
    assert code == 0 and "heartbeat-lost" not in second, second
    assert second.rstrip().endswith(
        "no documented device failure in 1 device log file(s) besides the 1 already recorded "
        "with the attempt"), second
    with History.open(state(conf), readonly=True) as h:
        attempt = h.attempt(report.attempt.id)
    assert attempt is not None
    assert [e.phase for e in attempt.events] == ["pre", "post", "pre", "post"]
    assert [f.rule for f in attempt.findings] == ["heartbeat-lost"]


def test_a_second_sleep_without_its_own_attempt_reads_nothing_for_the_first(conf: Path) -> None:
    """The next sleep, the veto unit not run: the first attempt's window would have grown to
    hours of the jobs' ordinary failures, and its findings been recorded again."""
    from suspendguard.config import load
    report = run(load(str(conf)), dry_run=False, action="suspend", origin="unit",
                 idle_check=None, log=Logger(io.StringIO(), {}), history=History.open)
    import time
    stamp = time.strftime("%Y-%m-%d-%H:%M:%S.000.000", time.localtime(time.time() + 1))
    log = conf.parent / "logs" / "plog-4242_1.log"
    log.write_text(f"[ERROR] TSCH(-1,null):{stamp} (dieid:0,cpuid:0) task_scheduler_lowpower.c:"
                   "204 suspend_ack: suspend pre check fail, hwts is busy\n")
    assert hook(conf, "post", "suspend")[0] == 0
    # hours later, a job's failure, then a sleep the guard recorded no attempt for
    with log.open("a") as f:
        f.write(f"[ERROR] RUNTIME(4242,python3):{stamp} Device[0] lost heartbeat\n")
    code, err = hook(conf, "post", "suspend")
    assert code == 0
    assert (f"no suspend attempt was recorded before it (the last, {report.attempt.id}, was "
            "resumed from already)") in err, err
    out = io.StringIO()
    main(["history", "--json", "--config", str(conf)], out=out, err=io.StringIO(), environ={})
    [attempt] = json.loads(out.getvalue())["attempts"]
    assert [f["rule"] for f in attempt["findings"]] == ["hwts-busy-suspend"]


def test_in_observe_mode_post_reads_the_units_look_window_not_an_earlier_sleeps(
        conf: Path) -> None:
    """The observe mode's look refuses nothing, so the sleep followed it: its window is this
    sleep's. A check from a shell in between is no sleep's attempt."""
    from suspendguard.config import load
    cfg = load(str(conf))
    first = run(cfg, dry_run=False, action="suspend", origin="unit", idle_check=None,
                log=Logger(io.StringIO(), {}), history=History.open)
    assert hook(conf, "post", "suspend")[0] == 0  # the first sleep's resume
    look = run(cfg, dry_run=True, action="suspend", origin="unit", idle_check=None,
               log=Logger(io.StringIO(), {}), history=History.open, record=True)
    run(cfg, dry_run=True, action="suspend", origin="cli", idle_check=None,
        log=Logger(io.StringIO(), {}), history=History.open, record=True)
    code, err = hook(conf, "pre", "suspend")
    assert code == 0
    assert (f"attempt {look.attempt.id}: system going down for suspend (observe mode: "
            "nothing was drained)") in err, err
    import time
    stamp = time.strftime("%Y-%m-%d-%H:%M:%S.000.000", time.localtime(time.time() + 1))
    (conf.parent / "logs" / "plog-4242_1.log").write_text(
        f"[ERROR] TSCH(-1,null):{stamp} (dieid:0,cpuid:0) task_scheduler_lowpower.c:"
        "204 suspend_ack: suspend pre check fail, hwts is busy\n")
    code, err = hook(conf, "post", "suspend")
    assert code == 0 and f"attempt {look.attempt.id}" in err, err
    with History.open(state(conf), readonly=True) as h:
        seen = h.attempt(look.attempt.id)
        assert [f.rule for f in seen.findings] == ["hwts-busy-suspend"]
        assert [(e.phase, e.note) for e in seen.events] == [
            ("pre", f"going down after attempt {look.attempt.id} (observe mode: the guard only "
                    f"looked, and it would have said {look.verdict.kind})"),
            ("post", "resumed")]
        assert h.attempt(first.attempt.id).findings == ()


def test_post_without_an_attempt_is_quiet(conf: Path) -> None:
    code, err = hook(conf, "post", "suspend")
    assert code == 0 and "no suspend attempt was recorded" in err


def test_hook_path_imports_neither_dbus_nor_asyncio(conf: Path) -> None:
    code = (
        "import sys\n"
        "from suspendguard.cli import main\n"
        f"main(['sleep-hook', 'post', 'suspend', '--config', {str(conf)!r}])\n"
        f"main(['sleep-hook', 'pre', 'suspend', '--config', {str(conf)!r}])\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('dbus_next', 'asyncio'))\n"
        "print(','.join(bad))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ""


def test_bad_config_in_the_hook_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[drain]\ntimeout_s = 'x'\n")
    err = io.StringIO()
    code = main(["sleep-hook", "pre", "suspend", "--config", str(bad)], out=io.StringIO(),
                err=err, environ={})
    assert code == 2 and err.getvalue().count("\n") == 1




@pytest.mark.parametrize("hours", [2, 0], ids=["hours-on", "within-the-look-back"])
def test_suspend_then_hibernate_s_later_step_is_kept_with_the_first_steps_attempt(
        conf: Path, tmp_path: Path, hours: int) -> None:
    """One systemd-sleep runs both steps, the hooks at each; the veto unit ran once, hours
    before the hibernate step (or seconds: a low battery). That step's pre is the attempt's
    later step, with no "did not run"; its post reads the logs of the attempt again, and each
    finding is kept once."""
    import os
    import shutil
    import sqlite3
    import time

    from suspendguard.config import load
    action = "suspend-then-hibernate"
    report = run(load(str(conf)), dry_run=False, action=action, origin="unit",
                 idle_check=None, log=Logger(io.StringIO(), {}), history=History.open)
    plog = conf.parent / "logs" / "plog-4242_1.log"

    def busy_line() -> str:
        stamp = time.strftime("%Y-%m-%d-%H:%M:%S.000.000", time.localtime())
        return (f"[ERROR] TSCH(-1,null):{stamp} (dieid:0,cpuid:0) task_scheduler_lowpower.c:"
                "204 suspend_ack: suspend pre check fail, hwts is busy\n")

    plog.write_text(busy_line())  # the first step's failure
    # systemd-sleep as the hooks' parent: a shell of that name, running both steps.
    sleeper = tmp_path / "systemd-sleep"
    shutil.copy("/bin/sh", sleeper)
    go = tmp_path / "go"
    hook_cmd = f'"{sys.executable}" -m suspendguard sleep-hook %s {action} --config "{conf}"'
    script = (f"SYSTEMD_SLEEP_ACTION=suspend {hook_cmd % 'pre'}\n"
              f"SYSTEMD_SLEEP_ACTION=suspend {hook_cmd % 'post'}\n"
              f'while [ ! -e "{go}" ]; do sleep 0.05; done\n'
              f"SYSTEMD_SLEEP_ACTION=hibernate {hook_cmd % 'pre'}\n"
              f"SYSTEMD_SLEEP_ACTION=hibernate {hook_cmd % 'post'}\nexit 0\n")
    env = {**os.environ, "JOURNAL_STREAM": "8:1"}
    steps = subprocess.Popen([str(sleeper), "-c", script], env=env, stderr=subprocess.PIPE,
                             text=True)
    try:
        def phases() -> list[str]:
            with History.open(state(conf), readonly=True) as h:
                attempt = h.attempt(report.attempt.id)
            return [e.phase for e in attempt.events] if attempt else []

        deadline = time.monotonic() + 60
        while phases() != ["pre", "post"]:
            assert time.monotonic() < deadline and steps.poll() is None, phases()
            time.sleep(0.05)
        # The timer's wake, hours on: the unit's attempt is long over.
        with sqlite3.connect(Path(state(conf)) / "history.db") as db:
            db.execute("UPDATE attempts SET started = started - ?, finished = finished - ?",
                       (hours * 3600, hours * 3600))
        time.sleep(1.1)  # a second on: the second step's line is stamped after the resume
        with plog.open("a") as f:
            f.write(busy_line())  # the hibernate step's failure
        go.touch()
        _, err = steps.communicate(timeout=60)
    finally:
        if steps.poll() is None:
            steps.kill()
            steps.wait()
    assert steps.returncode == 0, err
    assert "did not run" not in err, err
    assert (f"attempt {report.attempt.id}: going down again: the hibernate step of this "
            "suspend-then-hibernate") in err, err
    with History.open(state(conf), readonly=True) as h:
        attempt = h.attempt(report.attempt.id)
        events = h.events()
    assert attempt is not None
    assert [e.phase for e in attempt.events] == ["pre", "post", "pre", "post"]
    assert all(e.attempt_id == report.attempt.id for e in events)
    assert [f.rule for f in attempt.findings] == ["hwts-busy-suspend"] * 2  # one per step

    # A new run of systemd-sleep with no attempt of its own is not this one's later step.
    new = subprocess.run([str(sleeper), "-c", f"{hook_cmd % 'pre'}\nexit 0\n"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert "the veto unit did not run before this suspend-then-hibernate" in new.stderr, new


# systemctl as the hook calls it: each call's argv into a file beside it; is-enabled says
# IS_ENABLED ("enabled", "disabled"...) as systemctl does, exit 0 for enabled alone; "hang":
# no answer.
FAKE_SYSTEMCTL = """#!/bin/sh
echo "$*" >> "$(dirname "$0")/calls"
case "$1" in is-enabled)
    [ "$IS_ENABLED" = hang ] && exec sleep 60
    echo "$IS_ENABLED"; [ "$IS_ENABLED" = enabled ];;
esac
"""


@pytest.mark.parametrize(("sleep_action", "enabled", "calls", "warned"), [
    ("suspend", "enabled", ["is-enabled suspendguard-resume.service",
                            "start --no-block suspendguard-resume.service"], False),
    ("suspend", "disabled", ["is-enabled suspendguard-resume.service"], False),
    ("suspend", "hang", ["is-enabled suspendguard-resume.service"], True),
    (None, "enabled", [], False),
], ids=["by-systemd-sleep", "resume-unit-disabled", "systemctl-hangs", "by-hand"])
def test_post_queues_the_resume_units_start(conf: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch,
                                           sleep_action: str | None, enabled: str,
                                           calls: list[str], warned: bool) -> None:
    """The sleep's own start of the resume unit is merged by systemd into one already
    running (the last restore's): queued again after resume, it runs after every sleep. A
    systemctl that does not answer is said, never taken for a disabled unit."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(FAKE_SYSTEMCTL)
    (bin_dir / "systemctl").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("IS_ENABLED", enabled)
    environ = {"JOURNAL_STREAM": "8:1"}
    if sleep_action:
        environ["SYSTEMD_SLEEP_ACTION"] = sleep_action
    err = io.StringIO()
    code = main(["sleep-hook", "post", "suspend", "--config", str(conf)], out=io.StringIO(),
                err=err, environ=environ)
    assert code == 0
    made = bin_dir / "calls"
    assert (made.read_text().splitlines() if made.exists() else []) == calls
    assert ("suspendguard-resume.service after this resume was not queued: systemctl: no answer "
            "within the timeout" in err.getvalue()) is warned, err.getvalue()
