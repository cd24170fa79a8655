"""The veto unit's telling as its run does it (guard/run.py): a telling that breaks changes
no verdict, and the words point only at a history record that holds the verdict.

The unit's run is the real CLI (``pre-sleep``), in a child process where a module must fail
to import, in-process where the history must fail to store the verdict; the refusal is a real
job that holds the test node and ignores SIGINT.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.dbus import PrivateBus, dbus_daemon, fake_service
from helpers.holders import Holders
from helpers.runners import cli
from helpers.ttys import tty_session, written

from suspendguard.errors import EXIT_VETO
from suspendguard.store.history import History

# The veto unit's run with ``module`` made unimportable, as a host without it would have it.
WITHOUT = ("import sys; sys.modules[sys.argv.pop(1)] = None; "
           "from suspendguard.cli import main; sys.exit(main())")


def _without(module: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", WITHOUT, module, *argv], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "JOURNAL_STREAM": ""})


@pytest.mark.parametrize("module", ["suspendguard.notify.tell",
                                    "suspendguard.system.dbus.notifications"])
def test_a_telling_that_cannot_import_leaves_the_veto_its_exit_status(
        conf: Path, node: str, holders: Holders, module: str) -> None:
    """The telling's modules (and the D-Bus client they bring) fail to import: one warning,
    and the unit still answers the veto (exit status 1), never a traceback nor a guard
    error (3)."""
    holders.start(node, mode="deaf")
    done = _without(module, "pre-sleep", "suspend", "--config", str(conf))
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == EXIT_VETO, done.stderr
    [said] = [line for line in done.stderr.splitlines() if "notify:" in line]
    assert re.fullmatch(r"suspendguard: warning: notify: not told: (ModuleNotFound|Import)Error: "
                        r".+", said), said
    assert module in said, said


@pytest.mark.skipif(dbus_daemon() is None, reason="dbus-daemon is not installed")
@pytest.mark.parametrize("stored", [True, False], ids=["stored", "not-stored"])
def test_the_words_name_the_attempt_only_when_the_history_holds_its_verdict(
        bus: PrivateBus, conf: Path, node: str, holders: Holders, tmp_path: Path,
        stored: bool) -> None:
    """A history that took the attempt's start but not its verdict (a full disk at the end)
    shows it ``interrupted``: the users are pointed at the unit's journal alone."""
    conf.write_text(conf.read_text() + "[notify]\ndesktop = false\n")
    with History.open(str(tmp_path / "state")):
        pass
    if not stored:
        with contextlib.closing(sqlite3.connect(tmp_path / "state" / "history.db")) as c, c:
            c.execute("CREATE TRIGGER full BEFORE UPDATE ON attempts "
                      "BEGIN SELECT RAISE(FAIL, 'database or disk is full'); END")
    holders.start(node, mode="deaf")
    with tty_session() as (master, session), \
            fake_service(bus, {"sessions": [session]}, services=["logind"]):
        code, _out, err = cli("pre-sleep", "suspend", "--config", str(conf),
                              environ={"DBUS_SYSTEM_BUS_ADDRESS": bus.address})
        seen = written(master)
    assert code == EXIT_VETO, err
    assert "notify: told alice on /dev/" in err, err
    journal = "journalctl -u suspendguard@suspend.service"
    assert journal in seen, seen
    if stored:
        assert "history not recorded" not in err, err
        assert "sudo suspendguard history 1 (or " in seen, seen
    else:
        assert "history not recorded: " in err and "database or disk is full" in err, err
        assert "sudo suspendguard history" not in seen, seen
