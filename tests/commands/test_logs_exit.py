"""``suspendguard logs`` exit statuses, as grep's: 0 nothing found, 1 findings, 2 a PATH not read."""

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
from helpers import FIXTURES as ALL_FIXTURES
from helpers.users import nobody_prefix, python_for_nobody

from suspendguard.cli import main

FIXTURES = ALL_FIXTURES / "ascend-logs"


def logs(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["logs", *argv], out=out, err=err, environ={})
    return code, out.getvalue(), err.getvalue()


def test_no_finding_is_0(tmp_path: Path) -> None:
    (tmp_path / "quiet.log").write_text("[INFO] RUNTIME(1,python3):2024-01-01-00:00:00.000.000 ok\n")
    code, out, err = logs(str(tmp_path))
    assert (code, err) == (0, "") and "No documented failure found." in out


def test_findings_are_1_in_text_and_json() -> None:
    code, out, _ = logs(str(FIXTURES / "known-failures.log"))
    assert code == 1 and "hwts-busy-suspend" in out
    code, out, _ = logs(str(FIXTURES / "known-failures.log"), "--json")
    assert code == 1 and json.loads(out)["findings"]


def test_a_path_that_does_not_exist_is_2_and_named(tmp_path: Path) -> None:
    missing = str(tmp_path / "nonexistent")
    code, out, err = logs(missing)
    assert "No documented failure found" not in out and "Nothing was read." in out
    assert code == 2
    assert err == f"suspendguard: logs: {missing}: No such file or directory\n"


@pytest.mark.parametrize("typed", ["nonexistent", "./nonexistent.log", "gone/"])
def test_a_relative_path_that_does_not_exist_is_2_too(tmp_path: Path, typed: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """As typed at a shell, relative or with a trailing slash: it was exit 0, as if read."""
    monkeypatch.chdir(tmp_path)
    code, out, err = logs(typed)
    assert "Nothing was read." in out
    missing = tmp_path / typed.rstrip("/")
    assert (code, err) == (2, f"suspendguard: logs: {missing}: No such file or directory\n")


def test_a_path_that_cannot_be_read_is_2_even_next_to_findings(tmp_path: Path) -> None:
    plain = tmp_path / "plain.log"
    plain.write_text("")
    through_a_file = str(plain / "device-0")
    code, out, err = logs(str(FIXTURES / "known-failures.log"), through_a_file, "--json")
    assert code == 2
    assert err.startswith(f"suspendguard: logs: {through_a_file}: ") and err.count("\n") == 1
    assert json.loads(out)["findings"]  # what could be read is still reported


def test_as_a_real_process_for_cron(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "suspendguard", "logs", str(tmp_path / "gone")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "gone: No such file or directory" in proc.stderr


def test_a_file_read_in_part_is_not_an_unread_path(tmp_path: Path) -> None:
    partly = tmp_path / "partly.log"
    partly.write_bytes(b"binary \x00 line\n[INFO] RUNTIME(1,python3):2024-01-01-00:00:00.000.000 ok\n")
    code, out, err = logs(str(partly))
    assert "NUL bytes" in out  # listed under "Not read", but the file itself was read
    assert (code, err) == (0, "")


def test_a_journal_that_could_not_be_read_is_no_none_found(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no journalctl here
    code, out, _ = logs("--unit", "job", str(tmp_path / "empty"))
    assert "No documented failure found" not in out and "Nothing was read." in out, out
    assert code == 2


def test_a_file_in_a_folder_typed_that_cannot_be_read_is_2(tmp_path: Path) -> None:
    """As grep -r: a log in the folder that this user may not read is no "none found"; a
    link met in the walk, which is not followed, is no error."""
    prefix = nobody_prefix()
    if prefix is None:
        pytest.skip("needs root, to run as user nobody")
    python = python_for_nobody(prefix, {"PYTHONPATH": str(Path(__file__).parents[2])})
    if python is None:
        pytest.skip("no interpreter user nobody can run")
    slog = Path(tempfile.mkdtemp(prefix="sg-logs-"))
    try:
        slog.chmod(0o755)
        (slog / "device-0.log").write_text("[INFO] TSCH(-1,null):2024-01-01-00:00:00.000.000 up\n")
        (slog / "device-0.log").chmod(0o644)
        (slog / "device-1.log").symlink_to("/etc/hostname")

        def run() -> subprocess.CompletedProcess[str]:
            return subprocess.run([*prefix, python, "-m", "suspendguard", "logs", str(slog)],
                                  capture_output=True, text=True, timeout=60, cwd="/",
                                  env={"PYTHONPATH": str(Path(__file__).parents[2])})

        read = run()
        assert (read.returncode, read.stderr) == (0, ""), read
        assert "No documented failure found." in read.stdout
        (slog / "device-0.log").chmod(0o600)
        refused = run()
        assert "Nothing was read." in refused.stdout, refused
        assert (refused.returncode, refused.stderr) == (
            2, f"suspendguard: logs: {slog}/device-0.log: Permission denied\n")
    finally:
        shutil.rmtree(slog)


def test_a_file_not_read_is_named_on_stderr_with_its_control_characters_escaped(
        tmp_path: Path) -> None:
    # Any user who may write in a folder the operator scans names the file: its ESC and
    # newline neither reach the terminal nor forge a second line.
    os.mkfifo(tmp_path / "pipe\x1b[2J\nsuspendguard: all clear.log")
    code, _out, err = logs(str(tmp_path))
    assert code == 2, err
    assert err.startswith(f"suspendguard: logs: {tmp_path}/pipe\\e[2J\\nsuspendguard: all clear.log: ")
    assert "\x1b" not in err and err.count("\n") == 1, err


def test_configured_logs_all_refused_are_2_and_never_none_found(tmp_path: Path) -> None:
    # [logs] paths, not typed: a cron check reading 0 would take "nothing read" for "clean".
    folder = tmp_path / "logs"
    folder.mkdir()
    os.mkfifo(folder / "device-0.log")
    conf = tmp_path / "config.toml"
    # A pattern whose variable is not set names no log here: no refusal, whatever else is.
    conf.write_text(f'[logs]\npaths = ["{folder}/**", "$SG_UNSET_LOG_PATH/**"]\n'
                    f'[state]\ndir = "{tmp_path / "state"}"\n')
    out, err = io.StringIO(), io.StringIO()
    code = main(["--config", str(conf), "logs"], out=out, err=err, environ={})
    assert "Nothing was read." in out.getvalue(), out.getvalue()
    assert code == 2 and err.getvalue().startswith(
        f"suspendguard: logs: {folder}/device-0.log: "), err.getvalue()
    assert "SG_UNSET_LOG_PATH" not in err.getvalue() and err.getvalue().count("\n") == 1
    folder.joinpath("device-0.log").unlink()
    out, err = io.StringIO(), io.StringIO()
    code = main(["--config", str(conf), "logs"], out=out, err=err, environ={})
    assert (code, err.getvalue()) == (0, ""), err.getvalue()
    os.mkfifo(folder / "device-0.log")
    # One log read: what was refused is listed on stdout, as before, and the search is whole
    # enough to say none found.
    (folder / "device-1.log").write_text("[INFO] TSCH(-1,null):2024-01-01-00:00:00.000.000 up\n")
    out, err = io.StringIO(), io.StringIO()
    code = main(["--config", str(conf), "logs"], out=out, err=err, environ={})
    assert (code, err.getvalue()) == (0, ""), err.getvalue()
    assert "No documented failure found" in out.getvalue(), out.getvalue()
