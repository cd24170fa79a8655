"""The effective configuration: one record per section, where it came from, its fingerprint."""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass

from suspendguard.config.render import to_toml
from suspendguard.config.schema import (
    DevicesConfig,
    DrainConfig,
    IdleConfig,
    LogsConfig,
    PolicyConfig,
    StateConfig,
)


# Not slotted: the digest is a cached_property, which needs an instance __dict__.
@dataclass(frozen=True)
class Config:
    devices: DevicesConfig
    policy: PolicyConfig
    drain: DrainConfig
    idle: IdleConfig
    logs: LogsConfig
    state: StateConfig
    path: str | None = None
    loaded: bool = False
    # Why root may not act on this configuration (config/trust.py); empty
    # when it may, or when the guard does not run as root.
    trust: tuple[str, ...] = ()

    @functools.cached_property
    def digest(self) -> str:
        """A short fingerprint of the effective configuration, for the history."""
        return hashlib.sha256(to_toml(self).encode()).hexdigest()[:16]
