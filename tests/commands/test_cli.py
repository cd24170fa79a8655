"""The CLI in-process and as a real process: exit statuses, JSON, journal priorities, SIGTERM."""

from __future__ import annotations

import contextlib
import io
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import IO, Any

import pytest
from helpers.holders import Holders
from helpers.runners import cli
from helpers.wait import wait_for

from suspendguard.store.history import History


def test_dry_run_json_is_stable(conf: Path, node: str, holders: Holders) -> None:
    _, pid = holders.start(node, mode="deaf")
    code, out, _ = cli("check", "--dry-run", "--json", "--config", str(conf))
    data = json.loads(out)
    assert code == 1
    assert data["verdict"] == "veto" and data["dry_run"] is True
    assert {"verdict", "dry_run", "reasons", "devices", "holders", "unreadable", "idle",
            "warnings"} <= set(data)
    assert data["devices"][0]["path"] == node and data["devices"][0]["role"] == "compute"
    [h] = [h for h in data["holders"] if h["pid"] == pid]
    assert {"pid", "comm", "cmdline", "user", "unit", "nodes", "sigint", "action", "rule",
            "outcome"} <= set(h)
    assert h["sigint"] == "ignored" and h["action"] == "drain"
    assert h["outcome"]["kind"] == "not-signalled"
    assert any("kill -2 cannot stop it" in r for r in data["reasons"])
    assert data["idle"]["state"] in ("unknown", "none")


def test_human_output_puts_the_verdict_first(conf: Path, node: str, holders: Holders) -> None:
    _, pid = holders.start(node)
    code, out, _ = cli("check", "--dry-run", "--config", str(conf))
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "verdict: ALLOW (dry run)"
    assert any(line.split()[:3] == [str(pid), "root", "drain"] or
               (line.split() and line.split()[0] == str(pid)) for line in lines)
    assert holders.signals() == []


def test_check_says_a_protect_rule_on_a_name_alone_lets_anyone_veto(
        conf: Path, node: str, holders: Holders) -> None:
    _, pid = holders.start(node)
    comm = Path(f"/proc/{pid}/comm").read_text().strip()
    conf.write_text(conf.read_text() + f'[[policy.protect]]\ncomm = "{comm}"\n'
                    f'[[policy.protect]]\ncomm = "{comm}"\nuid = 4242\n')
    code, out, _ = cli("check", "--dry-run", "--config", str(conf))
    assert code == 1  # the holder is protected by the first rule: veto
    warning = (f"  ! [policy] protect #1 (comm={comm!r}) matches by name or command line alone, "
               "which any user's process can set: any user can veto every suspend with it; add "
               "uid, user, unit or exe")
    assert warning in out.splitlines()
    assert "protect #2" not in out.split("holders:")[0]  # a rule on a uid holds
    assert any(line.startswith(f"  pid {pid}: the rule that protects it matches by name or "
                               "command line alone, which any user's process can set")
               for line in out.splitlines())


def test_a_verdict_whose_output_is_lost_never_exits_0(
        conf: Path, node: str, holders: Holders) -> None:
    # `suspendguard check | head -c0 && systemctl suspend`: the reader left before the
    # report; so does a full disk. Exit status 3, never 0, whatever the verdict.
    _, pid = holders.start(node)
    comm = Path(f"/proc/{pid}/comm").read_text().strip()
    conf.write_text(conf.read_text() + f'[[policy.protect]]\ncomm = "{comm}"\nuid = 0\n')
    argv = [sys.executable, "-m", "suspendguard", "--config", str(conf), "check", "--dry-run"]
    assert subprocess.run(argv, capture_output=True, timeout=60).returncode == 1  # a veto
    with reader_gone() as gone:
        closed = subprocess.run(argv, stdout=gone, stderr=subprocess.PIPE, timeout=60)
    assert (closed.returncode, closed.stderr) == (3, b"")  # the reader chose to stop
    # /dev/full opened by the guard's own process: the test node is a /dev/full too.
    lost = subprocess.run(["sh", "-c", 'exec "$@" >/dev/full', "sh", *argv],
                          stderr=subprocess.PIPE, text=True, timeout=60)
    assert lost.returncode == 3
    assert lost.stderr == "suspendguard: cannot write to the output: No space left on device\n"
    assert holders.signals() == []


