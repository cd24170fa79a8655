"""The idle backends' names and the family each reads, without importing any backend.

For callers that only label or list backends (the Prometheus metrics); the
names and families are config.IDLE_BACKENDS, the table ``[idle] backends``
is validated against.
"""

from __future__ import annotations

from suspendguard.config import IDLE_BACKENDS, Family

NAMES: tuple[str, ...] = tuple(IDLE_BACKENDS)


def family_of(name: str) -> Family | None:
    """The family backend ``name`` reads; None for a name no backend has."""
    return IDLE_BACKENDS.get(name)


# What to install so that a family's devices can be asked at all.
INSTALL: dict[Family, str] = {
    "ascend": "the Ascend driver's npu-smi, or the CANN toolkit for pyACL",
    "nvidia": "the NVIDIA driver's nvidia-smi, or nvidia-ml-py for NVML",
}
