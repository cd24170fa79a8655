"""``check`` never signals; ``drain`` asks first on a real pseudo-terminal, ``--yes`` skips the question."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from pathlib import Path

from helpers.holders import Holders
from helpers.ttys import on_a_terminal

from suspendguard.cli import main
from suspendguard.store.history import History


def cli(*argv: str, stdin: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err, environ={}, stdin=io.StringIO(stdin))
    return code, out.getvalue(), err.getvalue()


def attempts(conf: Path) -> list[object]:
    if not (conf.parent / "state" / "history.db").exists():
        return []
    with History.open(str(conf.parent / "state"), readonly=True) as h:
        return list(h.attempts(5))


def drain_argv(conf: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "suspendguard", "drain", "--config", str(conf), *args]


def test_check_without_dry_run_signals_nobody(conf: Path, node: str, holders: Holders) -> None:
    proc, pid = holders.start(node)
    code, out, err = cli("check", "--config", str(conf))
    assert code == 0, err
    assert out.splitlines()[0] == "verdict: ALLOW (dry run)"
    time.sleep(0.3)  # a SIGINT, had one been sent, is handled within the holder's delay
    assert holders.signals() == [] and proc.poll() is None
    assert attempts(conf) == []  # nothing recorded either
    code, out, _ = cli("check", "--json", "--config", str(conf))
    doc = json.loads(out)
    assert doc["dry_run"] is True
    assert [h["outcome"]["kind"] for h in doc["holders"] if h["pid"] == pid] == ["would-signal"]


def test_drain_refuses_without_a_terminal(conf: Path, node: str, holders: Holders) -> None:
    proc, _pid = holders.start(node)
    code, out, err = cli("drain", "--config", str(conf))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "no terminal" in err and "--yes" in err
    assert holders.signals() == [] and proc.poll() is None
    assert attempts(conf) == []


def test_drain_with_stdin_closed_refuses(conf: Path, node: str, holders: Holders) -> None:
    # fd 0 closed (a cron job, slurmctld's programs): no terminal, the same refusal, never a
    # traceback and its exit status 1, which would read as "answered no".
    proc, _pid = holders.start(node)
    result = subprocess.run(["sh", "-c", 'exec "$@" <&-', "sh", *drain_argv(conf)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stdout == "", result.stderr
    assert result.stderr.count("\n") == 1 and "no terminal" in result.stderr
    time.sleep(0.3)
    assert holders.signals() == [] and proc.poll() is None
    assert attempts(conf) == []


def test_drain_yes_without_a_terminal_drains(conf: Path, node: str, holders: Holders) -> None:
    proc, pid = holders.start(node)
    result = subprocess.run(drain_argv(conf, "--yes", "--json"), stdin=subprocess.DEVNULL,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["verdict"] == "allow" and doc["dry_run"] is False
    [held] = [h for h in doc["holders"] if h["pid"] == pid]
    assert held["outcome"]["kind"] == "exited"
    assert proc.wait(timeout=5) == 0
    assert holders.signals() == [f"{pid} SIGINT"]
    [attempt] = attempts(conf)
    assert attempt.origin == "cli" and attempt.result == "allow"  # type: ignore[attr-defined]
    # Named as the drain it was, never as a check (which sends nothing, ever).
    assert f"attempt {attempt.id} (drain): allow" in result.stderr  # type: ignore[attr-defined]
    code, out, _ = cli("history", "--config", str(conf))
    assert code == 0 and out.splitlines()[1].split()[4:6] == ["drain", "allow"], out


def answered(conf: Path, node: str, holders: Holders,
             reply: bytes) -> tuple[subprocess.Popen[str], int, int, str]:
    """``drain`` on a terminal with one holder, answered ``reply``: the holder, its pid, the
    exit status and what the terminal showed, which listed the holder and asked."""
    proc, pid = holders.start(node)
    code, shown = on_a_terminal(drain_argv(conf), reply)
    assert "1 process(es) will be stopped, with SIGINT unless the list says otherwise" in shown
    asked = shown[:shown.index("Stop this process")]
    [row] = [line for line in asked.splitlines()
             if line.split()[:2] == [str(pid), "root"] or line.split()[:1] == [str(pid)]]
    assert "  has a SIGINT handler  " in row, shown  # how it is stopped: its own handler
    assert "Stop this process as listed now? [y/N]" in shown
    return proc, pid, code, shown


def test_drain_on_a_terminal_answered_no_signals_nobody(conf: Path, node: str,
                                                       holders: Holders) -> None:
    proc, _pid, code, shown = answered(conf, node, holders, b"n\n")
    assert code == 1, shown
    assert "not confirmed: nobody was signalled" in shown
    time.sleep(0.3)
    assert holders.signals() == [] and proc.poll() is None
    assert attempts(conf) == []


def test_drain_on_a_terminal_answered_yes_drains(conf: Path, node: str,
                                                holders: Holders) -> None:
    proc, pid, code, shown = answered(conf, node, holders, b"y\n")
    assert code == 0, shown
    assert "verdict: ALLOW" in shown
    assert proc.wait(timeout=5) == 0
    assert holders.signals() == [f"{pid} SIGINT"]
    [attempt] = attempts(conf)
    assert attempt.result == "allow"  # type: ignore[attr-defined]


def test_drain_with_nobody_to_signal_asks_nothing(conf: Path) -> None:
    code, shown = on_a_terminal(drain_argv(conf), None)
    assert code == 0, shown
    assert "[y/N]" not in shown and "verdict: ALLOW" in shown


def test_the_question_says_what_follows_the_signal(conf: Path, node: str,
                                                    holders: Holders) -> None:
    # A job that ignores SIGINT, under on_sigint_ignored = "escalate": the operator is told
    # that escalation follows before answering, not only that it ignores the signal.
    conf.write_text(conf.read_text() + 'on_sigint_ignored = "escalate"\nescalate = ["SIGTERM:2"]\n')
    proc, pid = holders.start(node, mode="deaf")
    code, shown = on_a_terminal(drain_argv(conf), b"n\n")
    assert "Stop this process" in shown, shown
    asked = shown[:shown.index("Stop this process")]
    [row] = [line for line in asked.splitlines() if line.split()[:1] == [str(pid)]]
    assert "ignores SIGINT; escalation follows" in row, shown
    assert code == 1 and proc.poll() is None and holders.signals() == []
