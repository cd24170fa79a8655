"""Issue 15 item 12 (config and history): hostile input ends in one line and exit status 2."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from suspendguard.config import load
from suspendguard.config.validate import MAX_RULES
from suspendguard.errors import ConfigError

from .helpers import cli, one_line


def test_history_n_past_sqlite_integers(conf: Path) -> None:
    status, _, err = cli("history", "-n", str(1 << 63), "--config", str(conf))
    assert status == 2 and one_line(err) and "-n must be between 1 and" in err


def test_toml_nested_100k_deep(tmp_path: Path) -> None:
    deep = tmp_path / "deep.toml"
    deep.write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    status, _, err = cli("config", "--config", str(deep))
    assert status == 2 and one_line(err) and "nested too deeply" in err


@pytest.mark.parametrize("path, why", [
    ("/dev/zero", "not a regular file"),
    ("/proc/self/mem", "cannot read the configuration"),
])
def test_config_that_is_no_file(path: str, why: str) -> None:
    # A subprocess with a timeout: reading /dev/zero to its end never ends.
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "suspendguard", "--config", path, "config"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and one_line(result.stderr) and why in result.stderr
    assert time.monotonic() - started < 10


def test_fifo_is_refused_without_waiting(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    result = subprocess.run([sys.executable, "-m", "suspendguard", "--config", str(fifo),
                             "config"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and "not a regular file" in result.stderr


def test_oversized_config(tmp_path: Path) -> None:
    big = tmp_path / "big.toml"
    big.write_text("# padding\n" * 200_000)
    with pytest.raises(ConfigError, match="more than a configuration's limit"):
        load(str(big))


def rules(n: int) -> str:
    return "".join(f'[[policy.protect]]\ncomm = "job{i}"\ncmdline = "python .*train{i}"\n'
                   for i in range(n))


def test_too_many_rules_is_one_clear_line(tmp_path: Path) -> None:
    conf = tmp_path / "rules.toml"
    conf.write_text(rules(MAX_RULES + 1))
    status, _, err = cli("config", "--config", str(conf))
    assert status == 2 and one_line(err)
    assert "[policy] protect" in err and f"at most {MAX_RULES} rules" in err


def test_most_rules_load_well_inside_a_deadline(tmp_path: Path) -> None:
    conf = tmp_path / "rules.toml"
    conf.write_text(rules(MAX_RULES))
    started = time.monotonic()
    assert len(load(str(conf)).policy.protect) == MAX_RULES
    assert time.monotonic() - started < 2.0
