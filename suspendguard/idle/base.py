"""The contract every idle backend speaks, and the data it answers with.

A backend is one outside system (npu-smi, pyACL, DCMI, NVML) turned into
plain readings. Only the backend's own module knows its tool or library;
everything here is plain Python so the sampler and the tests never need one.
"""

from __future__ import annotations

import math
import os
import shutil
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeVar

from suspendguard.config import IDLE_BACKENDS, Family, IdleBackend, IdleConfig, trust
from suspendguard.system import deadline

DeviceState = Literal["busy", "idle", "unknown"]
ReportState = Literal["idle", "busy", "unknown", "none"]

def family_of(name: str) -> Family | None:
    """The family backend ``name`` reads (config.IDLE_BACKENDS); None for a name no backend has."""
    declared = IDLE_BACKENDS.get(name)
    return declared.family if declared else None


# What to install so that a family's devices can be asked at all.
INSTALL: dict[Family, str] = {
    "ascend": "the Ascend driver's npu-smi, or the CANN toolkit for pyACL",
    "nvidia": "the NVIDIA driver's nvidia-smi, or nvidia-ml-py for NVML",
}

# The readings that say whether the device is computing, with the words a
# veto uses for them. Everything else a backend reports (memory in use, AI
# CPU, power) is shown but decides nothing: memory stays allocated by idle
# daemons, and the AI CPU of an idle Atlas 200I A2 reads 9 % (see
# tests/fixtures/npu-smi/usages-atlas200i-a2.txt), so counting either would
# veto suspends for nothing.
LOAD_READINGS: dict[str, str] = {
    "aicore_pct": "AI Core",
    "cube_pct": "AI Core cube",
    "vector_pct": "AI Core vector",
    "gpu_pct": "GPU",
    "gpu_memory_pct": "GPU memory controller",
}


@dataclass(frozen=True)
class DeviceProcess:
    """A process the device itself reports (host pid where the tool gives one)."""

    pid: int
    name: str
    memory_mb: float | None
    device: str  # the DeviceReading.id it runs on
    source: str  # the backend that reported it
    # NVML lists compute (CUDA) and graphics processes apart; the others list compute work.
    kind: str = "compute"
    # When the query that first listed it began (CLOCK_BOOTTIME, s; 0.0: not known): a
    # process with its pid that started later is another, which took the pid since.
    listed_at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "name": self.name, "memory_mb": self.memory_mb,
                "device": self.device, "source": self.source, "kind": self.kind}


@dataclass(frozen=True)
class DeviceReading:
    """One device as one backend saw it at one moment."""

    id: str  # "npu 0", "npu 1 chip 1", "device 0", "gpu 0"
    family: str
    state: DeviceState
    source: str
    readings: Mapping[str, float | None]
    processes: tuple[DeviceProcess, ...] = ()
    reason: str = ""  # why unknown, or what was not supported
    # The backend read this device's process list in full: an empty
    # ``processes`` then means no process, not "cannot say".
    lists_processes: bool = False
    # The device's own word for its health where the backend reads one (npu-smi's Health:
    # OK, Warning, Alarm, Critical): kept with the attempt, for the check after resume.
    health: str = ""

    def load(self) -> tuple[str, float] | None:
        """The highest compute-load reading as (words, percent), if any was read."""
        best: tuple[str, float] | None = None
        for key, words in LOAD_READINGS.items():
            value = self.readings.get(key)
            if value is not None and (best is None or value > best[1]):
                best = (words, value)
        return best

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "state": self.state,
            "source": self.source,
            "readings": dict(self.readings),
            "processes": [p.to_json() for p in self.processes],
            "lists_processes": self.lists_processes,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class BackendStatus:
    name: str
    available: bool
    reason: str  # why not available, why it stopped answering, or what it is

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "available": self.available, "reason": self.reason}


