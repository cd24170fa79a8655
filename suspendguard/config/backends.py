"""The device families and their idle backends, as the configuration knows them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Family = Literal["ascend", "nvidia"]
FAMILIES: tuple[Family, ...] = ("ascend", "nvidia")


@dataclass(frozen=True, slots=True)
class IdleBackend:
    """One idle backend as the configuration knows it: declared once, in IDLE_BACKENDS."""

    name: str  # what ``[idle] backends`` names it by
    family: Family  # the devices it reads
    # The [idle] keys of its own: each names a program it runs, a script it
    # sources or a library it loads, which root must be able to trust (trust.py).
    keys: tuple[str, ...] = ()


# Every idle backend, in the order ``[idle] backends`` tries them by default.
# The declaration lives here, not in idle/, because the schema needs the names
# (the key's default and choices) and config is below idle; idle/ derives its
# implementations' names and families from it (idle/base.py, idle/sampler.py).
IDLE_BACKENDS: dict[str, IdleBackend] = {b.name: b for b in (
    IdleBackend("acl", "ascend", ("ascend_env",)),
    IdleBackend("npu-smi", "ascend", ("npu_smi",)),
    IdleBackend("dcmi", "ascend", ("dcmi_library",)),
    IdleBackend("nvml", "nvidia"),
    IdleBackend("nvidia-smi", "nvidia", ("nvidia_smi",)),
)}
