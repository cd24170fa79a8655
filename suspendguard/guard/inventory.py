"""Which accelerator nodes exist now, with their identity and role.

Compute nodes are the ones a job uses to run work on the device; holding one
means the job must be drained. Management nodes are opened by monitoring and
management tools too (npu-smi, nvidia-smi): holding only those is reported,
not signalled. NVIDIA's /dev/nvidiaN is a graphics node: the display server
and every OpenGL/Vulkan client hold it, and so does CUDA work, which alone
also opens /dev/nvidia-uvm (the Unified Memory module, CUDA's): holding
graphics nodes without a compute node is a graphics client, kept as it is.
"""

from __future__ import annotations

import glob
import os
import re
import stat
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from suspendguard.config import DevicesConfig
from suspendguard.model import Inventory, Node

if TYPE_CHECKING:
    from suspendguard.model import NodeKey, Role

# family -> role -> globs. Edited here only; the README documents the split.
FAMILY_NODES: dict[str, dict[Role, tuple[str, ...]]] = {
    "ascend": {
        "compute": (
            "/dev/davinci[0-9]*",
            "/dev/vdavinci[0-9]*",
            "/dev/devmm_svm",
            "/dev/svm0",
            "/dev/ts_aisle",
            "/dev/event_sched",
            "/dev/xsmem_dev",
            # media (DVPP) and audio/video paths of RC/edge boards
            "/dev/vdec",
            "/dev/venc",
            "/dev/vpc",
            "/dev/pngd",
            "/dev/dvpp_cmdlist",
            "/dev/acodec",
            "/dev/ai",
            "/dev/ao",
            "/dev/vo",
            "/dev/hdmi",
        ),
        "management": (
            "/dev/davinci_manager*",
            "/dev/hisi_hdc",
            "/dev/upgrade",
            "/dev/log_drv",
            "/dev/user_config",
            "/dev/sys",
            "/dev/memory_bandwidth",
        ),
    },
    "nvidia": {
        "compute": ("/dev/nvidia-uvm",),
        "graphics": ("/dev/nvidia[0-9]*",),
        "management": (
            "/dev/nvidiactl",
            "/dev/nvidia-uvm-tools",
            "/dev/nvidia-modeset",
            "/dev/nvidia-caps/*",
        ),
    },
}

# The node each device of a family has one of (an Ascend chip's davinciN, a GPU's nvidiaN):
# what the device's own view must answer for, one device each.
DEVICE_NODE: dict[str, re.Pattern[str]] = {
    "ascend": re.compile(r"davinci[0-9]+"),
    "nvidia": re.compile(r"nvidia[0-9]+"),
}

# Driver daemons that hold nodes by design; draining them would break the
# driver rather than free the device. Reported as "ignore", but only for the
# daemon itself: its executable has this name, root may trust it, and it runs
# as root or as a service user of the family (guard/identity.py). A name alone
# is any process's own to set.
FAMILY_DAEMONS: dict[str, tuple[str, ...]] = {
    "ascend": ("dmp_daemon", "slogd", "sklogd", "log-daemon", "ascend_monitor"),
    "nvidia": ("nvidia-persistenced", "nv-fabricmanager"),
}

# The users the drivers' own documentation runs their daemons as, besides
# root: the Ascend driver's running user (HwHiAiUser by default, chosen with
# --install-username at install time); for nvidia-persistenced the user of
# NVIDIA's sample service (--user nvidia-persistenced) and the one Debian's
# and Gentoo's packages create for it (nvpd).
DAEMON_USERS: dict[str, tuple[str, ...]] = {
    "ascend": ("HwHiAiUser",),
    "nvidia": ("nvidia-persistenced", "nvpd"),
}


def identity(st: os.stat_result) -> NodeKey:
    if stat.S_ISCHR(st.st_mode):
        return ("char", st.st_rdev)
    return ("file", st.st_dev, st.st_ino)


