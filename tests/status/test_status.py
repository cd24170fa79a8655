"""``suspendguard status``: real holders, a real private dbus-daemon with fake logind and
systemd1 on it, a real history database, and a real non-root run."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from helpers import REPO
from helpers.dbus import dbus_daemon
from helpers.holders import Holders
from helpers.records import ended
from helpers.runners import staged
from helpers.users import nobody_prefix, python_for_nobody, shared_with_nobody
from prometheus_client.parser import text_string_to_metric_families

from suspendguard.cli import main
from suspendguard.model import Outcome, Unavailable
from suspendguard.record import KeptRecord
from suspendguard.store.history import History

needs_dbus = pytest.mark.skipif(dbus_daemon() is None, reason="needs dbus-daemon")

NETWORK_MANAGER = ["sleep", "NetworkManager", "NetworkManager needs to turn off networks",
                   "delay", 0, 812]
BACKUP = ["shutdown:sleep", "backup.sh", "nightly backup running", "block", 1000, 4242]
FAKE_STATE: dict[str, Any] = {
    "can_suspend": "yes",
    "can_hibernate": "challenge",
    "inhibit_delay_max_usec": 5_000_000,
    "inhibitors": [NETWORK_MANAGER, BACKUP],
    "units": {
        "suspendguard@suspend.service": {
            "LoadState": "loaded", "ActiveState": "failed", "SubState": "failed",
            "UnitFileState": "enabled", "Result": "exit-code", "ExecMainStatus": 1},
        "suspendguard@hibernate.service": {
            "LoadState": "loaded", "ActiveState": "inactive", "SubState": "dead",
            "UnitFileState": "enabled", "Result": "success", "ExecMainStatus": 0},
    },
}
TOP_KEYS = {"verdict", "accelerators", "holders", "installation", "logind", "systemd", "history",
            "config"}


def status(*argv: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    environ = {"DBUS_SYSTEM_BUS_ADDRESS": os.environ.get("DBUS_SYSTEM_BUS_ADDRESS", ""),
               **(env or {})}
    code = main(["status", *argv], out=out, err=err, environ=environ)
    return code, out.getvalue(), err.getvalue()


def metrics(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample as {(name, sorted labels): value}, via prometheus_client's own parser."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def sample(m: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
           **labels: str) -> float:
    return m[(name, tuple(sorted(labels.items())))]


def make_history(state_dir: Path) -> None:
    """Three real attempts: an allow with a drained job, a veto, one with a finding after resume."""
    with History.open(str(state_dir)) as h:
        first = h.begin("suspend", "unit", False, "digest", 1_700_000_000.0)
        h.finish(ended(first, "allow", holders=[
            KeptRecord.of(pid=4242, start_time=1, user="alice", unit="session-3.scope",
                              comm="train", command="python train.py", action="drain",
                              rule="holds a compute node", outcome=Outcome("exited", 0.61))],
                 finished=1_700_000_001.5))
        second = h.begin("suspend", "unit", False, "digest", 1_700_000_100.0)
        h.finish(ended(second, "veto",
                       reasons=["pid 77 infer ignores SIGINT: kill -2 cannot stop it"], holders=[
            KeptRecord.of(pid=77, start_time=2, user="bob", unit=None, comm="infer",
                              command="infer --serve", action="drain", rule="holds a compute node",
                              outcome=Outcome("not-signalled", why="ignores SIGINT"))],
                 finished=1_700_000_100.2))
        third = h.begin("hibernate", "unit", False, "digest", 1_700_000_200.0)
        h.finish(ended(third, "allow", finished=1_700_000_200.1))
        h.record_findings(third, [SimpleNamespace(
            rule="hwts-busy-suspend", severity="error", file="/var/log/npu/slog/device-0.log",
            line=12, time=datetime(2023, 11, 14, 22, 16), pid=0,
            text="suspend_ack: suspend pre check fail, hwts is busy")])
        dry = h.begin(None, "cli", True, "digest", 1_700_000_300.0)
        h.finish(ended(dry, "allow"))


# --- logind and systemd over a real bus -----------------------------------------------

@needs_dbus
def test_logind_inhibitors_and_veto_units_from_the_bus(conf: Path, fakes: Any) -> None:
    fakes(FAKE_STATE)
    code, out, err = status("--config", str(conf))
    assert code == 0, err
    lines = out.splitlines()
    # Not installed here: the first line says the next suspend is not guarded.
    assert lines[0].startswith("suspends are not guarded (the veto unit is not enabled")
    assert lines[1].startswith("verdict: ")
    logind = [line for line in lines if line.startswith("logind:")]
    assert logind == ["logind: CanSuspend yes, CanHibernate challenge, InhibitDelayMaxUSec 5 s, "
                      "PreparingForSleep no"]
    assert any("NetworkManager" in line and "delay" in line for line in lines)
    # the block lock on sleep held by someone else is a warning, the delay lock is not
    warned = [line for line in lines if line.startswith("  ! ") and "block lock" in line]
    assert len(warned) == 1 and "'backup.sh' (pid 4242, uid 1000)" in warned[0]
    assert "nightly backup running" in warned[0]
    unit = next(line for line in lines if "suspendguard@suspend.service" in line)
    assert unit.split()[1:3] == ["loaded", "enabled"] and "exit-code (status 1)" in unit
    gone = next(line for line in lines if "suspendguard@hybrid-sleep.service" in line)
    assert "not-found" in gone


@needs_dbus
def test_json_carries_logind_and_systemd(conf: Path, fakes: Any) -> None:
    fakes(FAKE_STATE)
    code, out, _ = status("--json", "--config", str(conf))
    assert code == 0
    data = json.loads(out)
    assert data["logind"]["available"] is True
    assert data["logind"]["can_suspend"] == "yes"
    assert [i["who"] for i in data["logind"]["inhibitors"]] == ["NetworkManager", "backup.sh"]
    assert [i["who"] for i in data["logind"]["sleep_blockers"]] == ["backup.sh"]
    assert data["logind"]["inhibit_delay_max_usec"] == 5_000_000
    assert data["logind"]["preparing_for_sleep"] is False
    units = data["systemd"]["units"]
    assert data["systemd"]["available"] is True
    assert units["suspendguard@suspend.service"]["result"] == "exit-code"
    assert units["suspendguard@suspend.service"]["unit_file_state"] == "enabled"
    assert units["suspendguard@suspend-then-hibernate.service"]["load_state"] == "not-found"


@needs_dbus
def test_the_bus_named_by_the_callers_environment_is_used(conf: Path, fakes: Any, bus: Any,
                                                          tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    fakes(FAKE_STATE)
    # This process's own environment points nowhere; the CLI's environ names the bus.
    monkeypatch.setenv("DBUS_SYSTEM_BUS_ADDRESS", f"unix:path={tmp_path / 'nowhere'}")
    out, err = io.StringIO(), io.StringIO()
    code = main(["status", "--json", "--config", str(conf)], out=out, err=err,
                environ={"DBUS_SYSTEM_BUS_ADDRESS": bus.address})
    assert code == 0
    data = json.loads(out.getvalue())
    assert data["logind"]["available"] is True and data["systemd"]["available"] is True


@needs_dbus
def test_logind_missing_from_a_live_bus_is_named(conf: Path, fakes: Any) -> None:
    fakes(FAKE_STATE, services=["systemd"])
    code, out, _ = status("--config", str(conf))
    assert code == 0
    line = next(line for line in out.splitlines() if line.startswith("logind:"))
    assert line.startswith("logind: unavailable: ") and "org.freedesktop.login1" in line
    assert "suspendguard@suspend.service" in out  # systemd still answered


def test_no_bus_at_all_is_an_answer(conf: Path, no_bus: str) -> None:
    code, out, err = status("--config", str(conf))
    assert code == 0, err
    assert err == ""
    lines = out.splitlines()
    logind = next(line for line in lines if line.startswith("logind:"))
    assert logind.startswith("logind: unavailable: no system bus at ")
    assert any(line.startswith("systemd: unavailable: ") for line in lines)
    code, out, _ = status("--json", "--config", str(conf))
    data = json.loads(out)
    assert code == 0
    assert data["logind"]["available"] is False and "no system bus" in data["logind"]["reason"]
    assert data["systemd"]["available"] is False


# --- the dry-run part: accelerators, holders, verdict ---------------------------------------

def test_json_keys_and_holders(conf: Path, node: str, holders: Holders, no_bus: str) -> None:
    _, pid = holders.start(node)
    code, out, _ = status("--json", "--config", str(conf))
    assert code == 0
    data = json.loads(out)
    assert set(data) >= TOP_KEYS
    assert data["verdict"]["verdict"] == "allow" and data["verdict"]["exit_status"] == 0
    assert {"reasons", "warnings"} <= set(data["verdict"])
    assert [n["path"] for n in data["accelerators"]["nodes"]] == [node]
    assert "idle" in data["accelerators"]
    [h] = [h for h in data["holders"] if h["pid"] == pid]
    assert h["action"] == "drain" and h["sigint"] == "caught"
    assert h["outcome"]["kind"] == "would-signal"
    assert {"pid", "user", "action", "sigint", "notes", "rule", "cmdline"} <= set(h)
    assert set(data["installation"]) >= {"installed", "unit", "instances", "hook", "state_dir"}
    assert data["installation"]["state_dir"]["path"] == str(conf.parent / "state")
    assert set(data["config"]) >= {"path", "valid", "error"}
    assert data["config"] == {"path": str(conf), "valid": True, "error": None, "loaded": True}
    assert set(data["history"]) >= {"attempts", "counts", "findings"}
    assert holders.signals() == []  # a dry run: nobody was signalled


def test_human_output_shows_holders_and_sends_nothing(conf: Path, node: str, holders: Holders,
                                                       no_bus: str) -> None:
    _, pid = holders.start(node, mode="deaf")
    code, out, _ = status("--config", str(conf))
    assert code == 0  # a veto now is reported, not returned
    lines = out.splitlines()
    assert lines[0].endswith("the guard would say veto now")
    assert lines[1].startswith("verdict: VETO")
    assert any("kill -2 cannot stop it" in line for line in lines[2:5])
    assert "\033[" not in out  # not a terminal: no colour
    # (other processes on this machine may hold rdev 1:7 too: find ours by pid)
    head = next(i for i, line in enumerate(lines) if line.startswith("holders now: "))
    header = lines[head + 1].split()
    assert header == ["PID", "USER", "ACTION", "SIGINT", "OUTCOME", "COMMAND"]  # as check's
    row = next(line.split() for line in lines[head + 2:] if line.split()[:1] == [str(pid)])
    assert row[2:4] == ["drain", "ignored"]
    # Each distinct rule once, with its pids.
    rules = lines.index("  rules:", head)
    assert any(line.startswith("    holds a compute node: pid ") and str(pid) in line
               for line in lines[rules:])
    # sections in the order of importance
    order = [next(i for i, line in enumerate(lines) if line.startswith(word))
             for word in ("verdict:", "accelerators:", "holders now:", "installation:",
                          "logind:", "systemd:", "history:")]
    assert order == sorted(order)
    assert holders.signals() == []


def test_colour_only_on_a_terminal_and_never_with_no_color(conf: Path, no_bus: str) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    for env, coloured in (({}, True), ({"NO_COLOR": "1"}, False)):
        out = Tty()
        code = main(["status", "--config", str(conf)], out=out, err=io.StringIO(),
                    environ={"DBUS_SYSTEM_BUS_ADDRESS": os.environ["DBUS_SYSTEM_BUS_ADDRESS"],
                             **env})
        assert code == 0
        assert ("\033[32m" in out.getvalue()) is coloured


def test_status_writes_nothing(conf: Path, no_bus: str) -> None:
    code, out, _ = status("--config", str(conf))
    assert code == 0
    assert not (conf.parent / "state").exists()  # no history made, no folder created
    assert "state dir: " in out and "absent" in out
    assert "history: no history yet" in out


def test_a_state_dir_that_is_a_file_is_not_called_absent(conf: Path, no_bus: str) -> None:
    # Nothing can create the folder there: "absent (created by ... the first recorded
    # attempt)" would be false.
    (conf.parent / "state").write_text("")
    code, out, _ = status("--config", str(conf))
    assert code == 0
    [line] = [x for x in out.splitlines() if "state dir: " in x]
    assert "not a directory" in line and "absent" not in line


# --- history --------------------------------------------------------------------------------

def test_history_last_attempts_counts_and_findings(conf: Path, no_bus: str) -> None:
    make_history(conf.parent / "state")
    code, out, _ = status("--config", str(conf))
    assert code == 0
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("history:"))
    assert lines[head] == "history: 3 attempt(s): allow 2, veto 1; the last 3:"
    rows = [line.split() for line in lines[head + 2:head + 5]]
    assert [r[0] for r in rows] == ["3", "2", "1"]  # newest first, the dry run left out
    assert rows[0][3] in ("UTC",) or rows[0][3].startswith(("+", "-"))  # times with their zone
    assert rows[0][4:6] == ["hibernate", "allow"]
    assert rows[1][5] == "veto"
    assert rows[2][6:8] == ["1.5", "1/1"]
    # Fitted to 80 columns (no terminal, no COLUMNS): the long reason cut with an ellipsis...
    assert all(len(line) <= 80 for line in lines[head + 1:head + 5])
    assert lines[head + 3].endswith("…") and "ignores SIGINT" not in lines[head + 3]
    # ...and whole with --wide, or in a wider terminal.
    for argv, env in ((["--wide"], {}), ([], {"COLUMNS": "300"})):
        _, wide, _ = status(*argv, "--config", str(conf), env=env)
        row = next(line for line in wide.splitlines() if line.startswith("  2   "))
        assert row.endswith("ignores SIGINT: kill -2 cannot stop it"), row
    # Where the cut reasons are read whole: a command that works as printed.
    assert lines[head + 5] == f"  the last whole: suspendguard --config {conf} history 3"
    whole = io.StringIO()
    assert main(lines[head + 5].split()[4:], out=whole, err=io.StringIO(), environ={}) == 0
    assert whole.getvalue().startswith("attempt 3: hibernate, ")
    assert "  #1 jobs: 4242 train exited" in lines
    assert "  #2 jobs: 77 infer not-signalled" in lines
    assert "  #3 after resume: hwts-busy-suspend" in lines
    assert "  findings after resume: hwts-busy-suspend 1" in lines

    code, out, _ = status("--json", "--config", str(conf))
    history = json.loads(out)["history"]
    assert history["available"] is True
    assert history["counts"] == {"allow": 2, "veto": 1}
    assert history["findings"] == {"hwts-busy-suspend": 1}
    assert [a["id"] for a in history["attempts"]] == [3, 2, 1]
    assert history["attempts"][2]["holders"][0]["outcome"]["kind"] == "exited"
    assert history["attempts"][2]["duration_s"] == 1.5
    assert history["attempts"][0]["findings"][0]["rule"] == "hwts-busy-suspend"


# --- Prometheus ---------------------------------------------------------------------------

@needs_dbus
def test_prometheus_parses_and_carries_every_part(conf: Path, node: str, holders: Holders,
                                                  fakes: Any) -> None:
    fakes(FAKE_STATE)
    make_history(conf.parent / "state")
    holders.start(node)
    holders.start(node, mode="deaf")
    code, out, err = status("--prometheus", "--config", str(conf))
    assert code == 0, err
    families = {f.name: f for f in text_string_to_metric_families(out)}
    assert all(name.startswith("suspendguard_") for name in families)
    assert families["suspendguard_attempts"].type == "counter"
    assert families["suspendguard_findings"].type == "counter"
    assert families["suspendguard_holders"].type == "gauge"
    assert all(f.documentation for f in families.values())  # a HELP line each
    m = metrics(out)
    assert sample(m, "suspendguard_up") == 1
    assert sample(m, "suspendguard_verdict", verdict="veto") == 1
    assert sample(m, "suspendguard_verdict", verdict="allow") == 0
    assert sample(m, "suspendguard_holders", action="drain") >= 2  # others may hold 1:7 too
    assert sample(m, "suspendguard_holders", action="protect") == 0
    assert sample(m, "suspendguard_holders_sigint", disposition="ignored") >= 1
    # The veto's code as a label: the deaf holder ignores SIGINT.
    assert sample(m, "suspendguard_verdict_reason", code="sigint-ignored") >= 1
    by_code = [v for (name, _labels), v in m.items() if name == "suspendguard_verdict_reason"]
    assert sum(by_code) == sample(m, "suspendguard_verdict_reasons")  # each reason once
    assert sample(m, "suspendguard_device_nodes", family="extra", role="compute") == 1
    assert sample(m, "suspendguard_attempts_total", verdict="allow") == 2
    assert sample(m, "suspendguard_attempts_total", verdict="veto") == 1
    assert sample(m, "suspendguard_attempts_total", verdict="interrupted") == 0
    assert sample(m, "suspendguard_findings_total", rule="hwts-busy-suspend") == 1
    assert sample(m, "suspendguard_last_attempt_timestamp_seconds") == 1_700_000_200.0
    assert sample(m, "suspendguard_last_attempt_verdict", verdict="allow") == 1
    assert sample(m, "suspendguard_last_attempt_verdict", verdict="veto") == 0
    assert sample(m, "suspendguard_logind_available") == 1
    assert sample(m, "suspendguard_logind_can_suspend", answer="yes") == 1
    assert sample(m, "suspendguard_logind_can_hibernate", answer="challenge") == 1
    assert sample(m, "suspendguard_logind_inhibitors", what="sleep", mode="delay") == 1
    assert sample(m, "suspendguard_logind_inhibitors", what="sleep", mode="block") == 1
    assert sample(m, "suspendguard_logind_sleep_blockers") == 1
    assert sample(m, "suspendguard_logind_inhibit_delay_max_seconds") == 5
    assert sample(m, "suspendguard_systemd_available") == 1
    unit = {"unit": "suspendguard@suspend.service", "action": "suspend"}
    assert sample(m, "suspendguard_veto_unit_failed", **unit) == 1
    assert sample(m, "suspendguard_veto_unit_result", result="exit-code", **unit) == 1
    assert sample(m, "suspendguard_installed") in (0, 1)
    assert sample(m, "suspendguard_unit_enabled", action="suspend") in (0, 1)
    assert sample(m, "suspendguard_config_valid") == 1
    assert sample(m, "suspendguard_suspend_refused") == 0
    assert sample(m, "suspendguard_mode", mode="enforce") == 1
    assert sample(m, "suspendguard_mode", mode="off") == 0
    # One series per documented state, whatever the answer: a state appearing only when it
    # holds reads to an alert as "absent" before.
    assert {labels[0][1] for name, labels in m if name == "suspendguard_idle_state"} == {
        "idle", "busy", "unknown", "none", "skipped"}
    for part in ("config", "accelerators", "installation", "logind", "systemd", "history"):
        assert sample(m, "suspendguard_status_part_available", part=part) == 1


def test_prometheus_without_bus_or_history(conf: Path, no_bus: str) -> None:
    code, out, _ = status("--prometheus", "--config", str(conf))
    assert code == 0
    m = metrics(out)
    assert sample(m, "suspendguard_up") == 1
    assert sample(m, "suspendguard_logind_available") == 0
    assert sample(m, "suspendguard_systemd_available") == 0
    assert sample(m, "suspendguard_status_part_available", part="logind") == 0
    assert sample(m, "suspendguard_status_part_available", part="history") == 0
    assert sample(m, "suspendguard_attempts_total", verdict="veto") == 0
    assert not any(name == "suspendguard_last_attempt_timestamp_seconds" for name, _ in m)


def test_a_history_that_cannot_be_read_leaves_its_counters_out(conf: Path, tmp_path: Path,
                                                                no_bus: str) -> None:
    # A 0 for one scrape would read as a counter reset: the next scrape's whole history
    # as new attempts, and alerts on new vetoes firing for nothing.
    (tmp_path / "state" / "history.db").mkdir(parents=True)  # there, and no database
    code, out, _ = status("--prometheus", "--config", str(conf))
    assert code == 0
    m = metrics(out)
    assert sample(m, "suspendguard_status_part_available", part="history") == 0
    assert not any(name.startswith("suspendguard_attempts") for name, _ in m)
    assert not any(name.startswith("suspendguard_findings") for name, _ in m)


def test_prometheus_escapes_label_values() -> None:
    from suspendguard.status.prometheus import Metrics, render

    m = Metrics()
    m.gauge("suspendguard_test_info", 'help with \\ and\nnewline').add(
        1, why='a "quoted" \\ back\nslash')
    [family] = text_string_to_metric_families(render(m))
    assert family.documentation == 'help with \\ and\nnewline'
    assert family.samples[0].labels == {"why": 'a "quoted" \\ back\nslash'}


def test_prometheus_family_refuses_samples_with_other_labels() -> None:
    # A family's samples share one set of label names, or the exposition
    # would be one that Prometheus rejects: that fails here, not in a scrape.
    from suspendguard.status.prometheus import Metrics, render

    m = Metrics()
    m.gauge("suspendguard_test", "test").add(1, action="suspend").add(0, unit="x.service")
    with pytest.raises(ValueError, match="suspendguard_test: labels"):
        render(m)


# --- configuration ----------------------------------------------------------------------

def test_invalid_config_still_gives_a_report(tmp_path: Path, no_bus: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[drain]\ntimeout_s = -3\n")
    code, out, err = status("--config", str(bad))
    assert code == 0 and err == ""
    lines = out.splitlines()
    # What the unit would do with this file comes first: it would refuse every
    # suspend, once there is a unit to run it.
    refusal = ("every suspend will be refused: the config is invalid: [drain] timeout_s "
               "(line 2): expected a number > 0 and at most 86400, got -3")
    assert lines[0] == ("suspends are not guarded (the veto unit is not enabled: suspendguard "
                        f"install); once it is, {refusal}")
    assert lines[1].startswith("verdict: UNKNOWN (what check --dry-run gives now)")
    line = next(line for line in lines if line.startswith("  config: "))
    assert line.startswith(f"  config: {bad}: invalid: [drain] timeout_s") and "timeout_s" in line
    assert out.count(str(bad)) == 1  # the path once, not twice
    code, out, _ = status("--json", "--config", str(bad))
    data = json.loads(out)
    assert code == 0
    assert data["verdict"]["verdict"] == "unknown" and data["verdict"]["exit_status"] == 5
    assert data["verdict"]["next_suspend"] == lines[0]
    assert data["config"]["valid"] is False and data["config"]["path"] == str(bad)
    assert "timeout_s" in data["config"]["error"]
    assert "\n" not in data["config"]["error"]

    code, out, _ = status("--prometheus", "--config", str(bad))
    assert code == 0 and sample(metrics(out), "suspendguard_config_valid") == 0
    # No unit runs the guard here: nothing is refused yet, whatever the first line warns.
    assert sample(metrics(out), "suspendguard_suspend_refused") == 0
    # Every verdict series tells the one verdict, as the JSON does.
    m = metrics(out)
    assert sample(m, "suspendguard_verdict", verdict="unknown") == 1
    assert sample(m, "suspendguard_verdict_reasons") == len(data["verdict"]["reasons"]) == 1
    assert sample(m, "suspendguard_verdict_reason", code="setup-refused") == 1
    # With the unit enabled, the refusal leads as it stands in enforce mode. Off and observe
    # let the suspend go unguarded (pre-sleep reads the mode in the unit's own folder).
    from suspendguard.config import defaults
    from suspendguard.status import collect as collecting
    from suspendguard.status.collect import collect
    from suspendguard.status.prometheus import exposition
    from suspendguard.store import mode

    # An invalid file means the built-in state folder: this one stands in for
    # the host's, which a test never writes.
    state = replace(defaults().state, dir=str(tmp_path / "state"))
    monkeypatch.setattr(collecting, "defaults", lambda: replace(defaults(), state=state))
    stage = staged(tmp_path)
    s = collect(str(bad), {"DBUS_SYSTEM_BUS_ADDRESS": no_bus}, root=str(stage))
    assert s.state_dir.path == state.dir
    assert s.mode.name == "enforce" and s.next_suspend() == refusal
    assert s.refused_now() == refusal.removeprefix("every suspend will be refused: ")
    once = refusal.replace("every suspend", "once enforced, every suspend")
    for name, line in (("off", "suspends are not guarded: the guard is off (suspendguard mode "
                               f"enforce); {once}"),
                       ("observe", "observe mode: the next suspend goes ahead whatever the guard "
                                   f"finds (suspendguard mode enforce); {once}")):
        mode.write(s.state_dir.path, name)
        s = collect(str(bad), {"DBUS_SYSTEM_BUS_ADDRESS": no_bus}, root=str(stage))
        assert s.mode.name == name and s.next_suspend() == line
        assert s.refused_now() is None
        assert sample(metrics(exposition(s)), "suspendguard_suspend_refused") == 0


def test_missing_explicit_config_is_invalid_not_fatal(tmp_path: Path, no_bus: str) -> None:
    code, out, _ = status("--json", "--config", str(tmp_path / "nope.toml"))
    data = json.loads(out)
    assert code == 0
    assert data["config"]["valid"] is False and "not found" in data["config"]["error"]


def test_missing_unit_interpreter_leads_status(conf: Path, tmp_path: Path, no_bus: str) -> None:
    from dataclasses import replace

    from suspendguard.install.interpreter import probe
    from suspendguard.status.collect import collect
    from suspendguard.status.text import render

    stage = staged(tmp_path)
    s = collect(str(conf), {"DBUS_SYSTEM_BUS_ADDRESS": no_bus}, root=str(stage))
    assert s.installation.refusal() is None and s.installation.installed
    # The venv the unit names was deleted: probed for real, as status does on "/".
    gone = str(tmp_path / "venv" / "bin" / "python")
    unit = s.installation.unit
    assert unit is not None
    s = replace(s, installation=replace(s.installation,
                                        unit=replace(unit, interpreter=probe(gone))))
    out = io.StringIO()
    render(s, out)
    lines = out.getvalue().splitlines()
    assert lines[0] == f"every suspend will be refused: the unit's interpreter {gone} is missing"
    assert lines[1].startswith("verdict: UNKNOWN")
    assert f"  interpreter: {gone}: is missing" in lines
    data = s.to_json()
    assert data["verdict"]["verdict"] == "unknown"
    assert data["installation"]["refusal"] == f"the unit's interpreter {gone} is missing"
    assert data["installation"]["unit"]["interpreter"]["usable"] is False


def test_a_masked_veto_unit_leads_status(conf: Path, tmp_path: Path, no_bus: str) -> None:
    """systemd fails a suspend that requires a unit it cannot load: not 'would go ahead'."""
    from suspendguard.status.collect import collect
    from suspendguard.status.text import render

    stage = staged(tmp_path)
    (stage / "etc/systemd/system/suspendguard@suspend.service").symlink_to("/dev/null")
    s = collect(str(conf), {"DBUS_SYSTEM_BUS_ADDRESS": no_bus}, root=str(stage))
    out = io.StringIO()
    render(s, out)
    refusal = ("/etc/systemd/system/suspendguard@suspend.service masks "
               "suspendguard@suspend.service, which systemd-suspend.service requires: systemd "
               "fails the suspend (systemctl unmask suspendguard@suspend.service)")
    assert out.getvalue().splitlines()[0] == f"every suspend will be refused: {refusal}"
    assert s.to_json()["installation"]["refusal"] == refusal


# --- not root ---------------------------------------------------------------------------

def nobody_suspendguard(bus: str) -> tuple[list[str], dict[str, str]]:
    """The command line that runs this checkout's suspendguard as user nobody, and its env."""
    prefix = nobody_prefix()
    if prefix is None:
        pytest.skip("needs root and setpriv or runuser to run as nobody")
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "PYTHONPATH": os.pathsep.join([str(REPO), *paths]),
           "DBUS_SYSTEM_BUS_ADDRESS": bus, "HOME": "/nonexistent"}
    python = python_for_nobody(prefix, env)
    if python is None:
        pytest.skip("no python interpreter that user nobody can run imports suspendguard")
    return [*prefix, python, "-m", "suspendguard"], env

