"""``suspendguard mode``: enforce, observe, off, as the veto unit and the sleep hook honour them."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from helpers.holders import Holders
from helpers.users import nobody_prefix, python_for_nobody

from suspendguard.cli import main
from suspendguard.commands import BY_NAME
from suspendguard.errors import HistoryError
from suspendguard.store import mode as guard_mode
from suspendguard.store.history import History


def run_cli(conf: Path, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main([*argv, "--config", str(conf)], out=out, err=err, environ={"JOURNAL_STREAM": "8:1"})
    return code, out.getvalue(), err.getvalue()


def state(conf: Path) -> str:
    return str(conf.parent / "state")


def test_no_file_is_enforce_and_a_bad_file_enforces(tmp_path: Path) -> None:
    assert guard_mode.read(str(tmp_path)) == guard_mode.Mode("enforce")
    (tmp_path / "mode").write_text("of\n")
    bad = guard_mode.read(str(tmp_path))
    assert bad.name == "enforce" and bad.problem is not None and "'of' is not one of" in bad.problem
    (tmp_path / "mode").unlink()
    (tmp_path / "elsewhere").write_text("off\n")  # followed, it would turn the guard off
    (tmp_path / "mode").symlink_to(tmp_path / "elsewhere")
    linked = guard_mode.read(str(tmp_path))  # never followed: O_NOFOLLOW
    assert linked.name == "enforce" and linked.problem is not None, linked


def test_a_mode_that_is_no_file_enforces_and_never_waits(tmp_path: Path) -> None:
    (tmp_path / "mode").mkdir()
    assert guard_mode.read(str(tmp_path)) == guard_mode.Mode(
        "enforce", f"{tmp_path / 'mode'}: not a regular file: enforcing")
    (tmp_path / "mode").rmdir()
    os.mkfifo(tmp_path / "mode")  # nobody writes it: an open that waited would wait forever
    assert guard_mode.read(str(tmp_path)) == guard_mode.Mode(
        "enforce", f"{tmp_path / 'mode'}: not a regular file: enforcing")


@pytest.mark.skipif(os.geteuid() != 0, reason="switching the mode needs root")
def test_a_switch_that_fails_names_the_mode_file_and_leaves_nothing_behind(conf: Path) -> None:
    mode = Path(state(conf), "mode")
    mode.mkdir(parents=True)
    code, out, err = run_cli(conf, "mode", "off")
    assert (code, out, err) == (3, "", f"suspendguard: mode off: {mode}: Is a directory\n")
    assert os.listdir(state(conf)) == ["mode"]
    code, out, err = run_cli(conf, "mode")
    assert (code, err) == (0, f"suspendguard: {mode}: not a regular file: enforcing\n")


@pytest.mark.skipif(os.geteuid() != 0, reason="switching the mode needs root")
def test_switch_and_show(conf: Path) -> None:
    assert run_cli(conf, "mode")[1].startswith("enforce: ")
    code, out, _ = run_cli(conf, "mode", "observe")
    assert code == 0 and out.startswith("observe: ")
    assert Path(state(conf), "mode").read_text() == "observe\n"
    assert run_cli(conf, "mode")[1].startswith("observe: ")
    assert run_cli(conf, "mode", "enforce")[0] == 0
    assert not Path(state(conf), "mode").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="switching the mode needs root")
def test_switching_makes_the_state_folder_0700(conf: Path) -> None:
    # docs/configuration.md: [state] dir is kept 0700, whoever makes it first.
    assert not Path(state(conf)).exists()
    assert run_cli(conf, "mode", "off")[0] == 0
    assert Path(state(conf)).stat().st_mode & 0o777 == 0o700


@pytest.mark.skipif(os.geteuid() != 0, reason="switching the mode needs root")
def test_a_file_where_the_state_folder_should_be_is_named_so(conf: Path) -> None:
    Path(state(conf)).write_text("")
    code, out, err = run_cli(conf, "mode", "observe")
    assert (code, out) == (3, "")
    assert err == f"suspendguard: mode observe: {state(conf)}: not a directory\n"
    with pytest.raises(HistoryError, match=r"state folder .*: not a directory$"):
        History.open(state(conf))


def test_unknown_mode_is_a_usage_error(conf: Path) -> None:
    code, _, err = run_cli(conf, "mode", "sometimes")
    assert code == 2 and "invalid choice: 'sometimes'" in err


@pytest.mark.skipif(os.geteuid() != 0, reason="switching the mode needs root")
def test_observe_signals_nobody_allows_and_records(conf: Path, node: str, holders: Holders) -> None:
    proc, _pid = holders.start(node)
    assert run_cli(conf, "mode", "observe")[0] == 0
    code, _, err = run_cli(conf, "pre-sleep", "suspend")
    assert code == 0  # the suspend goes on
    assert holders.signals() == [] and proc.poll() is None
    assert "observe mode" in err
    with History.open(state(conf), readonly=True) as h:
        [attempt] = h.attempts(1)
    assert attempt.origin == "unit" and attempt.dry_run
    # The same holder, enforced, is drained.
    assert run_cli(conf, "mode", "enforce")[0] == 0
    code, _, _ = run_cli(conf, "pre-sleep", "suspend")
    assert code == 0 and proc.wait(timeout=10) == 0
    assert len(holders.signals()) == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="switching the mode needs root")
def test_off_lets_a_deaf_holder_through_and_the_hook_does_not_drain(conf: Path, node: str,
                                                                    holders: Holders) -> None:
    proc, _pid = holders.start(node, mode="deaf")
    assert run_cli(conf, "mode", "off")[0] == 0
    code, _, err = run_cli(conf, "pre-sleep", "suspend")
    assert code == 0 and "the guard is off" in err
    code, _, err = run_cli(conf, "sleep-hook", "pre", "suspend")
    assert code == 0 and "nothing was drained" in err
    assert holders.signals() == [] and proc.poll() is None
    code, out, _ = run_cli(conf, "status")
    assert "the guard is off" in out.splitlines()[0]
    assert "mode: off" in out
    # check gives the verdict enforce mode would, and says that is not what a suspend meets.
    code, out, _ = run_cli(conf, "check")
    assert code == 1 and "VETO" in out
    assert out.endswith("\nthe guard's mode is off (suspendguard mode): a suspend goes ahead "
                        "without a look; the verdict above is enforce mode's\n"), out
    code, out, _ = run_cli(conf, "check", "--json")
    assert json.loads(out)["verdict"] == "veto"  # the JSON is the verdict's alone
    assert run_cli(conf, "mode", "enforce")[0] == 0
    assert "the guard's mode is" not in run_cli(conf, "check")[1]


@pytest.mark.skipif(os.geteuid() == 0, reason="root may switch")
def test_not_root_cannot_switch(conf: Path) -> None:
    code, _, err = run_cli(conf, "mode", "off")
    assert code == 3 and "only root" in err



@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to set the mode, then nobody to show it")
def test_a_user_who_cannot_read_the_mode_is_never_told_enforce() -> None:
    prefix = nobody_prefix()
    if prefix is None or python_for_nobody(prefix, dict(os.environ)) != sys.executable:
        pytest.skip("user nobody cannot run this interpreter")
    # A folder others can traverse (pytest's tmp_path is 0700), the config readable by all.
    top = Path(tempfile.mkdtemp(prefix="suspendguard-mode-", dir="/tmp"))
    try:
        top.chmod(0o755)
        conf = top / "config.toml"
        conf.write_text(f'[state]\ndir = "{top / "state"}"\n')
        conf.chmod(0o644)
        assert run_cli(conf, "mode", "off")[0] == 0  # the state folder: root's, 0700
        done = subprocess.run([*prefix, sys.executable, "-m", "suspendguard", "mode", "--config",
                               str(conf)], capture_output=True, text=True, timeout=60, cwd="/")
        assert (done.returncode, done.stdout) == (3, ""), done.stderr
        assert done.stderr == (f"suspendguard: mode: {top}/state/mode: permission denied: only "
                               "root can read the guard's mode (sudo suspendguard mode)\n")
        assert run_cli(conf, "mode")[1].startswith("off: ")  # as root, what the guard reads
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_mode_documents_the_status_it_gives_a_config_it_cannot_load() -> None:
    # The off switch works while the configuration cannot be loaded: never 2 or 4 for it.
    exits = dict(BY_NAME["mode"].exits)
    assert sorted(exits) == [0, 2, 3]
    assert "configuration" not in exits[2]
    assert "missing, invalid or untrusted" in exits[0]


@pytest.mark.skipif(os.geteuid() != 0, reason="only root refuses an untrusted configuration")
def test_an_untrusted_config_switches_the_unit_folders_mode_as_documented(
        conf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    unit_dir = tmp_path / "unit-state"
    monkeypatch.setattr(guard_mode, "UNIT_STATE_DIR", str(unit_dir))
    # Any user may change it, root acts on none of it; its name is shown escaped.
    untrusted = tmp_path / "config\x1b[2J.toml"
    untrusted.write_text(conf.read_text())
    untrusted.chmod(0o666)
    documented = dict(BY_NAME["mode"].exits)
    code, out, err = run_cli(untrusted, "mode", "off")
    assert code in documented and "untrusted" in documented[code], (code, err)
    assert out.startswith("off: ") and err.count("\n") == 1 and "\x1b" not in err, err
    assert "config\\e[2J.toml" in err, err
    assert err.startswith("suspendguard: refusing an untrusted configuration: "), err
    assert err.endswith(f"; the mode is {unit_dir}'s, which the veto unit reads until the "
                        "configuration loads again\n"), err
    assert (unit_dir / "mode").read_text() == "off\n"
    assert not Path(state(conf)).exists()  # the folder it names is not root's to write
    code, out, _ = run_cli(untrusted, "mode")
    assert code in documented and out.startswith("off: ")


def test_a_config_error_it_reports_is_one_line_without_control_characters(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(guard_mode, "UNIT_STATE_DIR", str(tmp_path / "unit-state"))
    conf = tmp_path / "config.toml"
    conf.write_text('[drain]\n"x\\u001b[2J\\nforged line" = 1\n')
    code, out, err = run_cli(conf, "mode")
    assert (code, out.split(":")[0]) == (0, "enforce"), err
    assert err.count("\n") == 1 and "\x1b" not in err, err
    assert f"{conf}: [drain] x\\e[2J\\nforged line: unknown key" in err, err
