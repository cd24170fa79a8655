"""The DCMI backend: libdcmi.so, the Ascend driver's management library.

Called in this process through ctypes: loading a shared library needs no
toolkit and no child. Each query runs in a worker thread with a timeout
(base.call_with_timeout) because a C call that hangs in the driver cannot be
interrupted; while one is stuck, no backend of this process calls the library
again. Return code -8255 is DCMI's "not supported": an unknown reading,
never busy.
"""

from __future__ import annotations

import ctypes
from typing import Any

from suspendguard.config import IDLE_BACKENDS, IdleConfig
from suspendguard.idle.base import (
    Backend,
    DeviceProcess,
    DeviceReading,
    QueryFailed,
    ascend_device_id,
    call_with_timeout,
    find_file,
)

DEFAULT_LIBRARIES = (
    "/usr/local/Ascend/driver/lib64/driver/libdcmi.so",
    "/usr/local/Ascend/driver/lib64/libdcmi.so",
    "/usr/local/dcmi/libdcmi.so",
)
NOT_SUPPORTED = -8255
UTIL_AICORE = 2  # input_type of dcmi_get_device_utilization_rate
MAX_PROCESSES = 32  # the most dcmi_get_device_resource_info reports per device
MAX_CARDS = 64
MB = 1024 * 1024


class ProcMemInfo(ctypes.Structure):
    """struct dcmi_proc_mem_info {int proc_id; unsigned long proc_mem_usage;}"""

    _fields_ = [("proc_id", ctypes.c_int), ("proc_mem_usage", ctypes.c_ulong)]


_SIGNATURES: dict[str, list[Any]] = {
    "dcmi_init": [],
    # (int *card_num, int *card_list, int list_len)
    "dcmi_get_card_list": [ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int),
                           ctypes.c_int],
    # (int card_id, int *device_num)
    "dcmi_get_device_num_in_card": [ctypes.c_int, ctypes.POINTER(ctypes.c_int)],
    # (int card_id, int device_id, int input_type, unsigned int *utilization_rate)
    "dcmi_get_device_utilization_rate": [ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                         ctypes.POINTER(ctypes.c_uint)],
    # (int card_id, int device_id, struct dcmi_proc_mem_info *proc_info, int *proc_num)
    "dcmi_get_device_resource_info": [ctypes.c_int, ctypes.c_int, ctypes.POINTER(ProcMemInfo),
                                      ctypes.POINTER(ctypes.c_int)],
}


def _code(ret: int) -> str:
    return "not supported (-8255)" if ret == NOT_SUPPORTED else f"returned {ret}"


class DcmiBackend(Backend):
    declared = IDLE_BACKENDS["dcmi"]

    def __init__(self, config: IdleConfig) -> None:
        super().__init__(config)
        self.dcmi_library = config.dcmi_library
        self._lib: ctypes.CDLL | None = None
        self._initialised = False

    def library_path(self) -> tuple[str | None, str]:
        return find_file(self.dcmi_library, DEFAULT_LIBRARIES, "dcmi_library",
                         "libdcmi.so not found")

    def _load(self) -> ctypes.CDLL:
        if self._lib is not None:
            return self._lib
        path, why = self.library_path()
        if path is None:
            raise QueryFailed(why)
        try:
            lib = ctypes.CDLL(path)
        except OSError as exc:
            raise QueryFailed(f"{path}: cannot load ({exc})") from None
        for symbol, argtypes in _SIGNATURES.items():
            try:
                fn = getattr(lib, symbol)
            except AttributeError:
                raise QueryFailed(f"{path}: no {symbol}") from None
            fn.argtypes = argtypes
            fn.restype = ctypes.c_int
        self._lib = lib
        return lib

    def probe(self) -> tuple[bool, str]:
        try:
            self._load()
        except QueryFailed as exc:
            return False, str(exc)
        path, _ = self.library_path()
        return True, path or ""

    def query(self, timeout_s: float) -> list[DeviceReading]:
        return call_with_timeout(self._read, timeout_s, "dcmi")

    def _read(self) -> list[DeviceReading]:
        lib = self._load()
        if not self._initialised:
            ret = lib.dcmi_init()
            if ret != 0:
                raise QueryFailed(f"dcmi_init {_code(ret)}")
            self._initialised = True
        count = ctypes.c_int(0)
        cards = (ctypes.c_int * MAX_CARDS)()
        ret = lib.dcmi_get_card_list(ctypes.byref(count), cards, MAX_CARDS)
        if ret != 0:
            raise QueryFailed(f"dcmi_get_card_list {_code(ret)}")
        out: list[DeviceReading] = []
        for card in list(cards)[: max(0, min(count.value, MAX_CARDS))]:
            devices = ctypes.c_int(0)
            ret = lib.dcmi_get_device_num_in_card(card, ctypes.byref(devices))
            if ret != 0:
                out.append(self.reading(f"npu {card}", {"aicore_pct": None}, (),
                                        f"dcmi_get_device_num_in_card {_code(ret)}"))
                continue
            for dev in range(devices.value):
                out.append(self._device(lib, card, dev, devices.value))
        return out

    def _device(self, lib: ctypes.CDLL, card: int, dev: int, devices: int) -> DeviceReading:
        ident = ascend_device_id(card, dev, devices)
        notes: list[str] = []
        rate = ctypes.c_uint(0)
        ret = lib.dcmi_get_device_utilization_rate(card, dev, UTIL_AICORE, ctypes.byref(rate))
        aicore: float | None = float(rate.value) if ret == 0 else None
        if ret != 0:
            notes.append(f"AI Core rate {_code(ret)}")
        infos = (ProcMemInfo * MAX_PROCESSES)()
        found = ctypes.c_int(0)
        ret = lib.dcmi_get_device_resource_info(card, dev, infos, ctypes.byref(found))
        processes: tuple[DeviceProcess, ...] = ()
        # DCMI returns at most MAX_PROCESSES: a full table may have left some out.
        complete = ret == 0 and found.value < MAX_PROCESSES
        if ret == 0:
            processes = tuple(
                DeviceProcess(info.proc_id, "", info.proc_mem_usage / MB, ident, self.name)
                for info in list(infos)[: max(0, min(found.value, MAX_PROCESSES))]
            )
        else:
            notes.append(f"process list {_code(ret)}")
        return self.reading(ident, {"aicore_pct": aicore}, processes, "; ".join(notes),
                            lists_processes=complete)