def test_non_root_run_reports_what_it_could_not_read(node: str, holders: Holders) -> None:
    with shared_with_nobody(node, holders, "sg-status-nobody-") as (folder, conf, _pid):
        (folder / "state").mkdir(mode=0o755)  # root's: readable, not writable, for nobody
        suspendguard, env = nobody_suspendguard(f"unix:path={folder / 'no-bus'}")
        proc = subprocess.run([*suspendguard, "status", "--json",
                               "--config", str(conf)],
                              env=env, capture_output=True, text=True, cwd="/", timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in proc.stderr
        data = json.loads(proc.stdout)
        assert data["euid"] != 0
        assert data["config"]["valid"] is True
        assert data["scan"]["as_root"] is False
        assert data["scan"]["unreadable"] > 0
        assert data["scan"]["note"].startswith(f"{data['scan']['unreadable']} processes could "
                                               "not be inspected (not root): pid ")
        # Root's holder is among those it could not see: the verdict is unknown, not allow.
        assert data["verdict"]["verdict"] == "unknown", data["verdict"]
        assert data["verdict"]["reasons"][0].startswith("run as root: ")
        assert data["installation"]["state_dir"]["writable"] is False
        assert data["logind"]["available"] is False

        human = subprocess.run([*suspendguard, "status",
                                "--config", str(conf)],
                               env=env, capture_output=True, text=True, cwd="/", timeout=120)
        assert human.returncode == 0, human.stderr
        assert "processes could not be inspected (not root)" in human.stdout
        assert human.stdout.splitlines()[0].startswith(
            "suspends are not guarded (the veto unit is not enabled: suspendguard install); "
            "the guard would say unknown now")
        assert "not writable by this user" in human.stdout


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare")
def test_other_users_processes_hidden_by_hidepid_leave_a_non_root_check_unknown(
        node: str, holders: Holders) -> None:
    # /proc mounted hidepid=invisible does not even list root's holder to
    # user nobody: nothing is unreadable, yet the check cannot know.
    with shared_with_nobody(node, holders, "sg-hidepid-") as (folder, conf, pid):
        suspendguard, env = nobody_suspendguard(f"unix:path={folder / 'no-bus'}")
        hiding = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                  'mount -t proc -o hidepid=invisible proc /proc && exec "$@"', "sh"]
        check = subprocess.run([*hiding, *suspendguard, "--config", str(conf), "check",
                                "--dry-run", "--json"],
                               env=env, capture_output=True, text=True, cwd="/", timeout=120)
        if check.stderr.startswith("mount:") and not check.stdout:
            pytest.skip(f"cannot mount a proc with hidepid here: {check.stderr.strip()}")
        report = json.loads(check.stdout)
        assert pid not in [h["pid"] for h in report["holders"]]
        assert report["verdict"] == "unknown", report
        [why] = report["reasons"]
        assert why == ("run as root: /proc is mounted with hidepid=invisible, which hides other "
                       "users' processes from this user (any of them may hold an accelerator "
                       "node)"), why
        assert holders.signals() == []


