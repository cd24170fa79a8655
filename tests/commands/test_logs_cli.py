"""``suspendguard logs`` in-process, and the after-resume check."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest
from helpers import FIXTURES as ALL_FIXTURES
from helpers import REPO
from helpers.records import ended
from helpers.runners import cli

from suspendguard.commands import logs as logs_command
from suspendguard.config import build
from suspendguard.logs.after import after_attempt
from suspendguard.logs.finding import Finding
from suspendguard.record import Attempt
from suspendguard.system.terminal import when

FIXTURES = ALL_FIXTURES / "ascend-logs"


def test_human_output_groups_by_rule() -> None:
    code, out, err = run(str(FIXTURES))
    assert code == 1, err
    assert "hwts-busy-suspend (error): 2 line(s), first 2023-01-01 02:53:45" in out
    assert "kill -2" in out
    assert "known-failures.log:" in out
    assert "pids: 18401" in out
    assert out.index("hwts-busy-suspend") < out.index("event-id-exhausted")


def test_times_carry_their_zone() -> None:
    """The device's times (local) in the form every command shows a time: with the zone."""
    code, out, err = run(str(FIXTURES), "--since", "2023-01-01T02:53:45")
    assert code == 1, err
    at = when(datetime(2023, 1, 1, 2, 53, 45).timestamp())
    assert out.splitlines()[0].endswith(f" bytes, since {at}."), out
    assert f"\nhwts-busy-suspend (error): 2 line(s), first {at}, last {at}\n" in out


def test_json_output() -> None:
    code, out, _ = run(str(FIXTURES / "known-failures.log"), "--json")
    assert code == 1
    doc = json.loads(out)
    assert set(doc) >= {"findings", "files_read", "bytes_read", "skipped"}
    assert doc["files_read"] == 1
    first = doc["findings"][0]
    assert set(first) == {"rule", "severity", "file", "line", "time", "pid", "text", "unit",
                          "outside_attempt", "code"}
    assert (first["rule"], first["line"], first["pid"]) == ("event-id-exhausted", 1, 18401)
    assert (first["unit"], first["outside_attempt"]) == (None, None)
    assert doc["journals"] == [] and doc["attempt_started"] is None
    assert first["time"] == "2023-05-29T17:53:11.569787"


def test_the_keys_of_a_json_finding_are_the_documented_ones() -> None:
    """docs/commands.md lists a finding's keys in ``logs --json``: every key the output
    has, ``described`` of a failure that names itself with a code not in the table too."""
    code, out, _ = run(str(FIXTURES / "framework-formats.log"), "--json")
    assert code == 1
    keys = {key for finding in json.loads(out)["findings"] for key in finding}
    assert "described" in keys
    page = (REPO / "docs" / "commands.md").read_text(encoding="utf-8")
    listed = re.search(r'JSON \(`--json`\): `\{"findings": \[\{([^}]*)\}', page)
    assert listed is not None
    assert keys == set(re.findall(r'"(\w+)"', listed.group(1)))


def test_since_until_and_no_findings(tmp_path: Path) -> None:
    known = str(FIXTURES / "known-failures.log")
    code, out, _ = run(known, "--since", "2023-01-01T02:53:45.850800", "--json")
    assert code == 1
    # The file's mtime is the checkout's: files are read, only lines are filtered.
    rules = [(f["rule"], f["line"]) for f in json.loads(out)["findings"]]
    assert ("hwts-busy-suspend", 6) in rules and ("hwts-busy-suspend", 5) not in rules
    code, out, _ = run(str(FIXTURES), "--until", "2000-01-01T00:00:00")
    assert code == 0 and "No documented failure found." in out
    (tmp_path / "empty.log").write_text("")
    code, out, _ = run(str(tmp_path))
    assert code == 0 and "Read 1 file(s), 0 bytes." in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--since", "yesterday"], "--since 'yesterday': expected an ISO 8601 time"),
        (["--until", "last-attempt"], "--until 'last-attempt': expected an ISO 8601 time"),
        (["--since", "2026-11-29T00:00:00", "--until", "2026-11-28"], "is before --since"),
        # At the calendar's ends a time has no timestamp to compare: never a traceback.
        (["--since", "0001-01-01"], "--since '0001-01-01': out of range"),
        (["--since", "9999-12-31T23:59:59-14:00"], "out of range"),
        (["--until", "0001-01-01"], "--until '0001-01-01': out of range"),
    ],
)
def test_bad_times_are_usage_errors(argv: list[str], message: str) -> None:
    code, out, err = run(str(FIXTURES), *argv)
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1


