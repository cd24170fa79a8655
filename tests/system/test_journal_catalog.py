"""The journal catalog explains every MESSAGE_ID the guard sends, and only those.

Parsed here as systemd's docs/CATALOG.md describes the format, then by
journalctl itself (``--update-catalog`` into a scratch root) where it is
installed. A failed start at restore goes to a datagram socket standing
where journald's is, with its MESSAGE_ID and the fields its entry names.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import REPO
from helpers.journal import CATALOG, entries, parse, standing_in, unfilled

from suspendguard.config.load import defaults
from suspendguard.guard.restore import restore
from suspendguard.model import Owner, Unavailable
from suspendguard.record import Stop
from suspendguard.system import journal_ids
from suspendguard.system.deadline import Deadline, bounded


def test_ids_are_128_bit_lowercase_hex_and_distinct() -> None:
    ids = list(journal_ids.MESSAGE_IDS.values())
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids), ids
    assert len(set(ids)) == len(ids)


def test_every_id_has_exactly_one_entry_and_no_entry_is_stray() -> None:
    entries = parse()
    assert sorted(e.id for e in entries) == sorted(journal_ids.MESSAGE_IDS.values())
    for e in entries:
        assert e.headers.get("Subject"), e.id
        assert e.headers.get("Defined-By") == "suspendguard", e.id
        assert e.headers.get("Support", "").startswith("man:suspendguard"), e.id
        assert len(e.body.splitlines()) >= 3, e.id
        assert "suspendguard " in e.body, f"{e.id}: the entry says no command to run"
    assert all(len(line) <= 76 for e in entries for line in e.body.splitlines())


def test_the_docs_list_every_id_with_its_name() -> None:
    text = (REPO / "docs" / "json-and-metrics.md").read_text()
    section = text[text.index("**Journal entries.**"):]
    rows = re.findall(r"^\| `([0-9a-f]{32})` \| ([a-z-]+) \|", section, re.M)
    assert dict((name, i) for i, name in rows) == journal_ids.MESSAGE_IDS


@pytest.mark.skipif(shutil.which("journalctl") is None, reason="journalctl is not installed")
def test_journalctl_reads_the_catalog(tmp_path: Path) -> None:
    folder = tmp_path / "usr/lib/systemd/catalog"
    folder.mkdir(parents=True)
    shutil.copy(CATALOG, folder)
    (tmp_path / "var/lib/systemd/catalog").mkdir(parents=True)
    subprocess.run(["journalctl", f"--root={tmp_path}", "--update-catalog"], check=True,
                   capture_output=True, timeout=60)
    listed = subprocess.run(["journalctl", f"--root={tmp_path}", "--list-catalog"], check=True,
                            capture_output=True, text=True, timeout=60).stdout
    assert sorted(line.split()[0] for line in listed.splitlines()) == \
        sorted(journal_ids.MESSAGE_IDS.values()), listed


@pytest.fixture
def journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    with standing_in(tmp_path, monkeypatch) as sock:
        yield sock


class NoSystemd:
    """The owners' side of restore with no systemd to ask: every unit's state is unavailable."""

    def started_meanwhile(self, owner: Owner) -> bool:
        return False

    def remove_dropins(self, owners: Any) -> list[str]:
        return []

    def unit_now(self, owner: Owner) -> Unavailable:
        return Unavailable("systemd is not reachable")


def run_restore(journal_on: bool) -> str:
    stop = Stop(Owner("systemd-service", "train.service"), 1, time.time(), 7)
    with bounded(Deadline(time.monotonic() + 5.0)):
        [done] = restore([stop], NoSystemd(), defaults().restore,  # type: ignore[arg-type]
                         enabled=True, record=lambda *_a: None, log=lambda _line: None,
                         warn=lambda _line: None, journal=journal_on)
    return done.result


def test_a_failed_start_goes_to_the_journal_with_its_id(journal: socket.socket) -> None:
    assert run_restore(journal_on=True) == "failed"
    [sent] = entries(journal)
    assert sent["MESSAGE_ID"] == journal_ids.RESTORE_FAILED
    assert sent["MESSAGE"] == "could not start train.service again: systemd is not reachable"
    assert sent["SUSPENDGUARD_UNIT"] == "train.service"
    assert sent["SUSPENDGUARD_OWNER"] == "systemd-service:train.service"
    assert sent["SUSPENDGUARD_WHY"] == "systemd is not reachable"
    assert sent["SUSPENDGUARD_ATTEMPT"] == "7"
    assert unfilled(journal_ids.RESTORE_FAILED, sent) == set()


def test_without_journald_a_failed_start_sends_nothing(journal: socket.socket) -> None:
    assert run_restore(journal_on=False) == "failed"
    assert entries(journal) == []
