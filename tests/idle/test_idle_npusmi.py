"""npu-smi: the parser on every recorded layout, and the backend on a fake tool."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from helpers import TESTS

from suspendguard.config import IdleConfig, defaults
from suspendguard.idle.base import LOAD_READINGS, QueryFailed
from suspendguard.idle.npusmi import NpuSmiBackend, parse_info, parse_list, parse_usages

HERE = TESTS
RECORDED = HERE / "fixtures" / "npu-smi"
MADE = HERE / "fakes" / "idle" / "npu-smi-fixtures"
FAKE = HERE / "fakes" / "idle" / "npu-smi"

# fixture -> ({device id: AI Core %}, [(pid, device id, name, MB)], has a process table)
LAYOUTS = {
    RECORDED / "310-atlas300i-idle.txt": ({"npu 0": 0.0}, [], True),
    RECORDED / "310b4-edge-no-process-table.txt": ({"npu 0": 0.0}, [], False),
    RECORDED / "310p3-large-npu-id-idle.txt": ({"npu 32896": 0.0}, [], True),
    RECORDED / "310p3-two-chips-blank-process-names.txt": (
        {"npu 0 chip 0": 38.0, "npu 0 chip 1": 41.0, "npu 96": 0.0},
        [(326429, "npu 0 chip 0", "", 33842.0), (326430, "npu 0 chip 0", "", 108.0),
         (326430, "npu 0 chip 1", "", 34086.0)],
        True,
    ),
    RECORDED / "910-phy-id-mixed.txt": (
        {"npu 0 chip 0": 0.0, "npu 0 chip 1": 0.0, "npu 1 chip 0": 0.0, "npu 1 chip 1": 0.0},
        [(990711, "npu 1 chip 1", "python", 7746.0)],
        True,
    ),
    RECORDED / "910b2c-hbm-one-process.txt": (
        {"npu 0": 0.0, "npu 1": 0.0}, [(124528, "npu 0", "python3.8", 17400.0)], True,
    ),
    MADE / "950-npu-id-reconstructed.txt": (
        {"npu 0": 0.0, "npu 1": 87.0}, [(2210457, "npu 1", "python3.11", 54896.0)], True,
    ),
}


def config(**kw: object) -> IdleConfig:
    base = replace(defaults().idle, npu_smi=str(FAKE), command_timeout_s=5.0)
    return replace(base, **kw)  # type: ignore[arg-type]


@pytest.fixture
def tool_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    log = tmp_path / "calls.log"
    monkeypatch.setenv("FAKE_NPU_SMI_LOG", str(log))
    for name in ("FAKE_NPU_SMI_INFO", "FAKE_NPU_SMI_LIST", "FAKE_NPU_SMI_USAGES",
                 "FAKE_NPU_SMI_MODE"):
        monkeypatch.delenv(name, raising=False)
    return log


def calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_usages_310p_vectorcore_is_the_vector_figure() -> None:
    text = (RECORDED / "usages-310p-two-chips.txt").read_text()
    usages = parse_usages(text)
    assert usages is not None
    assert usages["vector_pct"] == 0.0 and "vectorcore_usage_rate_pct" not in usages
    busy = parse_usages(text.replace("Vectorcore Usage Rate(%)       : 0",
                                     "Vectorcore Usage Rate(%)       : 64", 1))
    assert busy is not None and busy["vector_pct"] == 64.0
    assert "vector_pct" in LOAD_READINGS


def test_usages_25x_npu_utilization_and_aicube_are_compute_load() -> None:
    text = (RECORDED / "usages-25x-npu-utilization-aicube.txt").read_text()
    usages = parse_usages(text)
    assert usages is not None
    assert usages["aicore_pct"] == 0.0 and usages["cube_pct"] == 0.0
    assert "npu_utilization_pct" not in usages and "aicube_usage_rate_pct" not in usages
    # The same capture under load: either figure alone makes the chip busy.
    util = parse_usages(text.replace("NPU Utilization(%)             : 0",
                                     "NPU Utilization(%)             : 37"))
    assert util is not None and util["aicore_pct"] == 37.0  # the higher of the two spellings
    cube = parse_usages(text.replace("Aicube Usage Rate(%)           : 0",
                                     "Aicube Usage Rate(%)           : 46"))
    assert cube is not None and cube["cube_pct"] == 46.0 and cube["aicore_pct"] == 0.0
    assert {"aicore_pct", "cube_pct"} <= set(LOAD_READINGS)
    # The higher spelling wins whichever comes first.
    both = parse_usages("Aicore Usage Rate(%) : 83\nNPU Utilization(%) : 12\n")
    assert both is not None and both["aicore_pct"] == 83.0


@pytest.mark.parametrize("fixture", list(LAYOUTS), ids=lambda p: p.name)
def test_parser_reads_every_layout(fixture: Path) -> None:
    aicore, processes, table = LAYOUTS[fixture]
    info = parse_info(fixture.read_text())
    assert len(info.chips) == len(aicore)
    assert [c.readings["aicore_pct"] for c in info.chips] == list(aicore.values())
    assert info.process_table is table
    assert [(p.pid, p.name, p.memory_mb) for p in info.processes] == \
        [(pid, name, mb) for pid, _, name, mb in processes]


def test_parser_keeps_na_and_dash_as_no_figure() -> None:
    info = parse_info((RECORDED / "910-phy-id-mixed.txt").read_text())
    assert [c.readings["power_w"] for c in info.chips] == [162.8, None, 167.1, None]
    hbm = parse_info((RECORDED / "910b2c-hbm-one-process.txt").read_text()).chips[0].readings
    assert (hbm["hbm_used_mb"], hbm["hbm_total_mb"]) == (20701.0, 65536.0)
    large = parse_info((RECORDED / "310p3-large-npu-id-idle.txt").read_text()).chips[0]
    assert (large.npu, large.name, large.readings["power_w"]) == (32896, "310P3", None)


@pytest.mark.parametrize("text", ["", "garbage\n| a | b |\n",
                                  "| NPU | Health |\n| x |\n| 0 1 | OK | NA |\n"])
def test_parser_finds_nothing_in_text_it_does_not_know(text: str) -> None:
    # Nothing made up from half-read rows: no chip (the backend then says
    # it found no NPU: unknown), and no process table, so an empty process
    # list is never read as "no process holds the NPU".
    info = parse_info(text)
    assert (info.chips, info.processes, info.process_table) == ((), (), False)


def test_list_says_total_count_or_card_count() -> None:
    assert parse_list((RECORDED / "list-22.0.4.txt").read_text()) == [(0, 1)]
    assert parse_list((RECORDED / "list-a3.txt").read_text()) == [(0, 2)]


def test_usages_lines_and_unsupported() -> None:
    usages = parse_usages((RECORDED / "usages-atlas200i-a2.txt").read_text())
    assert usages is not None
    assert usages["aicore_pct"] == 0.0 and usages["aicpu_pct"] == 9.0
    assert parse_usages((RECORDED / "proc-mem-unsupported-atlas200i-a2.txt").read_text()) is None


@pytest.mark.parametrize("fixture", list(LAYOUTS), ids=lambda p: p.name)
def test_backend_on_each_layout(fixture: Path, tool_log: Path,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    aicore, processes, table = LAYOUTS[fixture]
    monkeypatch.setenv("FAKE_NPU_SMI_INFO", str(fixture))
    backend = NpuSmiBackend(config())
    assert backend.probe() == (True, str(FAKE))
    readings = backend.query(5.0)
    assert {r.id: r.readings["aicore_pct"] for r in readings} == aicore
    for r in readings:
        assert r.state == ("busy" if aicore[r.id] > 0 else "idle")
        assert (r.family, r.source) == ("ascend", "npu-smi")
        assert ("lists no processes" in r.reason) is not table
    got = [(p.pid, p.device, p.name, p.memory_mb) for r in readings for p in r.processes]
    assert sorted(got) == sorted(processes)
    assert calls(tool_log) == ["info"]  # every layout gives AI Core: no extra calls


def test_edge_board_without_aicore_column_asks_usages(
        tool_log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NPU_SMI_INFO", str(MADE / "310b4-edge-no-aicore-column-reconstructed.txt"))
    monkeypatch.setenv("FAKE_NPU_SMI_USAGES", str(RECORDED / "usages-atlas200i-a2.txt"))
    [reading] = NpuSmiBackend(config()).query(5.0)
    assert calls(tool_log) == ["info", "info -t usages -i 0 -c 0"]
    assert reading.state == "idle"
    assert reading.readings["aicore_pct"] == 0.0
    assert reading.readings["aicpu_pct"] == 9.0  # shown, but decides nothing
    assert reading.readings["memory_used_mb"] == 3628.0


def test_unsupported_usages_is_unknown_never_busy(
        tmp_path: Path, tool_log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    unsupported = tmp_path / "usages.txt"
    unsupported.write_text("\tThis device does not support querying usages.\n")
    monkeypatch.setenv("FAKE_NPU_SMI_INFO", str(MADE / "310b4-edge-no-aicore-column-reconstructed.txt"))
    monkeypatch.setenv("FAKE_NPU_SMI_USAGES", str(unsupported))
    [reading] = NpuSmiBackend(config()).query(5.0)
    assert reading.state == "unknown"
    assert "not supported" in reading.reason


def test_unknown_layout_falls_back_to_list_and_usages(
        tmp_path: Path, tool_log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    odd = tmp_path / "info.txt"
    odd.write_text("+----+\n| something npu-smi 99 prints |\n+----+\n")
    monkeypatch.setenv("FAKE_NPU_SMI_INFO", str(odd))
    monkeypatch.setenv("FAKE_NPU_SMI_LIST", str(RECORDED / "list-a3.txt"))
    monkeypatch.setenv("FAKE_NPU_SMI_USAGES", str(RECORDED / "usages-atlas200i-a2.txt"))
    readings = NpuSmiBackend(config()).query(5.0)
    assert [r.id for r in readings] == ["npu 0 chip 0", "npu 0 chip 1"]
    assert all(r.state == "idle" for r in readings)
    assert calls(tool_log) == ["info", "info -l", "info -t usages -i 0 -c 0",
                               "info -t usages -i 0 -c 1"]


def test_no_npu_at_all_is_a_failed_query(tmp_path: Path, tool_log: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "info.txt"
    empty.write_text("")
    monkeypatch.setenv("FAKE_NPU_SMI_INFO", str(empty))
    with pytest.raises(QueryFailed, match="no NPU found"):
        NpuSmiBackend(config()).query(5.0)


@pytest.mark.parametrize(("mode", "message"), [
    ("hang", "no answer within the timeout"),
    ("fail", "exit status 255: dcmi model initialized failed"),
    ("crash", "killed by SIGSEGV"),
])
def test_tool_that_hangs_fails_or_crashes(mode: str, message: str, tool_log: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NPU_SMI_MODE", mode)
    monkeypatch.setenv("FAKE_NPU_SMI_INFO", str(RECORDED / "310-atlas300i-idle.txt"))
    with pytest.raises(QueryFailed, match=message):
        NpuSmiBackend(config()).query(0.5)


def test_missing_tool(tmp_path: Path) -> None:
    missing = NpuSmiBackend(config(npu_smi=str(tmp_path / "npu-smi")))
    ok, why = missing.probe()
    assert not ok and "[idle] npu_smi" in why
    with pytest.raises(QueryFailed, match="command not found"):
        missing.query(1.0)
    ok, why = NpuSmiBackend(config(npu_smi="npu-smi-not-installed-here")).probe()
    assert not ok and "not found on PATH" in why


def test_process_on_a_chip_the_chip_table_does_not_show_is_kept(
        tool_log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process row whose NPU and chip have no chip row is still a holder the device names:
    dropped, the board read idle and the holder was never looked for."""
    monkeypatch.setenv("FAKE_NPU_SMI_INFO",
                       str(MADE / "910b2c-process-off-the-chip-table-reconstructed.txt"))
    readings = {r.id: r for r in NpuSmiBackend(config()).query(5.0)}
    assert sorted(readings) == ["npu 0", "npu 1", "npu 2"]
    off = readings["npu 2"]
    assert off.state == "unknown" and "no row of its own in the chip table" in off.reason
    assert [(p.pid, p.device, p.name, p.memory_mb) for p in off.processes] == [
        (124611, "npu 2", "python3.8", 8200.0)]
    assert [p.pid for p in readings["npu 0"].processes] == [124528]
    assert (readings["npu 0"].state, readings["npu 1"].state) == ("idle", "idle")