@contextlib.contextmanager
def reader_gone() -> Iterator[IO[bytes]]:
    """The write end of a pipe whose reader has left (``| head -c0``): writes fail, EPIPE."""
    reader = subprocess.Popen(["head", "-c0"], stdin=subprocess.PIPE)
    reader.wait(timeout=10)
    assert reader.stdin is not None
    try:
        yield reader.stdin
    finally:
        reader.stdin.close()


@pytest.mark.parametrize("broken", ["stdout", "stderr"])
def test_pre_sleep_keeps_its_verdict_whatever_its_streams_take(
        conf: Path, node: str, holders: Holders, broken: str) -> None:
    # The unit's answer is its exit status, its verdict logged and recorded: a journal
    # stream that broke (under its log lines, or its report) never turns a recorded allow
    # into a refused sleep.
    job, pid = holders.start(node)
    with reader_gone() as gone:
        streams: dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE,
                                   broken: gone}
        run = subprocess.run([sys.executable, "-m", "suspendguard", "pre-sleep", "--config",
                              str(conf)], text=True, timeout=60, **streams)
    assert run.returncode == 0, run.stderr
    if broken == "stdout":
        assert "the report was not written (cannot write to the output: Broken pipe); the " \
            "verdict stands" in run.stderr, run.stderr
    assert job.wait(timeout=10) is not None and holders.signals() == [f"{pid} SIGINT"]
    with History.open(str(conf.parent / "state"), readonly=True) as h:
        assert h.attempts(1)[0].result == "allow"


@pytest.mark.parametrize("mode,status", [("graceful", 0), ("deaf", 1)])
def test_pre_sleep_exit_status(conf: Path, node: str, holders: Holders, mode: str,
                               status: int) -> None:
    holders.start(node, mode=mode)
    code, _out, err = cli("pre-sleep", "hybrid-sleep", "--config", str(conf))
    assert code == status, err
    with History.open(str(conf.parent / "state"), readonly=True) as h:
        assert h.attempts(1)[0].action == "hybrid-sleep"


def test_pre_sleep_bad_usage_is_2(conf: Path) -> None:
    code, _, err = cli("pre-sleep", "nap", "--config", str(conf))
    assert code == 2 and "invalid choice" in err and err.count("\n") == 1
    code, _, err = cli("frobnicate")
    assert code == 2


@pytest.mark.parametrize("option", ["--recheck", "--debounce"])
@pytest.mark.parametrize("seconds", ["nan", "-1"])
def test_watch_refuses_seconds_that_make_no_bound(conf: Path, option: str, seconds: str) -> None:
    # Refused as it is read, before the watch starts: nan compares false with every bound.
    code, out, err = cli("watch", f"{option}={seconds}", "--config", str(conf))
    assert (code, out) == (2, "")
    assert f"argument {option}: expected a finite number of seconds >= 0" in err


@pytest.mark.parametrize(("argv", "said"), [
    (["watch", "--recheck", "0"], "suspendguard: watch: --recheck 0: give seconds from 1 to 3600\n"),
    (["watch", "--debounce", "11"], "suspendguard: watch: --debounce 11: give seconds from 0 to 10\n"),
    (["retry", "suspend", "--attempt", "-1"],
     "suspendguard: retry: --attempt -1: give an attempt's ID (suspendguard history lists them)\n"),
])
def test_a_value_out_of_range_names_its_command_as_typed(conf: Path, argv: list[str],
                                                          said: str) -> None:
    assert cli(*argv, "--config", str(conf)) == (2, "", said)


def test_retry_refuses_a_bound_that_never_passes(conf: Path) -> None:
    for seconds in ("nan", "inf", "-5"):
        code, out, err = cli("retry", "suspend", "--attempt", "1", f"--for={seconds}",
                             "--config", str(conf))
        assert (code, out) == (2, ""), seconds
        assert "argument --for: expected a finite number of seconds >= 0" in err


