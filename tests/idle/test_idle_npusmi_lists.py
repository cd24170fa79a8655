"""npu-smi's process lists: when they answer for every process, and tables read as unknown.

npu-smi prints "No running processes found in NPU N" whenever its count of a
chip's processes is 0, which it also is where reading them failed or is not
supported: an empty list is no proof of none. A process row it cannot read,
or a table after the chips under a header the parser does not know, leaves
the lists not whole and never makes more chips.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from helpers import FAKES, FIXTURES
from helpers.holders import Holders
from helpers.refusing import RefusingFds
from helpers.runners import guard

from suspendguard.config import IdleConfig, defaults
from suspendguard.guard.inventory import FAMILY_NODES
from suspendguard.idle.base import IdleReport, QueryFailed
from suspendguard.idle.npusmi import NpuSmiBackend, parse_info
from suspendguard.idle.sampler import check_idle
from suspendguard.system.deadline import Deadline

FAKE = FAKES / "idle" / "npu-smi"
RECORDED = FIXTURES / "npu-smi"
TWO_CHIPS = (RECORDED / "310p3-two-chips-blank-process-names.txt").read_text()


def config(**kw: object) -> IdleConfig:
    base = replace(defaults().idle, npu_smi=str(FAKE), command_timeout_s=5.0)
    return replace(base, **kw)  # type: ignore[arg-type]


def query(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> dict[str, Any]:
    info = tmp_path / "info.txt"
    info.write_text(text)
    monkeypatch.setenv("FAKE_NPU_SMI_INFO", str(info))
    for name in ("FAKE_NPU_SMI_LIST", "FAKE_NPU_SMI_USAGES", "FAKE_NPU_SMI_MODE"):
        monkeypatch.delenv(name, raising=False)
    return {r.id: r for r in NpuSmiBackend(config()).query(5.0)}


def edited(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


@pytest.mark.parametrize(("fixture", "lists"), [
    ("910b2c-hbm-one-process.txt", {"npu 0": True, "npu 1": False}),
    ("910-phy-id-mixed.txt", {"npu 0 chip 0": False, "npu 0 chip 1": False,
                              "npu 1 chip 0": False, "npu 1 chip 1": True}),
    ("310-atlas300i-idle.txt", {"npu 0": False}),
])
def test_only_a_chip_that_lists_processes_answers_for_them(
        fixture: str, lists: dict[str, bool], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    readings = query(tmp_path, monkeypatch, (RECORDED / fixture).read_text())
    assert {i: r.lists_processes for i, r in readings.items()} == lists
    assert all(r.state == "idle" for r in readings.values())  # the load is read all the same
    report = IdleReport("idle", tuple(readings.values()), ())
    assert report.process_view("ascend", len(lists)) == ""


@pytest.mark.skipif(os.geteuid() != 0, reason="as root, an unread process may be vouched for")
def test_unread_process_as_root_with_npu_smi_listing_none_is_unknown(
        make_config: Any, node: str, holders: Holders, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The process the guard could not read (one stuck in a driver call) may hold the NPU:
    npu-smi's "No running processes found" does not vouch for it."""
    monkeypatch.setitem(FAMILY_NODES, "ascend", {"compute": (node,)})
    monkeypatch.setenv("FAKE_NPU_SMI_INFO", str(RECORDED / "310-atlas300i-idle.txt"))
    _job, pid = holders.start(node)

    def check(idle: IdleConfig, families: Sequence[str], deadline: Deadline) -> IdleReport:
        cfg = replace(idle, npu_smi=str(FAKE), backends=("npu-smi",), interval_ms=10,
                      settle_s=0.3)
        return check_idle(cfg, families, deadline, backends=[NpuSmiBackend(cfg)])

    report = guard(make_config(devices={"families": ["ascend"], "nodes": []}),
                   proc=RefusingFds(pid), idle_check=check)
    assert report.verdict.kind == "unknown", (report.verdict.texts, report.verdict.warnings)
    [reason] = report.verdict.reasons
    assert reason.code == "uninspected"
    assert reason.text.startswith(
        f"1 process could not be inspected as root (pids {pid}), and no device view answers "
        "for every device, process lists included (ascend)"), reason.text
    assert not any("answers for every device" in w for w in report.verdict.warnings)
    assert holders.signals() == []


def test_process_row_without_a_pid_leaves_every_list_not_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = edited(TWO_CHIPS, "| 326430          |                          | 108 ",
                  "| N/A             |                          | 108 ")
    readings = query(tmp_path, monkeypatch, text)
    # Chip 0 still names the process it lists, but no chip answers for all of them.
    assert [p.pid for p in readings["npu 0 chip 0"].processes] == [326429]
    assert {i: r.lists_processes for i, r in readings.items()} == {
        "npu 0 chip 0": False, "npu 0 chip 1": False, "npu 96": False}
    assert all("1 row(s) name no process read here: the list is not whole" in r.reason
               for r in readings.values())
    info = parse_info(text)
    assert [p.pid for p in info.processes] == [326429, 326430] and info.unread == 1


def test_process_table_under_an_unknown_header_makes_no_chips(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Read as chips, the process rows of the 310P3 capture made a fourth chip, npu 0 chip 0
    again, its pid read as Health and a process's memory as Power."""
    text = edited(TWO_CHIPS, "| Process id      |", "| PID             |")
    info = parse_info(text)
    assert [(c.npu, c.chip) for c in info.chips] == [(0, 0), (0, 1), (96, 0)]
    assert [c.health for c in info.chips] == ["OK", "OK", "OK"]
    assert (info.processes, info.process_table) == ((), False) and info.unread > 0
    readings = query(tmp_path, monkeypatch, text)
    assert {i: r.readings["aicore_pct"] for i, r in readings.items()} == {
        "npu 0 chip 0": 38.0, "npu 0 chip 1": 41.0, "npu 96": 0.0}
    for r in readings.values():
        assert not r.lists_processes
        assert "npu-smi prints a table that is not read here" in r.reason


def test_one_chip_twice_is_a_table_not_understood(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = (RECORDED / "910b2c-hbm-one-process.txt").read_text()
    text = edited(text, "| 1     910B2C ", "| 0     910B2C ")
    info = parse_info(text)
    assert (info.chips, info.processes, info.process_table) == ((), (), False)
    # The backend then asks `npu-smi info -l`, which this fake cannot answer: no NPU found.
    with pytest.raises(QueryFailed, match="no NPU found"):
        query(tmp_path, monkeypatch, text)
