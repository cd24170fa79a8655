"""The NVML backend: NVIDIA's management library through ``pynvml``.

``pynvml`` comes from the nvidia-ml-py package (the optional extra
``suspendguard[nvidia]``); it is imported here and nowhere else. NVML is a
C library called in this process, so each query runs under
base.call_with_timeout. Every NVMLError becomes an unknown reading or a
failed query, never an exception for the pipeline.
"""

from __future__ import annotations

import contextlib
import importlib
from types import ModuleType
from typing import Any

from suspendguard.idle.base import (
    Backend,
    DeviceProcess,
    DeviceReading,
    Family,
    QueryFailed,
    call_with_timeout,
)

MB = 1024 * 1024


def _load() -> ModuleType:
    try:
        return importlib.import_module("pynvml")
    except ImportError as exc:
        raise QueryFailed(
            f"pynvml not importable ({exc}); install nvidia-ml-py (suspendguard[nvidia])"
        ) from None


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class NvmlBackend(Backend):
    name = "nvml"
    family: Family = "nvidia"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._hung = ""

    def probe(self) -> tuple[bool, str]:
        try:
            _load()
        except QueryFailed as exc:
            return False, str(exc)
        return True, "pynvml"

    def query(self, timeout_s: float) -> list[DeviceReading]:
        if self._hung:
            raise QueryFailed(self._hung)
        nvml = _load()
        try:
            return call_with_timeout(lambda: self._read(nvml), timeout_s, "nvml")
        except QueryFailed as exc:
            if "abandoned" in str(exc):
                self._hung = f"{exc}; not asked again while that call is stuck"
            raise
        except nvml.NVMLError as exc:
            raise QueryFailed(f"NVML: {_text(exc)}") from None

    def _read(self, nvml: ModuleType) -> list[DeviceReading]:
        # Init and shut down around every query: an initialised NVML keeps
        # /dev/nvidiactl and /dev/nvidiaN open in the guard, which must hold
        # no device node of its own when the suspend goes on.
        nvml.nvmlInit()
        try:
            count = nvml.nvmlDeviceGetCount()
            return [self._device(nvml, index) for index in range(count)]
        finally:
            # the readings are taken; a failed shutdown changes none of them
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlShutdown()

    def _device(self, nvml: ModuleType, index: int) -> DeviceReading:
        ident = f"gpu {index}"
        notes: list[str] = []
        readings: dict[str, float | None] = {"gpu_pct": None, "gpu_memory_pct": None}
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
        except nvml.NVMLError as exc:
            return self.reading(ident, readings, (), f"NVML handle: {_text(exc)}")
        try:
            util = nvml.nvmlDeviceGetUtilizationRates(handle)
            readings["gpu_pct"] = float(util.gpu)
            readings["gpu_memory_pct"] = float(util.memory)
        except nvml.NVMLError as exc:
            notes.append(f"utilization: {_text(exc)}")
        try:
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            readings["memory_used_mb"] = memory.used / MB
            readings["memory_total_mb"] = memory.total / MB
        except nvml.NVMLError as exc:
            notes.append(f"memory: {_text(exc)}")
        processes: dict[int, DeviceProcess] = {}
        for kind, call in (("compute", nvml.nvmlDeviceGetComputeRunningProcesses),
                           ("graphics", nvml.nvmlDeviceGetGraphicsRunningProcesses)):
            try:
                found = call(handle)
            except nvml.NVMLError as exc:
                notes.append(f"{kind} processes: {_text(exc)}")
                continue
            for proc in found:
                used = getattr(proc, "usedGpuMemory", None)
                if proc.pid not in processes:
                    processes[proc.pid] = DeviceProcess(
                        int(proc.pid), self._process_name(nvml, proc.pid),
                        None if used is None else used / MB, ident, self.name,
                    )
        return self.reading(ident, readings, tuple(processes.values()), "; ".join(notes))

    @staticmethod
    def _process_name(nvml: ModuleType, pid: int) -> str:
        try:
            return _text(nvml.nvmlSystemGetProcessName(pid))
        except nvml.NVMLError:
            return ""  # the /proc scan names it; NVML often cannot across namespaces
