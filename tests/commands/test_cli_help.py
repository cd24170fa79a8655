"""The help as a user meets it: the command list, each command's options and exit statuses."""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
from pathlib import Path

import pytest

from suspendguard.cli import build_parser, main
from suspendguard.commands import COMMANDS


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err, environ={}, stdin=io.StringIO())
    return code, out.getvalue(), err.getvalue()


def subparsers() -> dict[str, argparse.ArgumentParser]:
    [sub] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def test_bare_suspendguard_lists_every_command() -> None:
    code, out, err = cli()
    assert code == 2 and err == ""
    listed = out.split("commands:", 1)[1]
    for command in COMMANDS:
        assert f"    {command.name} " in listed or f"    {command.name}\n" in listed, command.name
        assert command.help[:30] in " ".join(listed.split()), command.help


@pytest.mark.parametrize("name", [c.name for c in COMMANDS])
def test_help_ends_with_the_exit_statuses(name: str) -> None:
    code, out, _ = cli(name, "--help")
    assert code == 0
    command = next(c for c in COMMANDS if c.name == name)
    tail = out.rstrip("\n").split("exit status:\n", 1)[1].splitlines()
    assert [int(line.split()[0]) for line in tail] == [code for code, _ in command.exits]
    assert 0 in [code for code, _ in command.exits]
    assert out.startswith(f"usage: suspendguard {name}")


def test_every_option_has_a_help_text() -> None:
    parsers = {"": build_parser(), **subparsers()}
    missing = [f"{name} {'/'.join(a.option_strings) or a.dest}"
               for name, p in parsers.items() for a in p._actions
               if not isinstance(a, argparse._SubParsersAction) and not a.help]
    assert missing == []


def test_sleep_hook_help_exits_0_with_its_usage() -> None:
    code, out, _ = cli("sleep-hook", "--help")
    assert code == 0 and out.startswith("usage: suspendguard sleep-hook")
    assert "pre" in out and "exit status:" in out
    # ... and the hand-made parser of the hook's real path still refuses what it must
    code, _, err = cli("sleep-hook", "--frobnicate")
    assert code == 2 and "unknown option --frobnicate" in err


def test_logs_exit_statuses_are_listed() -> None:
    _, out, _ = cli("logs", "--help")
    tail = out.split("exit status:", 1)[1]
    assert "1  documented failures found" in tail and "2  bad usage, or a PATH" in tail


def imported(argv: list[str], tmp_path: Path) -> set[str]:
    """The top-level packages ``python -X importtime -m suspendguard ARGV`` imported."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "suspendguard", *argv],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    assert proc.returncode == 0 and "suspendguard" in names, proc.stderr[-2000:]
    return names


@pytest.mark.parametrize("argv", [["--help"], ["suspend", "--help"], ["status", "--help"],
                                  ["drain", "--help"]])
def test_help_imports_neither_dbus_next_nor_asyncio(argv: list[str], tmp_path: Path) -> None:
    names = imported(argv, tmp_path)
    assert not {"dbus_next", "asyncio"} & names


@pytest.mark.parametrize("attempt", ["0", str(2**63), "99999999999999999999"])
def test_retry_refuses_an_attempt_id_no_history_can_hold(tmp_path: Path, attempt: str) -> None:
    # Past SQLite's INTEGER (2**63 - 1) the history's read overflowed: a traceback, exit 1.
    config = tmp_path / "config.toml"
    config.write_text(f'[state]\ndir = "{tmp_path / "state"}"\n')
    code, out, err = cli("retry", "suspend", "--attempt", attempt, "--config", str(config))
    assert (code, out) == (2, "")
    assert err == (f"suspendguard: retry: --attempt {attempt}: give an attempt's ID "
                   "(suspendguard history lists them)\n")
    # The largest ID is asked of the history, which has no such attempt.
    code, _, err = cli("retry", "suspend", "--attempt", str(2**63 - 1), "--config", str(config))
    assert code == 3 and err.count("\n") == 1, err
