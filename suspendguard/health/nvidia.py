"""NVIDIA after resume: CUDA initialisation in a child, NVML's view, and the kernel's log.

The three see different failures. After a resume that went wrong, cuInit
answers 999 (CUDA_ERROR_UNKNOWN) until nvidia_uvm is reloaded, while NVML
and nvidia-smi still read the GPU as fine: only a CUDA initialisation tells.
A GPU that has fallen off the bus (Xid 79) is lost to NVML as well. A
suspend the driver refused (``nv_pmops_suspend ... returns -5``: preserved
video memory without the nvidia-suspend units) is only in the kernel log.
"""

from __future__ import annotations

import glob
import re
import sys
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from suspendguard.config import Config
from suspendguard.health.model import UVM_SIGNATURE, Answer, ask, not_listed
from suspendguard.idle.acl import parse_probe_output
from suspendguard.idle.base import Backend, QueryFailed
from suspendguard.idle.nvidiasmi import NvidiaSmiBackend
from suspendguard.idle.nvml import NvmlBackend
from suspendguard.logs.journal import JOURNALCTL, read_kernel
from suspendguard.model import Unavailable
from suspendguard.record import DeviceHealth
from suspendguard.system import runner

FAMILY = "nvidia"
# The directory holding the suspendguard package, so the child imports the
# same code even when the guard runs from a checkout.
PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])
# -I: neither the environment nor the working directory may put another
# module first on the child's path.
CHILD = ("import sys; sys.path.insert(0, sys.argv.pop(1)); "
         "from suspendguard.health.cuda_probe import main; sys.exit(main())")

# The driver API's names for the answers that matter here (cuda.h).
CUDA_ERRORS = {
    2: "CUDA_ERROR_OUT_OF_MEMORY",
    3: "CUDA_ERROR_NOT_INITIALIZED",
    46: "CUDA_ERROR_DEVICES_UNAVAILABLE",
    100: "CUDA_ERROR_NO_DEVICE",
    101: "CUDA_ERROR_INVALID_DEVICE",
    304: "CUDA_ERROR_OPERATING_SYSTEM",
    999: "CUDA_ERROR_UNKNOWN",
}

# Kernel lines that say the GPU or its suspend failed, each with the words
# a held job's reason uses. Wordings: the driver's NVRM Xid line ("NVRM: Xid
# (PCI:0000:01:00): 79, pid=..., GPU has fallen off the bus."), and the PM
# core's line for a driver callback that failed ("PM: pci_pm_suspend():
# nv_pmops_suspend+0x0/0x30 [nvidia] returns -5").
# A failed nv_pmops_* callback means the sleep itself was refused by the
# driver, not that the GPU is gone: it is said, and the CUDA probe decides.
KERNEL_SIGNS: tuple[tuple[re.Pattern[str], str, bool], ...] = (
    (re.compile(r"NVRM: Xid \(PCI:[0-9A-Fa-f:.]+\): 79\b"), "Xid 79 in the kernel log", True),
    (re.compile(r"fallen off the bus", re.IGNORECASE), "the GPU has fallen off the bus", True),
    (re.compile(r"nv_pmops_\w+\S* \[nvidia\] returns -\d+"),
     "the driver refused the sleep (see suspendguard doctor)", False),
)
# A context refused because a job uses the GPU: exclusive-process mode (46), or its memory
# taken (2). Nothing is said of the GPU's health (slurm health runs beside jobs).
IN_USE = (2, 46)
# cuInit's answer on a host that has the driver's libraries and no GPU (one image for
# every node of a cluster, the kernel module not loaded): no NVIDIA device to check,
# unless a GPU's device node says one was there.
NO_DEVICE = 100
GPU_NODES = "/dev/nvidia[0-9]*"
# What NVML answers for a GPU it lost (NVML_ERROR_GPU_IS_LOST, NVML_ERROR_RESET_REQUIRED).
NVML_LOST = ("GPU is lost", "GPU requires reset")
# The NVML backend's words for a GPU it counts and cannot open (idle/nvml.py): "NVML handle:
# Unknown Error", the usual answer after a bad resume. Unhealthy as a GPU whose CUDA device
# or context fails is: NVML's init and count answered, so this is the GPU's answer.
NVML_UNOPENED = "NVML handle: "
# nvidia-smi's words for a GPU whose handle it cannot open, said as it exits non-zero ("Unable
# to determine the device handle for GPU0000:02:00.0: Unknown Error"): the same answer.
SMI_UNOPENED = "Unable to determine the device handle"
# The checks whose unhealthy answer with NVML_LOST's words says the GPU itself is gone, as
# the kernel log's every answer does (Xid 79, fallen off the bus): see lost().
MANAGEMENT_SOURCES = ("nvml", "nvidia-smi")


def cuda_error(ret: int) -> str:
    name = CUDA_ERRORS.get(ret)
    return f"{ret}" + (f" ({name})" if name else "")


def lost(answer: DeviceHealth) -> bool:
    """Whether ``answer`` says an NVIDIA GPU is gone (Xid 79, fallen off the bus, NVML's lost
    GPU or one that requires a reset): a failure a reload does not repair."""
    if answer.family != FAMILY or answer.state != "unhealthy":
        return False
    return answer.source == "kernel-log" or (
        answer.source in MANAGEMENT_SOURCES and any(w in answer.reason for w in NVML_LOST))