def test_a_mode_only_root_can_read_is_unknown_not_enforce(no_bus: str) -> None:
    folder = Path(tempfile.mkdtemp(prefix="sg-status-mode-"))
    try:
        folder.chmod(0o755)
        state = folder / "state"
        state.mkdir(mode=0o700)  # root's, as the guard keeps it
        (state / "mode").write_text("off\n")
        conf = folder / "config.toml"
        conf.write_text(f'[devices]\nfamilies = []\nnodes = []\n[state]\ndir = "{state}"\n'
                        '[idle]\nbackends = []\n')
        conf.chmod(0o644)
        suspendguard, env = nobody_suspendguard(no_bus)
        run = [*suspendguard, "status", "--config", str(conf)]
        data = json.loads(subprocess.run([*run, "--json"], env=env, capture_output=True,
                                         text=True, cwd="/", timeout=120, check=True).stdout)
        assert data["mode"] == {"mode": "unknown",
                                "problem": "only root can read the guard's mode "
                                           "(sudo suspendguard status)"}
        human = subprocess.run(run, env=env, capture_output=True, text=True, cwd="/",
                               timeout=120, check=True).stdout
        assert ("  mode: unknown (only root can read the guard's mode "
                "(sudo suspendguard status))") in human.splitlines()
        assert "enforc" not in human
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_an_unknown_mode_leads_status_as_unknown(conf: Path, tmp_path: Path,
                                                no_bus: str) -> None:
    from dataclasses import replace

    from suspendguard.status.collect import collect
    from suspendguard.store import mode

    stage = staged(tmp_path)
    s = collect(str(conf), {"DBUS_SYSTEM_BUS_ADDRESS": no_bus}, root=str(stage))
    assert s.next_suspend() == "the next suspend would go ahead now"
    s = replace(s, mode=mode.UNKNOWN)
    assert s.next_suspend() == ("the next suspend: unknown: only root can read the guard's "
                                "mode (sudo suspendguard status); the dry run says allow now")