def test_timezone_aware_times_become_local() -> None:
    code, _, _ = run(str(FIXTURES), "--since", "2023-01-01T00:00:00Z")
    assert code == 1


def test_last_attempt(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f'[state]\ndir = "{tmp_path}"\n')
    seen: list[str] = []

    def last_slept(state_dir: str) -> Attempt | None:
        seen.append(state_dir)
        return None

    monkeypatch.setattr(logs_command, "last_slept", last_slept)
    code, _, err = run("--config", str(config), str(FIXTURES), "--since", "last-attempt")
    assert code == 2 and "no recorded attempt" in err and seen == [str(tmp_path)]

    started = datetime(2023, 1, 1, 2, 53, 45, 850800).timestamp()
    monkeypatch.setattr(logs_command, "last_slept", lambda d: replace(ended(1), started=started))
    known = str(FIXTURES / "known-failures.log")
    code, out, _ = run("--config", str(config), known, "--since", "last-attempt", "--json")
    assert code == 1
    # Lines 4 and 5 are stamped 19 us before the attempt's start: read, as the
    # after-resume check reads them ([logs] clock_slack_s), and marked.
    doc = json.loads(out)
    assert [f["line"] for f in doc["findings"]] == [1, 2, 3, 4, 5, 6]
    assert [f["outside_attempt"] for f in doc["findings"]][2:5] == [
        None, {"side": "before", "by_s": 0.000019}, {"side": "before", "by_s": 0.000019}]
    assert doc["attempt_started"] == "2023-01-01T02:53:45.850800"
    assert doc["since"] == "2023-01-01T02:53:40.850800"


def test_last_attempt_with_an_unreadable_history_says_so(tmp_path: Path) -> None:
    # A damaged history is not "no recorded attempt": its reason, exit status 3.
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "history.db").write_bytes(b"not a database" * 512)
    config = tmp_path / "config.toml"
    config.write_text(f'[state]\ndir = "{state}"\n')
    code, out, err = run("--config", str(config), str(FIXTURES), "--since", "last-attempt")
    assert code == 3 and out == "" and err.count("\n") == 1, err
    assert "--since last-attempt: cannot read" in err and str(state / "history.db") in err
    assert "no recorded attempt" not in err


def test_default_paths_from_config(tmp_path: Path) -> None:
    logs = tmp_path / "proc-logs" / "debug" / "plog"
    logs.mkdir(parents=True)
    shutil.copy(FIXTURES / "known-failures.log", logs / "plog-1.log")
    config = tmp_path / "config.toml"
    config.write_text('[logs]\npaths = ["$ASCEND_PROCESS_LOG_PATH/**"]\nmax_bytes = 200\n')
    code, out, _ = run(
        "--config", str(config), "--json",
        environ={"ASCEND_PROCESS_LOG_PATH": str(tmp_path / "proc-logs")},
    )
    doc = json.loads(out)
    assert code == 1 and doc["files_read"] == 1
    assert doc["bytes_read"] == 200  # [logs] max_bytes
    assert any("only the last 200" in s["reason"] for s in doc["skipped"])


def test_after_attempt_journal_lines(tmp_path: Path) -> None:
    home = tmp_path / "alice"
    plog = home / "ascend" / "log" / "debug" / "device-0"
    plog.mkdir(parents=True)
    shutil.copy(FIXTURES / "known-failures.log", plog / "device-1_2023.log")
    config = build({"logs": {"paths": ["~/ascend/log/**"]}})
    result = after_attempt(config, datetime(2023, 1, 1, 0, 0, 0), homes=[str(home)])
    assert {f.rule for f in result.findings} == {
        "hwts-busy-suspend", "stream-unbind-running", "event-id-exhausted"}
    lines = result.journal_lines(42)
    assert lines[0] == (
        "suspend attempt 42: device reported 'hwts is busy' (hwts-busy-suspend): "
        "AI processes were still running on the NPU"
    )
    assert len(lines) == 3
    later = after_attempt(config, datetime(2024, 1, 1), homes=[str(home)])
    assert later.journal_lines(43) == [] or later.findings == ()


def test_finding_to_json_and_frozen() -> None:
    f = Finding("hwts-busy-suspend", "error", "/x.log", 3, None, None, "text")
    assert f.to_json()["time"] is None
    with pytest.raises(AttributeError):
        f.rule = "other"  # type: ignore[misc]


def run(*argv: str, environ: dict[str, str] | None = None) -> tuple[int, str, str]:
    return cli("logs", *argv, environ=environ)
