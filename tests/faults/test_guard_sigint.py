"""Issue 15 item 12 (its last sentence): SIGINT to the guard ends the run as a recorded veto."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

from helpers.holders import Holders

from suspendguard.store.history import History

from .helpers import guard_mid_drain


def test_sigint_to_the_guard_mid_drain_gives_a_recorded_veto(
        tmp_path: Path, node: str, holders: Holders) -> None:
    guard, pid, state = guard_mid_drain(tmp_path, node, holders, "--json")
    try:
        assert holders.signals() == [f"{pid} SIGINT"]
        start = time.monotonic()
        guard.send_signal(signal.SIGINT)
        out, err = guard.communicate(timeout=10)
    finally:
        guard.kill()
        guard.wait()
    assert time.monotonic() - start < 2
    assert guard.returncode == 1, (guard.returncode, err)
    report = json.loads(out)
    assert report["verdict"] == "veto"
    assert any("guard received SIGINT" in r for r in report["reasons"]), report["reasons"]
    with History.open(str(state), readonly=True) as h:
        [attempt] = h.attempts()
    assert attempt.result == "veto"
