"""A refusal told once, not at each of logind's asks (store/told.py, guard/run.py)."""

from __future__ import annotations

import io
import time
from pathlib import Path

from suspendguard.config import build
from suspendguard.guard.run import tell_refused
from suspendguard.system.log import Logger
from suspendguard.verdict import Reason, Verdict

REPEAT = "was told less than 600 s ago: not told again"


def busy(device: str, pct: int) -> Verdict:
    return Verdict("veto", (Reason("device-busy", f"{device} (npu-smi): aicore {pct}% > 5% "
                                   "after 3.0 s settle", device=device),))


def told_again(tmp_path: Path, *verdicts: Verdict) -> list[bool]:
    """For each refusal in turn, whether it was told (or, with nobody to tell, meant to be)."""
    config = build({"state": {"dir": str(tmp_path)}, "notify": {"desktop": False, "wall": False}})
    out = []
    for verdict in verdicts:
        log = io.StringIO()
        tell_refused(config, verdict, "suspend", Logger(log, {}), time.monotonic())
        out.append(REPEAT not in log.getvalue())
    return out


def test_a_refusal_whose_figures_changed_is_told_once(tmp_path: Path) -> None:
    # With the lid closed logind asks every 30 s; the busy device's load is new at each ask.
    assert told_again(tmp_path, busy("npu 0", 37), busy("npu 0", 41)) == [True, False]


def test_a_refusal_about_another_device_is_told(tmp_path: Path) -> None:
    assert told_again(tmp_path, busy("npu 0", 37), busy("npu 1", 37)) == [True, True]


def test_a_reason_about_nothing_in_particular_is_known_by_its_words(tmp_path: Path) -> None:
    failed = Verdict("unknown", (Reason("guard-failed", "the guard failed: disk full"),))
    other = Verdict("unknown", (Reason("guard-failed", "the guard failed: out of memory"),))
    assert told_again(tmp_path, failed, failed, other) == [True, False, True]