# One folder per GPU the NVIDIA driver has, its information naming its node's minor: a
# /dev/nvidiaN is made by nvidia-modprobe or by hand, and outlives a GPU that left the
# driver (passed through to a VM, drained, fallen off the bus).
NVIDIA_GPUS = "/proc/driver/nvidia/gpus"


def device_families(inventory: Inventory) -> tuple[str, ...]:
    """The family of each device found, once per device: once per per-device node (of a
    GPU the driver has, where it says), and once for a family found by its other nodes."""
    counts = _device_counts(inventory)
    return tuple(f for family in inventory.families() for f in [family] * max(counts[family], 1))


def families_with_devices(inventory: Inventory) -> tuple[str, ...]:
    """The families of which a device's own node is here (of a GPU the driver has, where it
    says): not those found by their management nodes alone (a driver with no device)."""
    counts = _device_counts(inventory)
    return tuple(family for family in inventory.families() if counts[family])


def _device_counts(inventory: Inventory) -> dict[str, int]:
    gpus = _nvidia_minors()
    counts = {}
    for family in inventory.families():
        pattern = DEVICE_NODE.get(family)
        counts[family] = 0 if pattern is None else sum(
            1 for n in inventory.nodes
            if n.family == family and pattern.fullmatch(os.path.basename(n.path))
            and (family != "nvidia" or gpus is None
                 or (n.key[0] == "char" and os.minor(int(n.key[1])) in gpus)))
    return counts


def _nvidia_minors() -> set[int] | None:
    """The minors of the GPUs the NVIDIA driver has and uses; None where it cannot say."""
    try:
        buses = os.listdir(NVIDIA_GPUS)
    except OSError:
        return None
    minors = set()
    for bus in buses:
        try:
            with open(os.path.join(NVIDIA_GPUS, bus, "information")) as f:
                text = f.read()
        except OSError:
            return None
        found = re.search(r"^Device Minor:\s*(\d+)", text, re.M)
        if found is None:
            return None
        if not re.search(r"^GPU Excluded:\s*Yes", text, re.M):
            minors.add(int(found.group(1)))
    return minors


def _expand(patterns: Iterable[str]) -> list[str]:
    paths: list[str] = []
    for pattern in patterns:
        paths.extend(sorted(glob.glob(pattern)))
    return paths


def take_inventory(config: DevicesConfig) -> Inventory:
    """Stat every node the configuration names; what is absent is simply absent."""
    wanted: list[tuple[str, str, Role]] = []
    for family in config.families:
        for role, patterns in FAMILY_NODES[family].items():
            for path in _expand(patterns):
                wanted.append((path, family, role))
    notes: list[str] = []
    for role, patterns in (("compute", config.nodes), ("management", config.management)):
        for pattern in patterns:
            found = sorted(glob.glob(pattern))
            if not found:
                notes.append(f"[devices] {'nodes' if role == 'compute' else 'management'}: "
                             f"{pattern} matched nothing")
            for path in found:
                wanted.append((path, "extra", role))
    return Inventory(tuple(_stat_nodes(wanted, notes)), tuple(notes))


def _stat_nodes(wanted: Sequence[tuple[str, str, Role]], notes: list[str]) -> list[Node]:
    seen: dict[NodeKey, Node] = {}
    for path, family, role in wanted:
        try:
            st = os.stat(path)
        except OSError as exc:
            notes.append(f"{path}: {exc.strerror or exc}")
            continue
        if stat.S_ISDIR(st.st_mode):
            continue
        key = identity(st)
        if key in seen:
            # The same device under two names: a compute role wins.
            if role == "compute" and seen[key].role != "compute":
                seen[key] = Node(seen[key].path, family, role, key, (st.st_dev, st.st_ino))
            continue
        seen[key] = Node(path, family, role, key, (st.st_dev, st.st_ino))
    return list(seen.values())
