"""The nvidia-smi backend: NVIDIA's own tool, read as CSV.

nvidia-smi ships with the driver, so this backend needs no Python package:
a host installed from the Debian package (which has no python3-pynvml)
still gets a real answer. It asks for the tool's machine-readable form
(one line per GPU, one per compute process) rather than the table, whose
layout is for people. The process name comes last because it is a path and
may itself hold ", ". A figure nvidia-smi cannot give reads ``[N/A]`` or
``[Not Supported]`` (a MIG-enabled GPU has no whole-GPU utilization): no
figure, so that GPU is unknown, never idle.
"""

from __future__ import annotations

import os
import time

from suspendguard.config import IDLE_BACKENDS, IdleConfig
from suspendguard.idle.base import (
    Backend,
    DeviceProcess,
    DeviceReading,
    QueryFailed,
    find_command,
)
from suspendguard.system import runner

GPU_FIELDS = ("index", "uuid", "utilization.gpu", "utilization.memory", "memory.used",
              "memory.total")
APP_FIELDS = ("gpu_uuid", "pid", "used_gpu_memory", "process_name")
FORMAT = "--format=csv,noheader,nounits"
# Bracketed words that only say a figure is not available; any other
# bracket is NVML's error for that GPU, kept as its reason
# ("[GPU requires reset]", "[GPU is lost]", "[Unknown Error]").
NO_FIGURE = ("[N/A]", "[Not Supported]")


def figure(text: str) -> float | None:
    """A number from nvidia-smi; ``[N/A]``, ``[Not Supported]`` and blanks are none."""
    try:
        return float(text)
    except ValueError:
        return None


def _rows(text: str, width: int) -> list[list[str]]:
    """CSV lines of ``width`` fields; the last field keeps any ", " of its own."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",", width - 1)]
        if len(cells) == width:
            rows.append(cells)
    return rows


def parse_gpus(text: str) -> list[tuple[int, str, dict[str, float | None], str]]:
    """``--query-gpu`` output: (index, uuid, readings, NVML's error words or "") per GPU."""
    out = []
    for index, uuid, gpu, memory, used, total in _rows(text, len(GPU_FIELDS)):
        if not index.isdigit():
            continue
        said = [c[1:-1] for c in (gpu, memory, used, total)
                if c.startswith("[") and c.endswith("]") and c not in NO_FIGURE]
        out.append((int(index), uuid, {"gpu_pct": figure(gpu), "gpu_memory_pct": figure(memory),
                                       "memory_used_mb": figure(used),
                                       "memory_total_mb": figure(total)},
                    "; ".join(dict.fromkeys(said))))
    return out


def parse_apps(text: str) -> list[tuple[str, int, float | None, str]]:
    """``--query-compute-apps`` output: (gpu uuid, pid, MiB, name) per process."""
    return [(uuid, int(pid), figure(used), name)
            for uuid, pid, used, name in _rows(text, len(APP_FIELDS)) if pid.isdigit()]


class NvidiaSmiBackend(Backend):
    declared = IDLE_BACKENDS["nvidia-smi"]
    # Asked only when no other NVIDIA backend (NVML) can be used here.
    fallback = True

    def __init__(self, config: IdleConfig) -> None:
        super().__init__(config)
        self.tool = config.nvidia_smi

    def probe(self) -> tuple[bool, str]:
        return find_command(self.tool, "nvidia_smi", "; it ships with the NVIDIA driver")

    def _ask(self, query: str, until: float) -> str:
        left = until - time.monotonic()
        if left <= 0:
            raise QueryFailed(f"{self.tool} {query}: no time left")
        result = runner.run([self.tool, query, FORMAT], timeout=left)
        if not result.ok:
            why = result.describe_failure()
            said = result.stdout.strip().splitlines()
            # nvidia-smi writes its own errors to stdout ("... couldn't
            # communicate with the NVIDIA driver").
            if said and not result.stderr.strip():
                why += f": {said[-1][:200]}"
            raise QueryFailed(why)
        return result.stdout

    def query(self, timeout_s: float) -> list[DeviceReading]:
        until = time.monotonic() + timeout_s
        gpus = parse_gpus(self._ask("--query-gpu=" + ",".join(GPU_FIELDS), until))
        if not gpus:
            raise QueryFailed(f"{self.tool} --query-gpu: no GPU found in its output")
        apps_known, note = True, ""
        try:
            text = self._ask("--query-compute-apps=" + ",".join(APP_FIELDS), until)
            apps = parse_apps(text)
        except QueryFailed as exc:
            apps, apps_known, note = [], False, f"compute processes: {exc}"
        else:
            # A row with no pid ([N/A]), or on no GPU listed here (a MIG instance, a GPU
            # --query-gpu did not print): the list is not the whole of them.
            uuids = {uuid for _i, uuid, _r, _s in gpus}
            unplaced = len(_rows(text, len(APP_FIELDS))) - sum(1 for a in apps if a[0] in uuids)
            if unplaced:
                apps_known = False
                note = (f"compute processes: {unplaced} row(s) name no pid or no GPU listed "
                        "here: the list is not whole")
        out = []
        for index, uuid, readings, said in gpus:
            ident = f"gpu {index}"
            procs = tuple(DeviceProcess(pid, os.path.basename(name), used, ident, self.name)
                          for app_uuid, pid, used, name in apps if app_uuid == uuid)
            why = "; ".join(w for w in (said, note) if w)
            out.append(self.reading(ident, readings, procs, why, lists_processes=apps_known))
        return out