@dataclass(frozen=True)
class IdleReport:
    """The idle step's answer: overall state, each device, each backend, and why."""

    state: ReportState
    devices: tuple[DeviceReading, ...]
    backends: tuple[BackendStatus, ...]
    veto_reasons: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    # (family, the veto it makes under [idle] on_unknown = veto) for each
    # family no backend could answer for; also among veto_reasons or warnings, unless a
    # device of the family read busy: its veto stands for the family then.
    unknown: tuple[tuple[str, str], ...] = ()
    # (device, the veto it makes) for each device read busy; also among veto_reasons.
    busy: tuple[tuple[str, str], ...] = ()
    # The backends the deadline (or a stop) came before they were asked at all, and
    # those it left too little time to answer (sampler._sample).
    unasked: tuple[str, ...] = ()

    def process_view(self, family: str, found: int = 1) -> str:
        """The backend whose process lists cover every device of ``family`` it reported, and
        that reported at least the ``found`` devices the host has; "" if none."""
        by: dict[str, list[DeviceReading]] = {}
        for device in self.devices:
            if device.family == family:
                by.setdefault(device.source, []).append(device)
        return next((src for src, devs in by.items()
                     if len(devs) >= found and all(d.lists_processes for d in devs)), "")

    def processes(self) -> tuple[DeviceProcess, ...]:
        """Every process a device reported, once per (source, device, pid)."""
        seen: dict[tuple[str, str, int], DeviceProcess] = {}
        for device in self.devices:
            for proc in device.processes:
                seen.setdefault((proc.source, proc.device, proc.pid), proc)
        return tuple(seen.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "devices": [d.to_json() for d in self.devices],
            "backends": [b.to_json() for b in self.backends],
            "veto_reasons": list(self.veto_reasons),
            "warnings": list(self.warnings),
        }


class QueryFailed(Exception):
    """The backend could not answer at all this time (tool hung, library error).

    Raised by ``Backend.query`` only; the sampler turns it into an unknown
    state with this reason and stops asking that backend.
    """


class Backend(ABC):
    """One way of asking devices of one family whether they are busy.

    A subclass sets ``declared``, its entry in config.IDLE_BACKENDS, which
    gives it its ``name`` and ``family``, and reads the ``[idle]`` keys it
    needs in its own ``__init__``, so the sampler makes every backend alike
    from the config.
    """

    declared: ClassVar[IdleBackend | None] = None
    name: str
    family: Family
    # A fallback is asked only when no other backend of its family probes OK
    # (nvidia-smi behind NVML: both read the same driver, one is enough).
    fallback: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.declared is not None:
            cls.name, cls.family = cls.declared.name, cls.declared.family

    def __init__(self, config: IdleConfig) -> None:
        self.busy_threshold = config.busy_threshold

    @abstractmethod
    def probe(self) -> tuple[bool, str]:
        """(usable here, why not / what it found); cheap, never raises."""

    @abstractmethod
    def query(self, timeout_s: float) -> list[DeviceReading]:
        """Read every device once, within ``timeout_s``; raises QueryFailed."""

    def reading(
        self,
        device: str,
        readings: Mapping[str, float | None],
        processes: tuple[DeviceProcess, ...] = (),
        reason: str = "",
        lists_processes: bool = False,
    ) -> DeviceReading:
        """A DeviceReading whose state follows from its load readings."""
        state, why = judge(readings, self.busy_threshold)
        return DeviceReading(
            id=device, family=self.family, state=state, source=self.name,
            readings=dict(readings), processes=processes,
            reason="; ".join(r for r in (why, reason) if r), lists_processes=lists_processes,
        )


def find_command(tool: str, key: str, hint: str = "") -> tuple[bool, str]:
    """(usable, the program or why not) for a command configured as a path or a name on PATH."""
    if "/" in tool:
        if os.access(tool, os.X_OK) and os.path.isfile(tool):
            return True, tool
        return False, f"{tool}: not an executable file ([idle] {key})"
    found = shutil.which(tool)
    if found is None:
        return False, f"{tool}: not found on PATH ([idle] {key}{hint})"
    return True, found


def find_file(configured: str, defaults: Sequence[str], key: str,
              missing: str) -> tuple[str | None, str]:
    """(the file to use, why none): the configured one, else the first default that exists."""
    if configured:
        if os.path.isfile(configured):
            return configured, ""
        return None, f"{configured}: not found ([idle] {key})"
    for candidate in defaults:
        if os.path.isfile(candidate):
            # A configured path was checked with the config (config/trust.py);
            # a built-in default is root's choice only if root alone can change it.
            untrusted = trust.problems(candidate, f"[idle] {key} default") if os.geteuid() == 0 else []
            if untrusted:
                return None, f"{untrusted[0]}: not used"
            return candidate, ""
    return None, f"{missing} ({', '.join(defaults)}); set [idle] {key}"


