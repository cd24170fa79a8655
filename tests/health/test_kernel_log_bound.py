"""The kernel log after resume read only in part: the bound reached is said, not passed over."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import Gpu
from test_checks import SINCE, gpu_config

from suspendguard.health import nvidia
from suspendguard.health.resume import Tools, check
from suspendguard.logs import journal
from suspendguard.model import Unavailable

XID = "NVRM: Xid (PCI:0000:01:00): 79, pid=1234, name=python3, GPU has fallen off the bus."


def flooding_journalctl(tmp_path: Path, messages: list[str]) -> str:
    """A journalctl holding ``messages``, that prints at most ``-n``'s number of them (the
    first: systemd before 254 with --since), as the real one does."""
    data = tmp_path / "kernel.json"
    data.write_text("".join(json.dumps({"MESSAGE": m, "__REALTIME_TIMESTAMP": "1"}) + "\n"
                            for m in messages))
    script = tmp_path / "journalctl"
    script.write_text('#!/bin/sh\nn=0 prev=\nfor a in "$@"; do\n'
                      '  [ "$prev" = -n ] && n=$a\n  prev=$a\ndone\n'
                      f'head -n "$n" "{data}"\n')
    script.chmod(0o755)
    return str(script)


def noise(count: int) -> list[str]:
    return [f"audit: type=1400 audit({i}.0:1): apparmor=\"ALLOWED\"" for i in range(count)]


def test_the_entry_bound_reached_is_said_after_resume(
        gpu: Gpu, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal, "MAX_ENTRIES", 50)
    monkeypatch.setenv("FAKE_CUDA_MODE", "ok")
    monkeypatch.setitem(sys.modules, "pynvml", None)  # CUDA and the kernel log answer
    tool = flooding_journalctl(tmp_path, [*noise(50), XID])  # the Xid beyond the bound
    said = ("kernel log: the bound of 50 entries reached (journalctl -n): entries of the time "
            "asked beyond it not read")
    assert nvidia.kernel_check(SINCE, 5.0, tool) == ([], said)
    report = check(gpu_config(gpu), SINCE, tools=Tools(journalctl=tool))
    assert report.healthy and said in report.notes  # what restore logs and gives in --json
    log = journal.read_kernel(SINCE, journalctl=tool)
    assert not isinstance(log, Unavailable)
    assert len(log.lines) == 50 and XID not in log.lines


def test_the_byte_bound_reached_is_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal, "MAX_BYTES", 4096)
    tool = flooding_journalctl(tmp_path, [*noise(200), XID])
    found, note = nvidia.kernel_check(SINCE, 5.0, tool)
    assert found == []
    assert note == "kernel log: only the first 4096 bytes of journalctl's output read"


def test_a_sign_read_before_the_bound_decides_and_the_bound_is_said(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal, "MAX_ENTRIES", 3)
    found, note = nvidia.kernel_check(SINCE, 5.0, flooding_journalctl(tmp_path, [
        "usb 1-1: new device", XID, *noise(5)]))
    assert [(d.state, d.source) for d in found] == [("unhealthy", "kernel-log")]
    assert note.startswith("kernel log: the bound of 3 entries reached")


def test_a_log_under_the_bounds_says_nothing_of_them(tmp_path: Path) -> None:
    found, note = nvidia.kernel_check(SINCE, 5.0, flooding_journalctl(tmp_path, noise(10)))
    assert (found, note) == ([], "")
