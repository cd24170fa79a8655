"""The NVML backend: NVIDIA's management library through ``pynvml``.

``pynvml`` comes from the nvidia-ml-py package (the optional extra
``suspendguard[nvidia]``); it is imported here and nowhere else. NVML is a
C library called in this process, so each query runs under
base.call_with_timeout. Every call goes through ``_ask``, the one place an
NVMLError becomes Unavailable: an unknown reading or a failed query, never
an exception for the pipeline.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

from suspendguard.config import IDLE_BACKENDS
from suspendguard.idle.base import (
    Backend,
    DeviceProcess,
    DeviceReading,
    QueryFailed,
    call_with_timeout,
)
from suspendguard.model import Unavailable

MB = 1024 * 1024
T = TypeVar("T")


def _load() -> ModuleType:
    # pynvml is an optional extra: imported by name when asked for, so a
    # host without it still runs every other backend.
    try:
        return importlib.import_module("pynvml")
    except ImportError as exc:
        raise QueryFailed(
            f"pynvml not importable ({exc}); install nvidia-ml-py (suspendguard[nvidia])"
        ) from None


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _ask(nvml: ModuleType, fn: Callable[..., T], *args: Any) -> T | Unavailable:
    """``fn(*args)``, or Unavailable with NVML's words when it answers with an error."""
    try:
        return fn(*args)
    except nvml.NVMLError as exc:
        return Unavailable(_text(exc))


class NvmlBackend(Backend):
    declared = IDLE_BACKENDS["nvml"]

    def probe(self) -> tuple[bool, str]:
        try:
            _load()
        except QueryFailed as exc:
            return False, str(exc)
        return True, "pynvml"

    def query(self, timeout_s: float) -> list[DeviceReading]:
        nvml = _load()
        return call_with_timeout(lambda: self._read(nvml), timeout_s, "nvml")

    def _read(self, nvml: ModuleType) -> list[DeviceReading]:
        # Init and shut down around every query: an initialised NVML keeps
        # /dev/nvidiactl and /dev/nvidiaN open in the guard, which must hold
        # no device node of its own when the suspend goes on.
        started = _ask(nvml, nvml.nvmlInit)
        if isinstance(started, Unavailable):
            raise QueryFailed(f"NVML: {started.reason}")
        try:
            count = _ask(nvml, nvml.nvmlDeviceGetCount)
            if isinstance(count, Unavailable):
                raise QueryFailed(f"NVML: {count.reason}")
            return [self._device(nvml, index) for index in range(count)]
        finally:
            # the readings are taken; a failed shutdown changes none of them
            _ask(nvml, nvml.nvmlShutdown)

    def _device(self, nvml: ModuleType, index: int) -> DeviceReading:
        ident = f"gpu {index}"
        notes: list[str] = []
        readings: dict[str, float | None] = {"gpu_pct": None, "gpu_memory_pct": None}
        handle = _ask(nvml, nvml.nvmlDeviceGetHandleByIndex, index)
        if isinstance(handle, Unavailable):
            return self.reading(ident, readings, (), f"NVML handle: {handle.reason}")
        util = _ask(nvml, nvml.nvmlDeviceGetUtilizationRates, handle)
        if isinstance(util, Unavailable):
            notes.append(f"utilization: {util.reason}")
        else:
            readings["gpu_pct"] = float(util.gpu)
            readings["gpu_memory_pct"] = float(util.memory)
        memory = _ask(nvml, nvml.nvmlDeviceGetMemoryInfo, handle)
        if isinstance(memory, Unavailable):
            notes.append(f"memory: {memory.reason}")
        else:
            readings["memory_used_mb"] = memory.used / MB
            readings["memory_total_mb"] = memory.total / MB
        processes: dict[int, DeviceProcess] = {}
        complete = True
        for kind, call in (("compute", nvml.nvmlDeviceGetComputeRunningProcesses),
                           ("graphics", nvml.nvmlDeviceGetGraphicsRunningProcesses)):
            found = _ask(nvml, call, handle)
            if isinstance(found, Unavailable):
                notes.append(f"{kind} processes: {found.reason}")
                complete = False
                continue
            for proc in found:
                used = getattr(proc, "usedGpuMemory", None)
                if proc.pid not in processes:
                    processes[proc.pid] = DeviceProcess(
                        int(proc.pid), self._process_name(nvml, proc.pid),
                        None if used is None else used / MB, ident, self.name, kind,
                    )
        return self.reading(ident, readings, tuple(processes.values()), "; ".join(notes),
                            lists_processes=complete)

    @staticmethod
    def _process_name(nvml: ModuleType, pid: int) -> str:
        name = _ask(nvml, nvml.nvmlSystemGetProcessName, pid)
        # the /proc scan names it; NVML often cannot across namespaces
        return "" if isinstance(name, Unavailable) else _text(name)