# The figures that measure the compute units themselves: without one of them, the others
# (a vector unit's, a memory controller's) can show work, never its absence.
MAIN_READINGS = ("aicore_pct", "cube_pct", "gpu_pct")


def judge(readings: Mapping[str, float | None], threshold: float) -> tuple[DeviceState, str]:
    """busy if any load reading is above ``threshold``; idle only with a main figure read;
    unknown else. A figure that is no finite number is none."""
    loads = {k: v if v is not None and math.isfinite(v) else None
             for k, v in readings.items() if k in LOAD_READINGS}
    numbers = [v for v in loads.values() if v is not None]
    if numbers and max(numbers) > threshold:
        return "busy", ""
    if not any(loads.get(k) is not None for k in MAIN_READINGS):
        only = ", ".join(LOAD_READINGS[k] for k, v in loads.items() if v is not None)
        return "unknown", (f"no utilization reading of the compute units ({only} only)" if only
                           else "no utilization reading (not supported)" if loads
                           else "no utilization reading")
    return "idle", ""


def ascend_device_id(npu: int, chip: int, chips_on_npu: int) -> str:
    """"npu 0" for one-chip NPUs (most boards), "npu 0 chip 1" otherwise.

    npu-smi's NPU/Chip and DCMI's card/device are the same numbers, so both
    backends name a device alike.
    """
    return f"npu {npu}" if chips_on_npu <= 1 and chip == 0 else f"npu {npu} chip {chip}"


T = TypeVar("T")

# The calls abandoned at their timeout, by what they called ("dcmi", "nvml"),
# with the words of that timeout. Every check makes backends of its own (the
# look before the drain, the check after it, each look of the watch), so the
# process, not a backend, remembers: while such a call is stuck in the
# driver, nothing enters that library again.
_stuck: dict[str, tuple[threading.Thread, str]] = {}
_stuck_lock = threading.Lock()


def call_with_timeout(fn: Callable[[], T], timeout_s: float, what: str) -> T:
    """Run an in-process library call, giving up on it after ``timeout_s``, or sooner when
    the run's deadline (system/deadline.py) ends first or the guard is stopped.

    DCMI and NVML are C libraries called in this process; a driver that
    hangs would hang the guard, and with it the suspend. The call runs in a
    daemon thread that is abandoned (it cannot be killed) if it overruns;
    until it returns, ``what`` is not called again by this process.
    """
    with _stuck_lock:
        worker, why = _stuck.get(what, (None, ""))
        if worker is not None and worker.is_alive():
            raise QueryFailed(f"{why}; not asked again while that call is stuck")
        _stuck.pop(what, None)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed back to the caller's thread
            box["error"] = exc

    bound = deadline.current()
    wait = bound.cap(timeout_s)  # as runner.run cuts a child's timeout
    worker = threading.Thread(target=target, name=f"suspendguard-{what}", daemon=True)
    worker.start()
    _join(worker, wait, bound)
    if worker.is_alive():
        why = (f"{what}: {bound.cancel_reason} (abandoned)" if bound.cancelled else
               f"{what}: no answer within {wait:.1f} s"
               + (" (the run's deadline)" if wait < timeout_s else "") + " (abandoned)")
        with _stuck_lock:
            _stuck[what] = (worker, why)
        raise QueryFailed(why)
    if "error" in box:
        raise box["error"]
    value: T = box["value"]
    return value


# How often the wait for a library call looks whether the guard was stopped.
CANCEL_POLL_S = 0.05


def _join(worker: threading.Thread, wait: float, bound: deadline.Deadline) -> None:
    """Wait ``wait`` seconds at most for ``worker``, less when ``bound`` is cancelled."""
    until = time.monotonic() + max(wait, 0.001)
    while worker.is_alive() and not bound.cancelled:
        left = until - time.monotonic()
        if left <= 0:
            return
        worker.join(left if bound.cancel is None else min(left, CANCEL_POLL_S))
