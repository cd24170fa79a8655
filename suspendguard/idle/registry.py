"""The idle backends by the names ``[idle] backends`` uses, and making them from the config."""

from __future__ import annotations

from suspendguard.config import IdleConfig
from suspendguard.idle.acl import AclBackend
from suspendguard.idle.base import Backend
from suspendguard.idle.dcmi import DcmiBackend
from suspendguard.idle.npusmi import NpuSmiBackend
from suspendguard.idle.nvidiasmi import NvidiaSmiBackend
from suspendguard.idle.nvml import NvmlBackend

# Each class names itself; a new backend is one module, its name and family
# in config.IDLE_BACKENDS (with any key of its own), and one entry here.
BACKEND_TYPES: dict[str, type[Backend]] = {
    backend.name: backend for backend in (AclBackend, NpuSmiBackend, DcmiBackend, NvmlBackend,
                                      NvidiaSmiBackend)
}


def make_backends(config: IdleConfig) -> list[Backend]:
    """The backends named in ``[idle] backends``, in that order, each reading its own keys."""
    return [BACKEND_TYPES[name](config) for name in config.backends if name in BACKEND_TYPES]