def _utilization_second(tmp_path: Path) -> Path:
    """The 910B2C capture as a made-up release might print it: AI Core % after the memory
    pair, chip 0 at 55 % and its memory "used" figure at 0."""
    text = (RECORDED / "910b2c-hbm-one-process.txt").read_text()
    text = text.replace("| AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |",
                        "| Memory-Usage(MB)  AICore(%)   HBM-Usage(MB)        |")
    text = text.replace("| 0           0    / 0          20701/ 65536         |",
                        "| 0    / 0          55          20701/ 65536         |")
    assert "55          20701" in text
    path = tmp_path / "info.txt"
    path.write_text(text)
    return path


def test_aicore_column_not_first_is_left_to_usages(
        tmp_path: Path, tool_log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first token is AI Core only when its label comes first: read anywhere else, chip 0
    would read its memory "used" 0 as an idle AI Core."""
    info = _utilization_second(tmp_path)
    chip = parse_info(info.read_text()).chips[0]
    assert chip.readings.get("aicore_pct") is None
    assert (chip.readings["memory_used_mb"], chip.readings["hbm_used_mb"]) == (0.0, 20701.0)

    usages = tmp_path / "usages-%i.txt"
    (tmp_path / "usages-0.txt").write_text("Aicore Usage Rate(%) : 55\n")
    (tmp_path / "usages-1.txt").write_text("Aicore Usage Rate(%) : 0\n")
    monkeypatch.setenv("FAKE_NPU_SMI_INFO", str(info))
    monkeypatch.setenv("FAKE_NPU_SMI_USAGES", str(usages))
    readings = {r.id: r for r in NpuSmiBackend(config()).query(5.0)}
    assert calls(tool_log) == ["info", "info -t usages -i 0 -c 0", "info -t usages -i 1 -c 0"]
    assert (readings["npu 0"].state, readings["npu 0"].readings["aicore_pct"]) == ("busy", 55.0)
    assert readings["npu 1"].state == "idle"


def _without(text: str, needle: str) -> str:
    lines = text.splitlines(keepends=True)
    assert sum(needle in line for line in lines) == 1
    return "".join(line for line in lines if needle not in line)


@pytest.mark.parametrize(("fixture", "second_row", "left"), [
    # NPU 0's second row: its first row then waited for NPU 1's (Power 99.6 read as AI Core).
    ("910b2c-hbm-one-process.txt", "0000:5A:00.0", {(1, 0): 0.0}),
    ("310p3-two-chips-blank-process-names.txt", "35846/ 44216", {(0, 1): 41.0, (96, 0): 0.0}),
])
def test_chip_missing_its_second_row_is_dropped_not_paired_across_a_separator(
        fixture: str, second_row: str, left: dict[tuple[int, int], float]) -> None:
    info = parse_info(_without((RECORDED / fixture).read_text(), second_row))
    assert {(c.npu, c.chip): c.readings["aicore_pct"] for c in info.chips} == left


def test_backend_reads_a_chip_missing_its_second_row_as_unknown(
        tmp_path: Path, tool_log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    info = tmp_path / "info.txt"
    info.write_text(_without((RECORDED / "910b2c-hbm-one-process.txt").read_text(),
                             "0000:5A:00.0"))
    monkeypatch.setenv("FAKE_NPU_SMI_INFO", str(info))
    readings = {r.id: r for r in NpuSmiBackend(config()).query(5.0)}
    # NPU 1 is read from its own rows; NPU 0 has only its process row left, so no figure.
    assert (readings["npu 1"].state, readings["npu 1"].readings["power_w"]) == ("idle", 99.6)
    assert readings["npu 0"].state == "unknown"
    assert all(r.readings.get("aicore_pct") != 99.6 for r in readings.values())
