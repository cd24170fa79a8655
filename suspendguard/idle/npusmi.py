"""The npu-smi backend: Ascend's own management tool, read as text.

``npu-smi info`` prints a table whose layout changes with chip and version
(see tests/fixtures/npu-smi/). The parser keys on header words rather than
column positions, so an unseen layout degrades to fewer readings, not to a
wrong answer. Where ``info`` gives no AI Core figure (edge boards), the
per-chip ``npu-smi info -t usages`` fills it in; where ``info`` yields no
chip at all, ``npu-smi info -l`` says which NPUs and chips to ask.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from suspendguard.config import IDLE_BACKENDS, IdleConfig
from suspendguard.idle.base import (
    Backend,
    DeviceProcess,
    DeviceReading,
    QueryFailed,
    ascend_device_id,
    find_command,
)
from suspendguard.system import runner

NOT_SUPPORTED = "does not support querying"
LISTED_AT_MOST = 8

_UTIL_LABEL = re.compile(r"(AICore|NPU\s*Util)\s*\(%\)", re.IGNORECASE)
_USAGE_LABEL = re.compile(r"([A-Za-z]+)-Usage\(MB\)")
_PAIR = re.compile(r"(\S+?)\s*/\s*(\S+)")
_NO_PROCESSES = re.compile(r"No running processes found in NPU\s+(\d+)", re.IGNORECASE)
_KEY_VALUE = re.compile(r"^\s*(.+?)\s*:\s*(.*?)\s*$")

# `-t usages` keys that have a meaning elsewhere in the package; the rest
# keep a derived name ("Ctrlcpu Usage Rate(%)" -> ctrlcpu_usage_rate_pct).
# The spellings are npu-smi's own (its npu_info_print.c prints them per chip):
# "Aivector" on 910B/910_93/950, "Vectorcore" (no space) on 310P, and from the
# 25.x releases "NPU Utilization(%)" (comprehensive utilization) and "Aicube
# Usage Rate(%)" on 910B/910_93/950. Captures: tests/fixtures/npu-smi/usages-*.
_USAGE_KEYS = {
    "aicore usage rate(%)": "aicore_pct",
    "npu utilization(%)": "aicore_pct",
    "aicube usage rate(%)": "cube_pct",
    "aivector usage rate(%)": "vector_pct",
    "vectorcore usage rate(%)": "vector_pct",
    "vector core usage rate(%)": "vector_pct",
    "aicpu usage rate(%)": "aicpu_pct",
    "memory usage rate(%)": "memory_pct",
    "hbm usage rate(%)": "hbm_pct",
}


def number(text: str) -> float | None:
    """A figure from npu-smi; NA, N/A, - and blanks are no figure."""
    try:
        return float(text)
    except ValueError:
        return None


@dataclass(frozen=True)
class NpuChip:
    npu: int
    chip: int
    name: str
    health: str
    readings: dict[str, float | None] = field(default_factory=dict)


@dataclass(frozen=True)
class NpuProcess:
    npu: int
    chip: int
    pid: int
    name: str
    memory_mb: float | None


@dataclass(frozen=True)
class NpuSmiInfo:
    """What one ``npu-smi info`` text says."""

    chips: tuple[NpuChip, ...]
    processes: tuple[NpuProcess, ...]
    process_table: bool  # False on boards that print none (RC/edge)
    # Rows that name no process this parser can read: in the process table (a pid of
    # N/A), or in a table after the chips under a header it does not know (with that
    # header). Where there are any, the process lists are not whole.
    unread: int = 0


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _ints(cells: Iterable[str]) -> list[int]:
    """Leading integer tokens of the id cells (NPU, chip, device or phy id)."""
    out: list[int] = []
    for token in " ".join(cells).split():
        if not token.isdigit():
            break
        out.append(int(token))
    return out


def _index_of(cells: list[str], prefix: str) -> int | None:
    for i, cell in enumerate(cells):
        if cell.lower().startswith(prefix.lower()):
            return i
    return None


def parse_info(text: str) -> NpuSmiInfo:
    """Parse ``npu-smi info`` in every known layout; never raises on odd text."""
    chips: list[NpuChip] = []
    processes: list[NpuProcess] = []
    process_table = False
    mode = ""  # "", "dev-header2", "dev", "proc"
    health_at = 1  # index of the Health / Bus-Id cell in device rows
    top_labels: list[str] = []
    util_label = False
    usage_labels: list[str] = []
    pending: list[str] | None = None  # first row of a device's two-row entry
    process_at = 1
    unread = 0

    for line in text.splitlines():
        if not line.lstrip().startswith("|"):
            # A chip's two rows are adjacent rows of one block: a first row
            # left waiting at a separator must not pair with the next chip's.
            pending = None
            continue
        cells = _cells(line)
        health = _index_of(cells, "Health")
        if health is not None:
            mode, health_at, pending = "dev-header2", health, None
            top_labels = cells[-1].split()
            continue
        if mode == "dev-header2":
            bottom = cells[-1]
            # The figure is read as the data cell's first token, so only a
            # label that comes first says where it is; elsewhere it is left
            # to `-t usages`.
            util_label = _UTIL_LABEL.match(bottom) is not None
            usage_labels = [m.lower() for m in _USAGE_LABEL.findall(bottom)]
            mode = "dev"
            continue
        proc_at = _index_of(cells, "Process id")
        if proc_at is not None:
            mode, process_at, process_table = "proc", proc_at, True
            continue
        if mode == "dev" and len(cells) > health_at:
            if pending is None:
                if _ints(cells[:health_at]):
                    pending = cells
                elif chips:
                    # A row after the chips that starts none is the next table's header
                    # (a process table under a header not known here): its rows are
                    # no chips, and what they list is not read.
                    mode, unread = "other", unread + 1
                continue
            chip = _chip(pending, cells, health_at, top_labels, util_label, usage_labels)
            if any((c.npu, c.chip) == (chip.npu, chip.chip) for c in chips):
                # One chip twice: rows were paired that are not one chip's, so no
                # row of this table can be trusted (the backend then asks `-l`).
                return NpuSmiInfo((), (), False, unread=1)
            chips.append(chip)
            pending = None
        elif mode in ("proc", "other") and not _NO_PROCESSES.search(line):
            proc = _process(cells, process_at) if mode == "proc" else None
            if proc is not None:
                processes.append(proc)
            elif any(cells):
                unread += 1
    return NpuSmiInfo(tuple(chips), tuple(processes), process_table, unread)


def _chip(
    first: list[str], second: list[str], health_at: int,
    top_labels: list[str], util_label: bool, usage_labels: list[str],
) -> NpuChip:
    ids = _ints(first[:health_at])
    name = " ".join(" ".join(first[:health_at]).split()[1:])
    chip_ids = _ints(second[:health_at])
    readings: dict[str, float | None] = {}
    top = first[-1].split()
    for label, key in (("Power(W)", "power_w"), ("Temp(C)", "temp_c")):
        if label in top_labels:
            at = top_labels.index(label)
            readings[key] = number(top[at]) if at < len(top) else None
    bottom = second[-1]
    if util_label:
        head, _, bottom = bottom.partition(" ")
        readings["aicore_pct"] = number(head)
    for label, (used, total) in zip(usage_labels, _PAIR.findall(bottom), strict=False):
        readings[f"{label}_used_mb"] = number(used)
        readings[f"{label}_total_mb"] = number(total)
    return NpuChip(
        npu=ids[0], chip=chip_ids[0] if chip_ids else 0, name=name,
        health=first[health_at], readings=readings,
    )


def _process(cells: list[str], at: int) -> NpuProcess | None:
    ids = _ints(cells[:at])
    if not ids or len(cells) <= at or not cells[at].isdigit():
        return None
    name = cells[at + 1] if len(cells) > at + 1 else ""
    memory = number(cells[at + 2]) if len(cells) > at + 2 else None
    return NpuProcess(ids[0], ids[1] if len(ids) > 1 else 0, int(cells[at]), name, memory)


def parse_list(text: str) -> list[tuple[int, int]]:
    """``npu-smi info -l``: (NPU id, chip count) for each NPU listed."""
    out: list[tuple[int, int]] = []
    npu: int | None = None
    for line in text.splitlines():
        m = _KEY_VALUE.match(line)
        if not m:
            continue
        key, value = m.group(1).lower(), m.group(2)
        if key == "npu id" and value.isdigit():
            if npu is not None:
                out.append((npu, 1))
            npu = int(value)
        elif key == "chip count" and npu is not None and value.isdigit():
            out.append((npu, int(value)))
            npu = None
    if npu is not None:
        out.append((npu, 1))
    return out


def parse_usages(text: str) -> dict[str, float | None] | None:
    """``npu-smi info -t usages``; None when the device does not support it."""
    if NOT_SUPPORTED in text:
        return None
    out: dict[str, float | None] = {}
    for line in text.splitlines():
        m = _KEY_VALUE.match(line)
        if not m:
            continue
        key = m.group(1).lower()
        name = _USAGE_KEYS.get(key)
        if name is None:
            name = re.sub(r"[^a-z0-9]+", "_", key.replace("(%)", " pct").replace("(mb)", " mb"))
            name = name.strip("_")
        value = number(m.group(2))
        if name in out:
            # Two spellings of one figure ("Aicore Usage Rate" and "NPU
            # Utilization" on 25.x): the higher counts, so no load is missed.
            have = out[name]
            if value is None or (have is not None and have >= value):
                continue
        out[name] = value
    return out


class NpuSmiBackend(Backend):
    declared = IDLE_BACKENDS["npu-smi"]

    def __init__(self, config: IdleConfig) -> None:
        super().__init__(config)
        self.tool = config.npu_smi

    def probe(self) -> tuple[bool, str]:
        return find_command(self.tool, "npu_smi")

    def _run(self, args: list[str], until: float) -> runner.RunResult:
        left = until - time.monotonic()
        if left <= 0:
            raise QueryFailed(f"{self.tool} {' '.join(args)}: no time left")
        return runner.run([self.tool, *args], timeout=left)

    def query(self, timeout_s: float) -> list[DeviceReading]:
        until = time.monotonic() + timeout_s
        result = self._run(["info"], until)
        if not result.ok:
            raise QueryFailed(result.describe_failure())
        info = parse_info(result.stdout)
        chips = list(info.chips)
        if not chips:
            # A layout this parser does not know: `-l` still names the chips,
            # and `-t usages` reads each one.
            listed = self._run(["info", "-l"], until)
            if listed.ok:
                chips = [NpuChip(npu, chip, "", "")
                         for npu, count in parse_list(listed.stdout) for chip in range(count)]
            if not chips:
                raise QueryFailed(f"{self.tool} info: no NPU found in its output")
        per_npu: dict[int, int] = {}
        for chip in chips:
            per_npu[chip.npu] = per_npu.get(chip.npu, 0) + 1

        out: list[DeviceReading] = []
        for chip in chips:
            readings = dict(chip.readings)
            notes: list[str] = []
            if readings.get("aicore_pct") is None:
                usages, note = self._usages(chip, until)
                readings.update({k: v for k, v in usages.items() if v is not None
                                 or k not in readings})
                if note:
                    notes.append(note)
            ident = ascend_device_id(chip.npu, chip.chip, per_npu[chip.npu])
            procs = tuple(
                DeviceProcess(p.pid, p.name, p.memory_mb, ident, self.name)
                for p in info.processes if (p.npu, p.chip) == (chip.npu, chip.chip)
            )
            if not info.process_table:
                notes.append("npu-smi prints a table that is not read here: "
                             "its processes are unknown" if info.unread
                             else "npu-smi lists no processes on this board")
            elif info.unread:
                notes.append(f"npu-smi process table: {info.unread} row(s) name no process "
                             "read here: the list is not whole")
            # An empty list proves nothing: npu-smi prints "No running processes found"
            # whenever its count is 0, which it also is where reading the processes failed
            # or is not supported. Some products list at most eight per chip.
            complete = (info.process_table and not info.unread
                        and 0 < len(procs) < LISTED_AT_MOST)
            out.append(replace(self.reading(ident, readings, procs, "; ".join(notes),
                                            lists_processes=complete), health=chip.health))
        return out + self._off_table(info.processes, {(c.npu, c.chip) for c in chips}, per_npu)

    def _off_table(self, processes: Iterable[NpuProcess], shown: set[tuple[int, int]],
                   per_npu: dict[int, int]) -> list[DeviceReading]:
        """Processes npu-smi lists on a chip its chip table does not show: a reading of
        their own, with no load figure (unknown), so that their holders are still found."""
        off: dict[tuple[int, int], list[NpuProcess]] = {}
        for p in processes:
            if (p.npu, p.chip) not in shown:
                off.setdefault((p.npu, p.chip), []).append(p)
        out = []
        for (npu, chip), listed in off.items():
            ident = ascend_device_id(npu, chip, per_npu.get(npu, 0) + 1)
            procs = tuple(DeviceProcess(p.pid, p.name, p.memory_mb, ident, self.name)
                          for p in listed)
            out.append(self.reading(ident, {}, procs, "npu-smi lists processes on this chip "
                                    "but no row of its own in the chip table"))
        return out

    def health(self, timeout_s: float) -> list[tuple[str, str]]:
        """(device id, npu-smi's Health word: OK, Warning, Alarm, Critical, ...) for each chip."""
        result = self._run(["info"], time.monotonic() + timeout_s)
        if not result.ok:
            raise QueryFailed(result.describe_failure())
        chips = parse_info(result.stdout).chips
        if not chips:
            raise QueryFailed(f"{self.tool} info: no NPU found in its output")
        per_npu: dict[int, int] = {}
        for chip in chips:
            per_npu[chip.npu] = per_npu.get(chip.npu, 0) + 1
        return [(ascend_device_id(c.npu, c.chip, per_npu[c.npu]), c.health) for c in chips]

    def _usages(self, chip: NpuChip, until: float) -> tuple[dict[str, float | None], str]:
        args = ["info", "-t", "usages", "-i", str(chip.npu), "-c", str(chip.chip)]
        try:
            result = self._run(args, until)
        except QueryFailed as exc:
            return {}, str(exc)
        if NOT_SUPPORTED in result.stdout + result.stderr:
            return {"aicore_pct": None}, "npu-smi usages: not supported"
        if not result.ok:
            return {}, f"usages: {result.describe_failure()}"
        parsed = parse_usages(result.stdout)
        if parsed is None:
            return {"aicore_pct": None}, "npu-smi usages: not supported"
        return parsed, ""
