"""``drain`` whose look refuses the suspend already (a protected job, unknown as a normal user):
no question, nobody signalled, that look's report and its exit status; never a drainable job
turned into a veto of its own ("appeared after the list was confirmed").

The CLI runs as a real process on a real pseudo-terminal, as an operator runs it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO
from helpers.holders import Holders
from helpers.ttys import on_a_terminal
from helpers.users import nobody_prefix, python_for_nobody, shared_with_nobody

from suspendguard.store.history import History


def attempts(state: Path) -> list[object]:
    if not (state / "history.db").exists():
        return []
    with History.open(str(state), readonly=True) as h:
        return list(h.attempts(5))


def test_a_protected_holder_makes_drain_ask_nothing_and_signal_nobody(
        conf: Path, node: str, holders: Holders) -> None:
    # Two jobs: one a [policy] protect rule names (a veto before anyone is signalled), one
    # that takes SIGINT. The suspend is refused whatever the drain does: no question.
    conf.write_text(conf.read_text()
                    + '[[policy.protect]]\nuid = 0\ncmdline = "--delay 0.25 "\n')
    protected, protected_pid = holders.start(node, delay=0.25)
    drainable, drainable_pid = holders.start(node)
    argv = [sys.executable, "-m", "suspendguard", "drain", "--config", str(conf)]
    code, shown = on_a_terminal(argv, b"y\n", 60)
    assert "[y/N]" not in shown and "will be stopped" not in shown, shown
    assert code == 1, shown  # a veto, as documented
    verdict = shown[shown.index("verdict: VETO"):]
    [reason] = [line for line in verdict.splitlines() if f"pid {protected_pid} " in line]
    assert "protect" in reason, shown
    assert "appeared after the list was confirmed" not in shown
    assert f"pid {drainable_pid} " not in verdict.split("\n\n")[0], shown  # no reason of its own
    assert "drain: the suspend is refused already (veto): nobody was signalled" in shown
    time.sleep(0.5)  # a SIGINT, had one been sent, is handled within the holder's delay
    assert holders.signals() == []
    assert protected.poll() is None and drainable.poll() is None
    assert attempts(conf.parent / "state") == []  # nothing was done: nothing recorded

    # --json: the same look's report, whole.
    code, shown = on_a_terminal([*argv, "--json"], b"y\n", 60)
    report = json.loads(shown[shown.index("{"):shown.rindex("}") + 1])
    assert code == 1 and report["verdict"] == "veto" and report["dry_run"] is True, shown
    outcomes = {h["pid"]: h["outcome"]["kind"] for h in report["holders"]}
    assert outcomes[drainable_pid] == "not-signalled", report["holders"]
    assert [d["code"] for d in report["reason_details"]] == ["protected"], report


def test_a_normal_user_s_drain_is_unknown_and_signals_nobody(node: str, holders: Holders) -> None:
    # As user nobody: root's job cannot be inspected (unknown: docs/commands.md, exit 5),
    # nobody's own job could take SIGINT. Refused anyway, it is not signalled, and the
    # verdict stays unknown, never a veto of nobody's own job "appeared after".
    prefix = nobody_prefix()
    if prefix is None:
        pytest.skip("needs root and setpriv or runuser to run as nobody")
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    with shared_with_nobody(node, holders, "sg-drain-nobody-") as (folder, conf, _root_pid):
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
               "PYTHONPATH": os.pathsep.join([str(REPO), *paths]),
               "DBUS_SYSTEM_BUS_ADDRESS": f"unix:path={folder / 'no-bus'}",
               "HOME": "/nonexistent"}
        python = python_for_nobody(prefix, env)
        if python is None:
            pytest.skip("no python interpreter that user nobody can run imports suspendguard")
        (folder / "state").mkdir(mode=0o777)
        (folder / "state").chmod(0o777)  # nobody's drain may record, were it to run
        marker = folder / "nobody-signals.log"
        marker.touch(mode=0o666)
        marker.chmod(0o666)
        holders.marker = str(marker)
        job, pid = holders.start(str(folder / "npu0"), argv_prefix=prefix, python=python)
        code, shown = on_a_terminal([*prefix, python, "-m", "suspendguard", "drain",
                                     "--config", str(conf)], b"y\n", 60, env)
        assert "[y/N]" not in shown, shown
        assert code == 5, shown  # unknown, as documented; never a veto
        assert "verdict: UNKNOWN" in shown and "run as root: " in shown, shown
        assert "appeared after the list was confirmed" not in shown
        time.sleep(0.5)
        assert holders.signals() == [] and job.poll() is None
        assert pid != _root_pid