def test_a_unit_enabled_for_hibernate_alone_leaves_suspend_unguarded(conf: Path, tmp_path: Path,
                                                                   no_bus: str) -> None:
    from suspendguard.status.collect import collect

    stage = staged(tmp_path)
    for by in ("systemd", "nvidia"):
        (stage / f"etc/systemd/system/{by}-suspend.service.requires/"
                  "suspendguard@suspend.service").unlink()
    s = collect(str(conf), {"DBUS_SYSTEM_BUS_ADDRESS": no_bus}, root=str(stage))
    assert "suspend" not in s.installation.enabled and "hibernate" in s.installation.enabled
    assert s.next_suspend() == (
        "suspends are not guarded (the veto unit is not enabled for suspend, only for "
        "hibernate, hybrid-sleep, suspend-then-hibernate: suspendguard install); the guard "
        "would say allow now")
    # A package's unit is enabled, not installed beside: install refuses there.
    packaged = stage / "usr/lib/systemd/system"
    packaged.mkdir(parents=True)
    (stage / "etc/systemd/system/suspendguard@.service").rename(packaged / "suspendguard@.service")
    s = collect(str(conf), {"DBUS_SYSTEM_BUS_ADDRESS": no_bus}, root=str(stage))
    assert ": systemctl enable suspendguard@suspend.service); " in s.next_suspend(), \
        s.next_suspend()