def test_a_leftover_argument_names_its_command(conf: Path) -> None:
    for argv, said in ((["check", "extra"], "check: unrecognized arguments: extra"),
                       (["config", "--json"], "config: unrecognized arguments: --json"),
                       (["slurm", "sync", "extra"], "slurm sync: unrecognized arguments: extra")):
        code, out, err = cli(*argv, "--config", str(conf))
        assert (code, out) == (2, ""), argv
        assert err == f"suspendguard: {said}\n"


@pytest.mark.parametrize("steps", [["slurm", "sync"], ["slurm", "health"],
                                   ["slurm", "suspend", "n1"], ["slurm", "node", "awake"],
                                   ["slurm", "node", "prepare", "--suspend"]])
def test_config_is_taken_after_a_slurm_step_too(tmp_path: Path, steps: list[str]) -> None:
    # As after every command (docs/configuration.md): read, so a missing file is said.
    missing = tmp_path / "missing.toml"
    code, out, err = cli(*steps, "--config", str(missing))
    assert (code, out) == (2, "")
    assert err == f"suspendguard: {missing}: configuration file not found\n"


def test_doctor_refuses_an_empty_root_not_this_host(conf: Path) -> None:
    # --root "$UNSET" must not check / in the place of the tree meant.
    code, out, err = cli("doctor", "--root", "", "--config", str(conf))
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "doctor --root: expected a folder" in err


def test_the_command_list_names_the_unknown_status() -> None:
    code, out, _ = cli()
    assert code == 2
    assert "  5  unknown: the guard cannot tell (check, drain, pre-sleep); never read as allow" \
        in out.splitlines()


def test_an_empty_config_path_is_refused_not_the_default_file(tmp_path: Path) -> None:
    # --config "$UNSET" must not silently read /etc/suspendguard/config.toml instead.
    other = tmp_path / "env.toml"
    other.write_text("[drain]\ntimeout_s = 7\n")
    for argv in (["--config", "", "config"], ["config", "--config="], ["check", "--config", ""]):
        code, out, err = cli(*argv, environ={"SUSPENDGUARD_CONFIG": str(other)})
        assert (code, out) == (2, ""), argv
        assert err == "suspendguard: --config: expected a PATH, got an empty string\n"


def test_journal_priorities(conf: Path, node: str, holders: Holders) -> None:
    holders.start(node, mode="deaf")
    code, _, err = cli("pre-sleep", "--config", str(conf), environ={"JOURNAL_STREAM": "8:1234"})
    assert code == 1
    verdict = [line for line in err.splitlines() if "veto" in line]
    assert verdict and all(line.startswith("<3>") for line in verdict)


def test_an_observed_refusal_is_logged_as_a_warning_that_says_would(
        conf: Path, node: str, holders: Holders) -> None:
    # Observe mode refuses nothing: a journalctl -p err alert must not fire on its look.
    from suspendguard.store import mode

    holders.start(node, mode="deaf")
    mode.write(str(conf.parent / "state"), "observe")
    code, _, err = cli("pre-sleep", "--config", str(conf), environ={"JOURNAL_STREAM": "8:1234"})
    assert code == 0
    [verdict] = [line for line in err.splitlines() if "veto" in line]
    assert verdict.startswith("<4>") and "would veto: " in verdict, err
    assert not any(line.startswith("<3>") for line in err.splitlines()), err


def test_an_observed_unknown_says_would_refuse() -> None:
    from helpers.records import ended

    from suspendguard.guard.render import log_verdict
    from suspendguard.system.log import Logger

    attempt = replace(ended(7, "unknown", ["3 processes could not be inspected"],
                            code="uninspected"), dry_run=True, action="suspend")
    report = SimpleNamespace(attempt=attempt, verdict=attempt.verdict, holders=())
    out = io.StringIO()
    log_verdict(report, Logger(out, {"JOURNAL_STREAM": "8:1"}))  # type: ignore[arg-type]
    assert out.getvalue().startswith("<4>attempt 7 (") and "unknown, would refuse: 3 " \
        "processes could not be inspected" in out.getvalue(), out.getvalue()


