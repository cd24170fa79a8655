"""The catalog's findings against the attempt's start on the night the clocks go back."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest
from helpers.records import finding

from suspendguard.health import ascend
from suspendguard.logs.journal import read_unit

UNIT = "train.service"
# 2026-11-01 in New York: at 02:00 EDT the clocks go back to 01:00 EST.
STARTED = 1793512200  # 01:50 EDT (05:50 UTC)
HEARTBEAT = STARTED + 30 * 60  # 01:20 EST, half an hour later (06:20 UTC)


@pytest.fixture
def new_york() -> Iterator[None]:
    """The process's local time is New York's, as the host's would be; put back after."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = "America/New_York"
    time.tzset()
    try:
        assert time.localtime(STARTED).tm_isdst == 1 and time.localtime(HEARTBEAT).tm_isdst == 0
        yield
    finally:
        if old is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = old
        time.tzset()


def fake_journalctl(tmp_path: Path, *entries: dict[str, str]) -> str:
    """A journalctl that prints ``entries`` as ``-o json`` does, whatever it is asked."""
    data = tmp_path / "unit.json"
    data.write_text("".join(json.dumps(e) + "\n" for e in entries))
    script = tmp_path / "journalctl"
    script.write_text(f'#!/bin/sh\ncat "{data}"\n')
    script.chmod(0o755)
    return str(script)


def test_a_journal_finding_after_the_clocks_went_back_is_counted(
        new_york: None, tmp_path: Path) -> None:
    since = datetime.fromtimestamp(STARTED)  # as restore makes it: naive local time
    tool = fake_journalctl(tmp_path, {
        "MESSAGE": "[ERROR] DRV: Device[0] lost heartbeat, reason=lost heartbeat", "_PID": "42",
        "__REALTIME_TIMESTAMP": str(HEARTBEAT * 1_000_000)})
    journal = read_unit(UNIT, since, journalctl=tool)
    records = [f.record() for f in journal.findings]
    assert [(r.rule, r.file, r.time) for r in records] == [
        ("heartbeat-lost", f"journal:{UNIT}", "2026-11-01T01:20:00")]  # reads as before 01:50
    found = ascend.catalog_check(records, since)
    assert [(d.state, d.source) for d in found] == [("unhealthy", "catalog")]
    assert "heartbeat" in found[0].reason


def test_a_device_log_finding_stamped_before_the_attempt_still_is_not_counted(
        new_york: None) -> None:
    since = datetime.fromtimestamp(STARTED)
    early = replace(finding("heartbeat-lost"), time="2026-11-01T01:49:57")
    assert ascend.catalog_check([early], since) == []