def test_no_backend_for_a_family_leads_status(conf: Path, tmp_path: Path, no_bus: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from helpers.nvidia import Checks, FakeNvidiaSmi

    from suspendguard.status.collect import collect
    from suspendguard.status.text import render
    from suspendguard.store import mode

    FakeNvidiaSmi(tmp_path, monkeypatch)
    env = {"DBUS_SYSTEM_BUS_ADDRESS": no_bus}
    stage = staged(tmp_path)
    lead = ("every suspend will be refused: no backend can answer for nvidia (install the "
            "NVIDIA driver's nvidia-smi, or nvidia-ml-py for NVML)")
    none = Checks(tool=str(tmp_path / "no-nvidia-smi"))
    s = collect(str(conf), env, idle_check=none, root=str(stage))
    out = io.StringIO()
    render(s, out)
    assert out.getvalue().splitlines()[0] == lead
    assert s.to_json()["verdict"]["next_suspend"] == lead
    assert s.refused_now() == lead.removeprefix("every suspend will be refused: ")
    # The verdict is the dry run's own veto, with its code; not a setup that cannot run.
    verdict = s.verdict()
    assert not isinstance(verdict, Unavailable)
    assert (verdict.kind, verdict.reasons[0].code) == ("veto", "device-unknown"), verdict
    # Nothing refuses where no unit runs the guard, or where its mode lets every suspend go.
    s = collect(str(conf), env, idle_check=none)
    assert s.next_suspend() == ("suspends are not guarded (the veto unit is not enabled: "
                                f"suspendguard install); once it is, {lead}")
    mode.write(s.state_dir.path, "observe")
    s = collect(str(conf), env, idle_check=none, root=str(stage))
    assert s.next_suspend().startswith("observe mode: the next suspend goes ahead"), s.next_suspend()
    assert s.refused_now() is None
    from suspendguard.status.prometheus import exposition

    m = metrics(exposition(s))
    assert sample(m, "suspendguard_mode", mode="observe") == 1
    assert sample(m, "suspendguard_mode", mode="enforce") == 0
    assert sample(m, "suspendguard_suspend_refused") == 0
    # With a backend that answers, status says what the next suspend gets.
    s = collect(str(conf), env, idle_check=Checks())
    assert s.no_backend() is None
    assert not s.next_suspend().startswith("every suspend will be refused"), s.next_suspend()
