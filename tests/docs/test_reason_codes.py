"""Reason codes: the docs' table is the code's list, and every output that has reasons has them typed.

A real holder that ignores SIGINT vetoes a real run; its reason comes back
with the documented code and keys from ``check --json``, from the history
(``history --json``'s records) and in the journal entry (to a datagram socket standing where journald's is).
"""

from __future__ import annotations

import io
import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import REPO
from helpers.holders import Holders
from helpers.journal import standing_in, unfilled
from helpers.runners import guard

from suspendguard.store.history import History
from suspendguard.system import journal_ids
from suspendguard.system.log import Logger
from suspendguard.verdict import REASON_CODES

DOC = REPO / "docs" / "json-and-metrics.md"
DETAIL_KEYS = {"code", "text", "pid", "comm", "unit", "owner", "device"}


def documented_codes() -> list[str]:
    text = DOC.read_text()
    table = text[text.index("**Reasons and their codes.**"):text.index("A code is never reused")]
    return re.findall(r"^\| `([a-z-]+)` \|", table, re.M)


def test_the_docs_table_is_the_list_of_codes() -> None:
    assert documented_codes() == list(REASON_CODES)


@pytest.fixture
def journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    """A datagram socket standing where journald's is, waiting up to 5 s for each entry."""
    with standing_in(tmp_path, monkeypatch) as sock:
        sock.settimeout(5)
        yield sock


def fields(datagram: bytes) -> dict[str, str]:
    """journald's native protocol back into fields (values without newlines, as the guard's are
    JSON on one line)."""
    return dict(line.split("=", 1) for line in datagram.decode().splitlines())


def test_a_veto_is_typed_in_check_history_and_the_journal(
        make_config: Any, node: str, holders: Holders, journal: socket.socket) -> None:
    _, pid = holders.start(node, mode="deaf")
    config = make_config()
    report = guard(config, log=Logger(io.StringIO(), {"JOURNAL_STREAM": "8:1"}))
    assert report.verdict.kind == "veto"

    doc = report.to_json()
    assert len(doc["reason_details"]) == len(doc["reasons"]) >= 1
    assert [d["text"] for d in doc["reason_details"]] == doc["reasons"]
    assert all(set(d) == DETAIL_KEYS and d["code"] in documented_codes()
               for d in doc["reason_details"])
    [mine] = [d for d in doc["reason_details"] if d["pid"] == pid]
    assert mine["code"] == "sigint-ignored" and mine["owner"] == "plain"
    assert mine["comm"] == report.holders[0].holder.comm

    entry = fields(journal.recv(65536))
    assert entry["SUSPENDGUARD_VERDICT"] == "veto"
    assert entry["SUSPENDGUARD_ATTEMPT"] == str(report.attempt.id)
    assert json.loads(entry["SUSPENDGUARD_REASONS"]) == doc["reasons"]
    assert json.loads(entry["SUSPENDGUARD_REASON_DETAILS"]) == doc["reason_details"]
    assert "sigint-ignored" in entry["SUSPENDGUARD_REASON_CODES"].split(", ")
    # journalctl -x explains it: the catalog's entry for its id, every @FIELD@ filled in
    assert entry["MESSAGE_ID"] == journal_ids.VETO
    assert entry["MESSAGE"].startswith(f"suspend refused (veto, attempt {report.attempt.id}): "
                                       f"{doc['reasons'][0]}")
    assert unfilled(journal_ids.VETO, entry) == set()

    # Read back from the history, as history --json writes it (Attempt.to_json).
    with History.open(config.state.dir, readonly=True) as h:
        [attempt] = h.attempts(5)
    assert attempt.to_json()["reason_details"] == doc["reason_details"]
    assert attempt.to_json()["reasons"] == doc["reasons"]


def test_a_dry_run_sends_no_journal_entry(make_config: Any, node: str, holders: Holders,
                                          journal: socket.socket) -> None:
    holders.start(node, mode="deaf")
    report = guard(make_config(), dry_run=True, record=False,
                   log=Logger(io.StringIO(), {"JOURNAL_STREAM": "8:1"}))
    assert report.verdict.kind == "veto"
    assert report.to_json()["reason_details"][0]["code"] == "sigint-ignored"
    journal.settimeout(0.2)
    with pytest.raises(TimeoutError):
        journal.recv(65536)


def test_an_allow_after_a_drain_has_its_own_journal_entry(
        make_config: Any, node: str, holders: Holders, journal: socket.socket) -> None:
    _, pid = holders.start(node, mode="graceful")
    report = guard(make_config(), log=Logger(io.StringIO(), {"JOURNAL_STREAM": "8:1"}))
    assert report.verdict.kind == "allow"
    entry = fields(journal.recv(65536))
    assert entry["MESSAGE_ID"] == journal_ids.ALLOW_AFTER_DRAIN
    assert entry["SUSPENDGUARD_VERDICT"] == "allow" and entry["SUSPENDGUARD_DRAINED"] == "1"
    assert f"pid {pid} " in entry["SUSPENDGUARD_DRAINED_HOLDERS"]
    assert entry["MESSAGE"].startswith("suspend allowed after draining 1 holder(s)")
    assert unfilled(journal_ids.ALLOW_AFTER_DRAIN, entry) == set()

    # nothing drained, nothing to explain: the plain log line alone
    report = guard(make_config(), log=Logger(io.StringIO(), {"JOURNAL_STREAM": "8:1"}))
    assert report.verdict.kind == "allow" and not report.holders
    journal.settimeout(0.2)
    with pytest.raises(TimeoutError):
        journal.recv(65536)
