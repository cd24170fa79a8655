"""Issue 15 item 12 (its last sentence): SIGINT to the guard ends the run as a recorded veto."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from helpers.holders import Holders

from suspendguard.store.history import History


def test_sigint_to_the_guard_mid_drain_gives_a_recorded_veto(
        tmp_path: Path, node: str, holders: Holders) -> None:
    state = tmp_path / "state"
    conf = tmp_path / "guard.toml"
    conf.write_text(f'[devices]\nfamilies = []\nnodes = ["{node}"]\n[state]\ndir = "{state}"\n'
                    '[idle]\nbackends = []\n[drain]\ntimeout_s = 20\n')
    _slow, pid = holders.start(node, mode="slow")
    guard = subprocess.Popen([sys.executable, "-m", "suspendguard", "--config", str(conf),
                              "drain", "--yes", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        for _ in range(500):
            if holders.signals():
                break
            time.sleep(0.02)
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
    assert attempt.verdict == "veto"
