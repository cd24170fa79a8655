"""A stand-in for nvidia-ml-py's ``pynvml``, same names and shapes.

Tests put this directory first on sys.path and script the "GPUs" through
``SCRIPT``: a list of devices, each a dict with ``gpu``, ``memory`` (percent),
``used``/``total`` (bytes) and ``compute``/``graphics`` ([(pid, bytes or
None)]), or an NVML error code under ``error_<call>``. Figures follow the
H200 capture in tests/fixtures/nvidia-h200/. Errors are NVMLError subclasses
with a ``value``, as in the real module.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999

_STRINGS = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_TIMEOUT: "Timeout",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    _valClassMapping: ClassVar[dict[int, type[NVMLError]]] = {}

    def __new__(cls, value: int) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, value: int) -> None:
        self.value = value

    def __str__(self) -> str:
        return _STRINGS.get(self.value, f"NVML Error with code {self.value}")


def _subclass(name: str, value: int) -> type[NVMLError]:
    cls = type(name, (NVMLError,), {})
    NVMLError._valClassMapping[value] = cls
    return cls


NVMLError_Uninitialized = _subclass("NVMLError_Uninitialized", NVML_ERROR_UNINITIALIZED)
NVMLError_NotSupported = _subclass("NVMLError_NotSupported", NVML_ERROR_NOT_SUPPORTED)
NVMLError_DriverNotLoaded = _subclass("NVMLError_DriverNotLoaded", NVML_ERROR_DRIVER_NOT_LOADED)
NVMLError_LibraryNotFound = _subclass("NVMLError_LibraryNotFound", NVML_ERROR_LIBRARY_NOT_FOUND)
NVMLError_GpuIsLost = _subclass("NVMLError_GpuIsLost", NVML_ERROR_GPU_IS_LOST)

# The scripted machine. Tests replace these between samples.
SCRIPT: list[dict[str, Any]] = []
STATE: dict[str, Any] = {"init_error": None, "initialised": 0, "hang_s": 0.0, "calls": []}


class c_nvmlUtilization_t:
    def __init__(self, gpu: int, memory: int) -> None:
        self.gpu = gpu
        self.memory = memory


class c_nvmlMemory_t:
    def __init__(self, total: int, free: int, used: int) -> None:
        self.total, self.free, self.used = total, free, used


class c_nvmlProcessInfo_t:
    def __init__(self, pid: int, used: int | None) -> None:
        self.pid = pid
        self.usedGpuMemory = used
        self.gpuInstanceId = 0xFFFFFFFF
        self.computeInstanceId = 0xFFFFFFFF


class _Handle:
    def __init__(self, index: int) -> None:
        self.index = index


def _check_init() -> None:
    if STATE["initialised"] <= 0:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)


def _device(handle: _Handle, call: str) -> dict[str, Any]:
    _check_init()
    STATE["calls"].append(call)
    device = SCRIPT[handle.index]
    code = device.get(f"error_{call}")
    if code is not None:
        raise NVMLError(code)
    return device


def nvmlInit() -> None:
    STATE["calls"].append("nvmlInit")
    if STATE["hang_s"]:
        time.sleep(STATE["hang_s"])
    if STATE["init_error"] is not None:
        raise NVMLError(STATE["init_error"])
    STATE["initialised"] += 1


def nvmlShutdown() -> None:
    STATE["calls"].append("nvmlShutdown")
    _check_init()
    STATE["initialised"] -= 1


def nvmlDeviceGetCount() -> int:
    _check_init()
    return len(SCRIPT)


def nvmlDeviceGetHandleByIndex(index: int) -> _Handle:
    _check_init()
    if not 0 <= index < len(SCRIPT):
        raise NVMLError(2)
    return _Handle(index)


def nvmlDeviceGetUtilizationRates(handle: _Handle) -> c_nvmlUtilization_t:
    d = _device(handle, "nvmlDeviceGetUtilizationRates")
    return c_nvmlUtilization_t(d.get("gpu", 0), d.get("memory", 0))


def nvmlDeviceGetMemoryInfo(handle: _Handle, version: Any = None) -> c_nvmlMemory_t:
    d = _device(handle, "nvmlDeviceGetMemoryInfo")
    total, used = d.get("total", 143771 * 1024 * 1024), d.get("used", 0)
    return c_nvmlMemory_t(total, total - used, used)


def nvmlDeviceGetComputeRunningProcesses(handle: _Handle) -> list[c_nvmlProcessInfo_t]:
    d = _device(handle, "nvmlDeviceGetComputeRunningProcesses")
    return [c_nvmlProcessInfo_t(pid, used) for pid, used in d.get("compute", [])]


def nvmlDeviceGetGraphicsRunningProcesses(handle: _Handle) -> list[c_nvmlProcessInfo_t]:
    d = _device(handle, "nvmlDeviceGetGraphicsRunningProcesses")
    return [c_nvmlProcessInfo_t(pid, used) for pid, used in d.get("graphics", [])]


def nvmlSystemGetProcessName(pid: int) -> bytes:
    _check_init()
    names: dict[int, str] = STATE.get("names", {})
    if pid not in names:
        raise NVMLError(6)  # NVML_ERROR_NOT_FOUND
    return names[pid].encode()
