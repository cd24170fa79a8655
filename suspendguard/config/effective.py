"""The effective configuration: one record per section, where it came from, its fingerprint."""

from __future__ import annotations

from dataclasses import dataclass

from suspendguard.config.schema import (
    DevicesConfig,
    DrainConfig,
    IdleConfig,
    LogsConfig,
    PolicyConfig,
    RestoreConfig,
    ResumeConfig,
    StateConfig,
)


@dataclass(frozen=True, slots=True)
class Config:
    devices: DevicesConfig
    policy: PolicyConfig
    drain: DrainConfig
    idle: IdleConfig
    logs: LogsConfig
    restore: RestoreConfig
    resume: ResumeConfig
    state: StateConfig
    path: str | None = None
    loaded: bool = False
    # Why root may not act on this configuration (config/trust.py); empty
    # when it may, or when the guard does not run as root.
    trust: tuple[str, ...] = ()
