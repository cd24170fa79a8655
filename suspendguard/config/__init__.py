"""Configuration: one table of defaults, TOML read once, validated once.

Every key is optional. Each section is a frozen dataclass (config/schema.py)
whose fields carry their key's default, kind and help; ``SCHEMA`` is derived
from those fields, so a key is declared once, as a typed attribute, and the
loader, the printer and the generated docs all read the same table. The
dataclasses are the source rather than the table because they are what the
code reads, and mypy checks every use of a key against them.

schema.py: the table and the effective Config; validate.py: one value of each kind;
load.py: the file read and validated into a Config (its deadline checked against
the shares of system/deadline.py); trust.py: whether root may act on it;
render.py: TOML out.
"""

from suspendguard.config.backends import FAMILIES, IDLE_BACKENDS, Family, IdleBackend
from suspendguard.config.load import DEFAULT_PATH, ENV_VAR, build, defaults, load, resolve_path
from suspendguard.config.render import commented_default, to_toml
from suspendguard.config.schema import (
    DEFAULT_STATE_DIR,
    SCHEMA,
    Config,
    DevicesConfig,
    DrainConfig,
    DrainRule,
    EscalationStep,
    IdleConfig,
    LauncherRule,
    LogsConfig,
    NotifyConfig,
    PolicyConfig,
    RestoreConfig,
    ResumeConfig,
    Rule,
    StateConfig,
)

__all__ = [
    "DEFAULT_PATH", "DEFAULT_STATE_DIR", "ENV_VAR", "FAMILIES", "IDLE_BACKENDS", "SCHEMA",
    "Config", "DevicesConfig", "DrainConfig", "DrainRule", "EscalationStep", "Family", "IdleBackend",
    "IdleConfig", "LauncherRule", "LogsConfig", "NotifyConfig",
    "PolicyConfig", "RestoreConfig", "ResumeConfig",
    "Rule", "StateConfig",
    "build", "commented_default", "defaults", "load", "resolve_path",
    "to_toml",
]