def cuda_check(config: Config, timeout_s: float) -> list[DeviceHealth] | None:
    """CUDA initialisation and a context per device, in a child; None: no CUDA driver here,
    or a driver that sees no GPU where no GPU's device node is."""
    library = config.resume.cuda_library
    result = runner.run([sys.executable, "-I", "-c", CHILD, PACKAGE_PARENT, library],
                        timeout=timeout_s)
    if result.timed_out:
        return [DeviceHealth(FAMILY, FAMILY, "unhealthy",
                             f"CUDA initialisation did not answer within {timeout_s:g} s (killed)",
                             "cuda")]
    if result.returncode is not None and result.returncode < 0 and not result.truncated:
        # Killed by a signal inside the driver (SIGSEGV, SIGBUS): what a job starting now
        # would meet, not a probe that could not say.
        return [DeviceHealth(FAMILY, FAMILY, "unhealthy", "CUDA initialisation crashed "
                             f"({result.describe_failure()})", "cuda")]
    if not result.ok:
        return [DeviceHealth(FAMILY, FAMILY, "unknown",
                             f"CUDA probe: {result.describe_failure()}", "cuda")]
    try:
        answer = parse_probe_output(result.stdout, "CUDA probe")
    except QueryFailed as exc:
        return [DeviceHealth(FAMILY, FAMILY, "unknown", str(exc), "cuda")]
    if "missing" in answer:
        return None
    if answer.get("init") == NO_DEVICE and not glob.glob(GPU_NODES):
        return None
    return _devices(answer)


def _devices(answer: dict[str, Any]) -> list[DeviceHealth]:
    init = int(answer.get("init", -1))
    if init != 0:
        return [DeviceHealth(FAMILY, FAMILY, "unhealthy", f"CUDA init error {cuda_error(init)}",
                             "cuda", UVM_SIGNATURE if init == 999 else "")]
    if "count_ret" in answer:
        ret = int(answer["count_ret"])
        return [DeviceHealth(FAMILY, FAMILY, "unhealthy",
                             f"cuDeviceGetCount error {cuda_error(ret)}", "cuda",
                             UVM_SIGNATURE if ret == 999 else "")]
    out = []
    for entry in answer.get("devices", []):
        ident = f"gpu {entry.get('device')}"
        ret = int(entry.get("ret", 0))
        if ret == 0:
            out.append(DeviceHealth(ident, FAMILY, "healthy", "", "cuda"))
        elif ret in IN_USE:
            out.append(DeviceHealth(ident, FAMILY, "unknown",
                                    f"{entry.get('call')} error {cuda_error(ret)}: in use by "
                                    "another process (exclusive compute mode, or its memory "
                                    "taken), so not probed", "cuda"))
        else:
            out.append(DeviceHealth(ident, FAMILY, "unhealthy",
                                    f"{entry.get('call')} error {cuda_error(ret)}", "cuda",
                                    UVM_SIGNATURE if ret == 999 else ""))
    return out


def nvml_check(config: Config, timeout_s: float,
               before: Mapping[str, str] | None = None) -> Answer:
    """NVML's view, else nvidia-smi's (the Debian package has no pynvml): a GPU lost, or
    one NVML counts and cannot open, is unhealthy, and so is one read before the suspend
    (``before``) and not listed now; neither here, or failing otherwise, says nothing."""
    nvml = NvmlBackend(config.idle)
    if nvml.probe()[0]:
        return _management(nvml, "NVML", timeout_s, before)
    return _management(NvidiaSmiBackend(config.idle), "NVML and nvidia-smi", timeout_s, before)


def _management(backend: Backend, what: str, timeout_s: float,
                before: Mapping[str, str] | None) -> Answer:
    label = "NVML" if backend.name == "nvml" else backend.name  # as a reason names the tool

    def gpus() -> list[DeviceHealth]:
        out = []
        for reading in backend.query(timeout_s):
            lost = any(words in reading.reason for words in NVML_LOST)
            unopened = [p for p in reading.reason.split("; ") if p.startswith(NVML_UNOPENED)]
            why = reading.reason if lost else "; ".join(unopened)
            out.append(DeviceHealth(reading.id, FAMILY, "unhealthy" if why else "healthy", why,
                                    backend.name))
        # NVML's and nvidia-smi's GPUs are "gpu INDEX" alike; CUDA's order may differ.
        return out + not_listed(before, "gpu ", (d.device for d in out), FAMILY, backend.name,
                                label)

    def failed(exc: QueryFailed) -> Answer:
        # Failing as a whole after resume lists no GPU: each one read before the suspend is
        # not listed now, as when it answers without them.
        gone = not_listed(before, "gpu ", (), FAMILY, backend.name,
                          f"{label} ({exc})")
        if any(words in str(exc) for words in (*NVML_LOST, SMI_UNOPENED)):
            return [DeviceHealth(FAMILY, FAMILY, "unhealthy", str(exc), backend.name), *gone], ""
        return gone, "" if gone else f"{backend.name}: {exc}"

    return ask(backend, what, gpus, failed)


def kernel_check(since: datetime, timeout_s: float,
                 journalctl: str = JOURNALCTL) -> Answer:
    """The kernel's log since the attempt began: Xid 79, fallen off the bus, nv_pmops_* errors.
    A log read only in part (a bound of journalctl's reached) says so in the note: what the
    rest holds is unknown."""
    log = read_kernel(since, timeout=timeout_s, journalctl=journalctl)
    if isinstance(log, Unavailable):
        return [], f"kernel log not read: {log.reason}"
    unread = [f"kernel log: {note}" for note in log.notes]
    notes = []
    for line in log.lines:
        for pattern, words, lost in KERNEL_SIGNS:
            if not pattern.search(line):
                continue
            if lost:
                lost_gpu = DeviceHealth(FAMILY, FAMILY, "unhealthy",
                                        f"{words}: {line.strip()[:160]}", "kernel-log")
                return [lost_gpu], "; ".join(unread)
            notes.append(f"{words}: {line.strip()[:160]}")
    return [], "; ".join([*dict.fromkeys(notes), *unread])