def test_allow_is_logged_at_info(conf: Path) -> None:
    code, _, err = cli("pre-sleep", "--config", str(conf), environ={"JOURNAL_STREAM": "8:1234"})
    assert code == 0
    assert any(line.startswith("<6>") and "allow" in line for line in err.splitlines())


def test_sigterm_to_the_guard_process_is_a_recorded_veto(conf: Path, node: str,
                                                         holders: Holders) -> None:
    text = conf.read_text().replace("timeout_s = 5", "timeout_s = 60")
    conf.write_text(text)
    holders.start(node, mode="slow")
    guard = subprocess.Popen([sys.executable, "-m", "suspendguard", "pre-sleep", "--config",
                              str(conf)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(holders.signals, 20.0, interval=0.1)  # the drain has begun
        guard.send_signal(signal.SIGTERM)
        _out, err = guard.communicate(timeout=20)
    finally:
        guard.kill()
    assert guard.returncode == 1, err
    assert "guard received SIGTERM" in err
    with History.open(str(conf.parent / "state"), readonly=True) as h:
        attempt: Any = h.attempts(1)[0]
    assert attempt.result == "veto"
    assert any("SIGTERM" in r for r in attempt.reasons)


def test_python_dash_m_works() -> None:
    proc = subprocess.run([sys.executable, "-m", "suspendguard", "--version"],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("suspendguard ")


def test_dry_run_records_nothing(conf: Path) -> None:
    code, _, _ = cli("check", "--dry-run", "--config", str(conf))
    assert code == 0
    assert not (conf.parent / "state" / "history.db").exists()


# What a dry run among plain processes has no use for: the D-Bus client, the
# engines' HTTP (and with both, ssl), the history's SQLite and its digest's
# OpenSSL, psutil. Each costs peak RSS and start-up (benchmarks/scan.py).
UNUSED_BY_A_PLAIN_DRY_RUN = ("asyncio", "dbus_next", "http.client", "ssl", "sqlite3", "_hashlib",
                             "psutil")


def test_a_dry_run_among_plain_processes_loads_no_supervisor_and_no_history(
        conf: Path, node: str, holders: Holders) -> None:
    _, pid = holders.start(node)
    code = (
        "import io, json, sys\n"
        "from suspendguard.cli import main\n"
        "from suspendguard.supervise.owner import owner_of_cgroup\n"
        "from suspendguard.system.procfs import ProcFS\n"
        "out = io.StringIO()\n"
        f"status = main(['check', '--dry-run', '--json', '--config', {str(conf)!r}], out=out,\n"
        "              err=io.StringIO(), environ={})\n"
        "print(json.dumps({'status': status, 'pids': [h['pid'] for h in json.loads(out.getvalue())"
        "['holders']],\n"
        f"                  'owner': owner_of_cgroup(ProcFS().cgroup({pid})).kind,\n"
        "                  'loaded': sorted(m for m in sys.argv[1:] if m in sys.modules)}))\n"
    )
    run = subprocess.run([sys.executable, "-c", code, *UNUSED_BY_A_PLAIN_DRY_RUN],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout)
    assert seen["status"] == 0 and seen["pids"] == [pid], seen
    if seen["owner"] == "plain":
        assert seen["loaded"] == [], seen
    else:  # a unit's or a container's holder: its owner is asked, nothing is recorded
        assert not set(seen["loaded"]) & {"sqlite3", "_hashlib", "psutil"}, seen


@pytest.mark.parametrize(("module", "command", "named"), [
    ("prometheus_client", ["status", "--prometheus"], "prometheus-client"),
    ("dbus_next", ["drain", "--yes"], "dbus-next"),
])
def test_a_missing_dependency_is_one_line_that_names_its_package(
        conf: Path, module: str, command: list[str], named: str) -> None:
    # The module as a broken install lacks it: importing it fails as a missing one does.
    code = (f"import sys\nsys.modules[{module!r}] = None\n"
            "from suspendguard.cli import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    run = subprocess.run([sys.executable, "-c", code, "--config", str(conf), *command],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 3, run.stderr
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr, run.stderr
    assert f"the Python package {named} is not installed" in run.stderr, run.stderr
