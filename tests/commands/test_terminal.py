"""What the terminal says: unknown as a normal user, one table layout at 80 columns, one JSON schema."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import REPO
from helpers.holders import Holders
from helpers.runners import cli
from helpers.users import nobody_prefix, python_for_nobody, shared_with_nobody

from suspendguard.errors import EXIT_UNKNOWN
from suspendguard.system.terminal import table
from suspendguard.verdict import VERDICT_EXIT_STATUS


def test_unknown_has_its_own_exit_status() -> None:
    assert VERDICT_EXIT_STATUS == {"allow": 0, "veto": 1, "unknown": EXIT_UNKNOWN}
    assert EXIT_UNKNOWN == 5  # 4 is an untrusted config


# --- a normal user next to root's jobs ---------------------------------------------------

@pytest.fixture
def shared(node: str, holders: Holders) -> Iterator[tuple[Path, Path, int]]:
    """A node nobody can open, held by a root job; a config nobody can read."""
    with shared_with_nobody(node, holders, "sg-unknown-") as made:
        yield made


def as_nobody(folder: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    prefix = nobody_prefix()
    if prefix is None:
        pytest.skip("needs root and setpriv or runuser to run as nobody")
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    repo = str(REPO)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "PYTHONPATH": os.pathsep.join([repo, *paths]), "HOME": "/nonexistent"}
    python = python_for_nobody(prefix, env)
    if python is None:
        pytest.skip("no python interpreter that user nobody can run imports suspendguard")
    return subprocess.run([*prefix, python, "-m", "suspendguard", *argv], env=env,
                          capture_output=True, text=True, cwd="/", timeout=120)


def test_normal_user_gets_unknown_not_allow(shared: tuple[Path, Path, int],
                                            holders: Holders) -> None:
    folder, conf, pid = shared
    # As root the holder is seen (the verdict a normal user must not contradict).
    code, out, _ = cli("check", "--dry-run", "--json", "--config", str(conf))
    assert code == 0 and pid in [h["pid"] for h in json.loads(out)["holders"]]

    run = as_nobody(folder, "check", "--dry-run", "--config", str(conf))
    assert run.returncode == EXIT_UNKNOWN, (run.stdout, run.stderr)
    first = run.stdout.splitlines()[0]
    assert first.startswith("UNKNOWN: run as root: ") and "processes could not be inspected" in first
    assert "ALLOW" not in run.stdout and "no process holds" not in run.stdout
    assert run.stderr == ""

    run = as_nobody(folder, "check", "--dry-run", "--json", "--config", str(conf))
    data = json.loads(run.stdout)
    assert run.returncode == EXIT_UNKNOWN
    assert data["verdict"] == "unknown" and data["unreadable"] > 0
    assert data["reasons"][0].startswith("run as root: ")
    assert holders.signals() == []


def test_veto_unit_refuses_on_unknown(shared: tuple[Path, Path, int], holders: Holders) -> None:
    folder, conf, _ = shared
    # pre-sleep is what the unit runs: an unknown must fail it (non-zero), so
    # systemd refuses the suspend; and nobody is signalled on a guess.
    run = as_nobody(folder, "pre-sleep", "suspend", "--config", str(conf))
    assert run.returncode == EXIT_UNKNOWN, (run.stdout, run.stderr)
    assert "unknown, refused: run as root: " in run.stderr
    assert holders.signals() == []


# --- one layout --------------------------------------------------------------------------

def test_tables_fit_80_columns_and_wide_shows_all(conf: Path, node: str,
                                                  holders: Holders) -> None:
    _, a = holders.start(node, mode="deaf")
    _, b = holders.start(node, mode="deaf")
    code, out, err = cli("check", "--dry-run", "--config", str(conf), environ={"COLUMNS": "80"})
    assert code == 1 and err == ""  # a dry-run veto is the answer, not an error
    lines = out.splitlines()
    head = lines.index(next(line for line in lines if line.startswith("holders: ")))
    assert lines[head + 1].split() == ["PID", "USER", "ACTION", "SIGINT", "OUTCOME", "COMMAND"]
    rows = [line for line in lines[head + 2:] if line.split()[:1] in ([str(a)], [str(b)])]
    assert len(rows) == 2
    assert all(len(line) <= 80 for line in lines[head:head + 4])
    assert all(line.endswith("…") for line in rows)  # the command, cut where it shows
    # Each distinct rule once, with every pid it decided (not one line per holder).
    rules = [line for line in lines if line.startswith("    holds a compute node: pid ")]
    assert len(rules) == 1 and str(a) in rules[0] and str(b) in rules[0]
    assert not any(line.startswith(f"  pid {a}: rule:") for line in lines)

    code, wide, _ = cli("check", "--dry-run", "--wide", "--config", str(conf),
                        environ={"COLUMNS": "80"})
    row = next(line for line in wide.splitlines() if line.split()[:1] == [str(a)])
    assert "…" not in row and "--mode deaf" in row


def shown(text: str) -> int:
    """The columns a terminal gives ``text``: two for an East Asian wide or full-width one."""
    return sum(2 if unicodedata.east_asian_width(c) in ("W", "F") else 1 for c in text)


def test_a_wide_character_takes_two_columns_in_a_table() -> None:
    rows = [("PID", "USER", "COMMAND"),
            ("30641", "张伟", "python3 /dat/模型训练/微调脚本.py --epochs 3"),
            ("4242", "alice", "python3 /data/train/finetune.py --epochs 3")]
    head, wide, narrow = table(rows, width=40)
    assert [shown(line) for line in (head, wide, narrow)] == [23, 39, 40]
    # Each column starts where its header does, on the row of a Chinese user name too.
    for line, user in ((wide, "张伟"), (narrow, "alice")):
        assert shown(line[:line.index(user)]) == head.index("USER"), line
        assert shown(line[:line.index("python3")]) == head.index("COMMAND"), line
    # No column is left for half of 微: the cut stops before it.
    assert wide.endswith("/模型训练/…") and narrow.endswith("/train/fin…")
    # ASCII is laid out as ever, one column a character.
    assert table(rows[::2], width=30) == ["  PID   USER   COMMAND",
                                          "  4242  alice  python3 /data/…"]


def test_check_json_dry_run_veto_writes_nothing_to_stderr(conf: Path, node: str,
                                                          holders: Holders) -> None:
    holders.start(node, mode="deaf")
    code, out, err = cli("check", "--dry-run", "--json", "--config", str(conf))
    assert code == 1 and json.loads(out)["verdict"] == "veto"
    assert err == ""


def test_one_holder_schema_across_drain_and_history(conf: Path, node: str,
                                                    holders: Holders) -> None:
    _, pid = holders.start(node)
    code, out, err = cli("drain", "--yes", "--json", "--config", str(conf))
    assert code == 0, err
    [checked] = [h for h in json.loads(out)["holders"] if h["pid"] == pid]
    code, out, _ = cli("history", "--json", "-n", "1", "--config", str(conf))
    [stored] = [h for h in json.loads(out)["attempts"][0]["holders"] if h["pid"] == pid]
    shared_keys = {"pid", "start_time", "user", "unit", "comm", "command", "action", "rule",
                   "outcome", "source", "round", "owner_key"}
    assert shared_keys <= set(checked) and set(stored) == shared_keys
    for key in shared_keys:
        assert stored[key] == checked[key], key
    assert checked["outcome"]["kind"] == "exited" and isinstance(checked["command"], str)
    assert isinstance(checked["cmdline"], list)


def test_history_times_carry_their_zone(conf: Path, node: str, holders: Holders) -> None:
    holders.start(node)
    assert cli("drain", "--yes", "--config", str(conf))[0] == 0
    code, out, _ = cli("history", "--config", str(conf))
    row = out.splitlines()[1].split()
    assert code == 0 and (row[3] == "UTC" or row[3][:1] in "+-"), row


def test_a_process_name_with_escapes_reaches_the_log_lines_escaped(
        conf: Path, node: str, holders: Holders) -> None:
    """A process names itself (any 15 bytes, ESC included): the drain's log lines on the
    operator's terminal show it escaped, never as a terminal command."""
    named = subprocess.Popen(
        [sys.executable, "-c", "import ctypes, sys, time; "
         "ctypes.CDLL(None).prctl(15, b'ev\\x1b[2Jil', 0, 0, 0); f = open(sys.argv[1], 'rb'); "
         "print('ready', flush=True); time.sleep(60)", node],
        stdout=subprocess.PIPE, text=True, start_new_session=True)
    holders.procs.append(named)
    assert named.stdout is not None and named.stdout.readline() == "ready\n"
    code, _out, err = cli("--config", str(conf), "drain", "--yes")
    assert code == 0, err
    assert named.wait(timeout=10) != 0  # its SIGINT, as KeyboardInterrupt
    assert "\x1b" not in err and f"{named.pid} ev\\e[2Jil" in err, err
