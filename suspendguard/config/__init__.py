"""Configuration: one table of defaults, TOML read once, validated once.

Every key is optional. Each section is a frozen dataclass (config/schema.py)
whose fields carry their key's default, kind and help; ``SCHEMA`` is derived
from those fields, so a key is declared once, as a typed attribute, and the
loader, the printer and the README check all read the same table. The
dataclasses are the source rather than the table because they are what the
code reads, and mypy checks every use of a key against them.

schema.py: the table; budget.py: how the deadline is shared; validate.py: one value of each kind; load.py: the
file read and validated into a Config (effective.py); render.py: TOML out.
"""

from suspendguard.config.budget import (
    ANSWER_MARGIN_S,
    RESTORE_AFTER_RESUME_S,
    RESTORE_AFTER_VETO_S,
    idle_reserve_s,
)
from suspendguard.config.effective import Config
from suspendguard.config.load import DEFAULT_PATH, ENV_VAR, build, defaults, load, resolve_path
from suspendguard.config.render import commented_default, to_toml
from suspendguard.config.schema import (
    DEFAULT_STATE_DIR,
    FAMILIES,
    IDLE_BACKENDS,
    SCHEMA,
    DevicesConfig,
    DrainConfig,
    EscalationStep,
    Family,
    IdleConfig,
    LogsConfig,
    PolicyConfig,
    RestoreConfig,
    ResumeConfig,
    Rule,
    StateConfig,
)

__all__ = [
    "ANSWER_MARGIN_S", "DEFAULT_PATH", "DEFAULT_STATE_DIR", "ENV_VAR", "FAMILIES", "IDLE_BACKENDS",
    "RESTORE_AFTER_RESUME_S", "RESTORE_AFTER_VETO_S", "SCHEMA",
    "Config", "DevicesConfig", "DrainConfig", "EscalationStep", "Family", "IdleConfig",
    "LogsConfig", "PolicyConfig", "RestoreConfig", "ResumeConfig", "Rule", "StateConfig",
    "build", "commented_default", "defaults", "idle_reserve_s", "load", "resolve_path",
    "to_toml",
]
