"""Configuration: one table of defaults, TOML read once, validated once.

Every key is optional. ``SCHEMA`` is the only place a default is written;
the README's configuration reference is checked against it by the tests.
"""

from __future__ import annotations

import functools
import os
import re
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from suspendguard.errors import ConfigError

if TYPE_CHECKING:
    from typing import Any

DEFAULT_PATH = "/etc/suspendguard/config.toml"
ENV_VAR = "SUSPENDGUARD_CONFIG"

FAMILIES = ("ascend", "nvidia")
BACKENDS = ("acl", "npu-smi", "dcmi", "nvml")
RULE_FIELDS = ("comm", "exe", "cmdline", "user", "unit")


@dataclass(frozen=True, slots=True)
class Spec:
    """One key of the schema."""

    default: Any
    kind: str
    doc: str
    choices: tuple[str, ...] = ()


# The one table of defaults. kind is one of: str, path, int, float, bool,
# list, globs, choice, choices, signal, escalate, rules.
SCHEMA: dict[str, dict[str, Spec]] = {
    "devices": {
        "families": Spec(
            ["ascend", "nvidia"], "choices",
            "Built-in node lists to use (ascend, nvidia).", FAMILIES,
        ),
        "nodes": Spec([], "globs", "Extra compute nodes (globs)."),
        "management": Spec([], "globs", "Extra management nodes (globs)."),
    },
    "policy": {
        "protect": Spec(
            [], "rules",
            "Rules for holders never signalled; while one runs the suspend is vetoed.",
        ),
        "ignore": Spec([], "rules", "Rules for holders that do not count and are never signalled."),
    },
    "drain": {
        "signal": Spec("SIGINT", "signal", "Signal sent to each holder to ask it to stop."),
        "timeout_s": Spec(30.0, "float", "Seconds to wait for holders to exit after the signal."),
        "rounds": Spec(2, "int", "Rescans after the wait for holders that appeared meanwhile."),
        "escalate": Spec(
            [], "escalate",
            'Opt-in escalation steps "SIGNAL:SECONDS", e.g. ["SIGTERM:10", "SIGKILL:5"].',
        ),
        "on_sigint_ignored": Spec(
            "veto", "choice",
            "A holder that ignores the signal: veto, escalate, or signal-anyway.",
            ("veto", "escalate", "signal-anyway"),
        ),
        "deadline_s": Spec(
            100.0, "float",
            "Hard limit for one guard run; the unit's TimeoutStartSec is this plus 20 s.",
        ),
    },
    "idle": {
        "backends": Spec(
            ["acl", "npu-smi", "dcmi", "nvml"], "choices",
            "Idle backends to try, in order; those that probe OK are used.", BACKENDS,
        ),
        "samples": Spec(3, "int", "Consecutive idle readings needed to call a device idle."),
        "interval_ms": Spec(200, "int", "Milliseconds between readings."),
        "settle_s": Spec(3.0, "float", "Seconds a device may take to read idle after a drain."),
        "busy_threshold": Spec(0.0, "float", "Utilization percent above which a reading is busy."),
        "on_unknown": Spec(
            "allow", "choice",
            "When no backend can answer for a device found: allow (warn) or veto.",
            ("allow", "veto"),
        ),
        "npu_smi": Spec("npu-smi", "str", "The npu-smi command (name on PATH or a path)."),
        "command_timeout_s": Spec(5.0, "float", "Timeout for each backend query."),
        "ascend_env": Spec(
            "", "str",
            "set_env.sh sourced for the pyACL probe; empty: first of the CANN defaults.",
        ),
        "dcmi_library": Spec(
            "", "str", "Path of libdcmi.so; empty: search the driver's default places.",
        ),
    },
    "logs": {
        "paths": Spec(
            [
                "$ASCEND_PROCESS_LOG_PATH/**",
                "$ASCEND_WORK_PATH/log/**",
                "~/ascend/log/**",
                "/var/log/npu/slog/**",
            ],
            "list",
            "Globs of Ascend log files; ~ means root's and each holder's home.",
        ),
        "max_bytes": Spec(64 * 1024 * 1024, "int", "At most this many bytes per file, from its end."),
    },
    "state": {
        "dir": Spec("/var/lib/suspendguard", "path", "History database and state."),
    },
}


@dataclass(frozen=True, slots=True)
class Rule:
    """A policy rule: every field given must match."""

    comm: str | None = None
    exe: str | None = None
    cmdline: str | None = None
    user: str | None = None
    unit: str | None = None

    def describe(self) -> str:
        parts = [f"{k}={getattr(self, k)!r}" for k in RULE_FIELDS if getattr(self, k) is not None]
        return ", ".join(parts)


@dataclass(frozen=True, slots=True)
class DevicesConfig:
    families: tuple[str, ...]
    nodes: tuple[str, ...]
    management: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    protect: tuple[Rule, ...]
    ignore: tuple[Rule, ...]


@dataclass(frozen=True, slots=True)
class EscalationStep:
    signal: str
    wait_s: float


@dataclass(frozen=True, slots=True)
class DrainConfig:
    signal: str
    timeout_s: float
    rounds: int
    escalate: tuple[EscalationStep, ...]
    on_sigint_ignored: str
    deadline_s: float


@dataclass(frozen=True, slots=True)
class IdleConfig:
    backends: tuple[str, ...]
    samples: int
    interval_ms: int
    settle_s: float
    busy_threshold: float
    on_unknown: str
    npu_smi: str
    command_timeout_s: float
    ascend_env: str
    dcmi_library: str


@dataclass(frozen=True, slots=True)
class LogsConfig:
    paths: tuple[str, ...]
    max_bytes: int


@dataclass(frozen=True, slots=True)
class StateConfig:
    dir: str


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

    @functools.cached_property
    def digest(self) -> str:
        """A short fingerprint of the effective configuration, for the history."""
        import hashlib

        return hashlib.sha256(to_toml(self).encode()).hexdigest()[:16]


# --- validation ----------------------------------------------------------


class _Invalid(Exception):
    pass


def _where(path: str, section: str, key: str | None, line: int | None = None) -> str:
    name = f"[{section}] {key}" if key else f"[{section}]"
    at = f" (line {line})" if line else ""
    return f"{path}: {name}{at}"


def _check_glob(pattern: str) -> None:
    if not pattern:
        raise _Invalid("an empty glob")
    if not pattern.startswith("/"):
        raise _Invalid(f"an absolute path glob, got {pattern!r}")
    depth = 0
    for ch in pattern:
        if ch == "[":
            depth += 1
        elif ch == "]" and depth:
            depth -= 1
    if depth:
        raise _Invalid(f"a valid glob, got {pattern!r} (unclosed '[')")


def _signal_number(name: str) -> int:
    if not isinstance(name, str):
        raise _Invalid("a signal name such as \"SIGINT\"")
    upper = name.upper()
    if not upper.startswith("SIG"):
        upper = "SIG" + upper
    try:
        sig = signal.Signals[upper]
    except KeyError:
        raise _Invalid(f'a signal name such as "SIGINT", got {name!r}') from None
    return int(sig)


def signal_name(name: str) -> str:
    """The canonical spelling ("SIGINT") of a validated signal name."""
    return signal.Signals(_signal_number(name)).name


def _str_list(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _Invalid("a list of strings")
    return list(value)


def _number(value: Any, kind: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Invalid("a number" if kind == "float" else "an integer")
    if kind == "int" and not isinstance(value, int):
        raise _Invalid("an integer")
    if value < 0:
        raise _Invalid(f"a number >= 0, got {value}")
    return value


def _rule(value: Any, index: int) -> Rule:
    if not isinstance(value, dict):
        raise _Invalid(f"entry {index + 1}: a table such as {{ comm = \"npu-smi\" }}")
    unknown = sorted(set(value) - set(RULE_FIELDS))
    if unknown:
        raise _Invalid(
            f"entry {index + 1}: unknown field {unknown[0]!r}; expected one of "
            + ", ".join(RULE_FIELDS)
        )
    if not value:
        raise _Invalid(f"entry {index + 1}: at least one of " + ", ".join(RULE_FIELDS))
    for k, v in value.items():
        if not isinstance(v, str) or not v:
            raise _Invalid(f"entry {index + 1}: {k} must be a non-empty string")
    if "cmdline" in value:
        try:
            re.compile(value["cmdline"])
        except re.error as exc:
            raise _Invalid(
                f"entry {index + 1}: cmdline must be a valid regular expression ({exc})"
            ) from None
    return Rule(**value)


def _validate(spec: Spec, value: Any) -> Any:
    kind = spec.kind
    if kind in ("str", "path"):
        if not isinstance(value, str):
            raise _Invalid("a string")
        if kind == "path" and not value.startswith("/"):
            raise _Invalid(f"an absolute path, got {value!r}")
        return value
    if kind in ("int", "float"):
        return _number(value, kind)
    if kind == "bool":
        if not isinstance(value, bool):
            raise _Invalid("true or false")
        return value
    if kind == "choice":
        if value not in spec.choices:
            raise _Invalid("one of " + ", ".join(f'"{c}"' for c in spec.choices) + f", got {value!r}")
        return value
    if kind == "choices":
        items = _str_list(value)
        for item in items:
            if item not in spec.choices:
                raise _Invalid(
                    "a list of " + ", ".join(f'"{c}"' for c in spec.choices) + f", got {item!r}"
                )
        return tuple(dict.fromkeys(items))
    if kind == "list":
        return tuple(_str_list(value))
    if kind == "globs":
        items = _str_list(value)
        for item in items:
            _check_glob(item)
        return tuple(items)
    if kind == "signal":
        return signal_name(value)
    if kind == "escalate":
        steps = []
        for item in _str_list(value):
            name, sep, secs = item.partition(":")
            try:
                wait = float(secs) if sep else -1.0
            except ValueError:
                wait = -1.0
            if wait < 0:
                raise _Invalid(f'steps like "SIGTERM:10", got {item!r}')
            steps.append(EscalationStep(signal_name(name), wait))
        return tuple(steps)
    if kind == "rules":
        if not isinstance(value, list):
            raise _Invalid("a list of tables (an array of tables such as [[policy.protect]])")
        return tuple(_rule(v, i) for i, v in enumerate(value))
    raise AssertionError(kind)  # pragma: no cover


def _line_of(text: str, section: str, key: str) -> int | None:
    """Best-effort line number of ``key`` inside ``[section]`` of a TOML text."""
    current = None
    header = re.compile(r"^\s*\[\[?\s*([A-Za-z0-9_.-]+)\s*\]\]?")
    assign = re.compile(r"^\s*([A-Za-z0-9_-]+)\s*=")
    for number, line in enumerate(text.splitlines(), 1):
        m = header.match(line)
        if m:
            current = m.group(1)
            if current == f"{section}.{key}":
                return number
            continue
        m = assign.match(line)
        if m and current == section and m.group(1) == key:
            return number
    return None


def build(data: Mapping[str, Any], path: str = "<defaults>", text: str = "") -> Config:
    """Validate a parsed TOML document (possibly empty) into a Config."""
    values: dict[str, dict[str, Any]] = {}
    for section in data:
        if section not in SCHEMA:
            raise ConfigError(
                f"{path}: unknown section [{section}]; expected one of "
                + ", ".join(f"[{s}]" for s in SCHEMA)
            )
        if not isinstance(data[section], dict):
            raise ConfigError(f"{path}: {section} must be a table [{section}]")
    for section, specs in SCHEMA.items():
        given = data.get(section, {})
        for key in given:
            if key not in specs:
                raise ConfigError(
                    f"{_where(path, section, key, _line_of(text, section, key))}: unknown key; "
                    f"expected one of {', '.join(specs)}"
                )
        out: dict[str, Any] = {}
        for key, spec in specs.items():
            raw = given.get(key, spec.default)
            try:
                out[key] = _validate(spec, raw)
            except _Invalid as exc:
                line = _line_of(text, section, key)
                raise ConfigError(f"{_where(path, section, key, line)}: expected {exc}") from None
        values[section] = out
    drain = values["drain"]
    if drain["timeout_s"] <= 0:
        raise ConfigError(
            f"{_where(path, 'drain', 'timeout_s', _line_of(text, 'drain', 'timeout_s'))}: "
            f"expected a number > 0, got {drain['timeout_s']}"
        )
    if drain["deadline_s"] <= drain["timeout_s"]:
        raise ConfigError(
            f"{_where(path, 'drain', 'deadline_s', _line_of(text, 'drain', 'deadline_s'))}: "
            f"expected a number greater than [drain] timeout_s ({drain['timeout_s']}), "
            f"got {drain['deadline_s']}"
        )
    if values["idle"]["samples"] < 1:
        raise ConfigError(
            f"{_where(path, 'idle', 'samples', _line_of(text, 'idle', 'samples'))}: "
            "expected an integer >= 1"
        )
    return Config(
        devices=DevicesConfig(**values["devices"]),
        policy=PolicyConfig(**values["policy"]),
        drain=DrainConfig(**values["drain"]),
        idle=IdleConfig(**values["idle"]),
        logs=LogsConfig(**values["logs"]),
        state=StateConfig(**values["state"]),
        path=None if path == "<defaults>" else path,
        loaded=path != "<defaults>",
    )


def defaults() -> Config:
    return build({})


def resolve_path(cli_path: str | None, environ: Mapping[str, str] | None = None) -> tuple[str, bool]:
    """(path, explicit): --config wins over $SUSPENDGUARD_CONFIG over the default."""
    env = os.environ if environ is None else environ
    if cli_path:
        return cli_path, True
    if env.get(ENV_VAR):
        return env[ENV_VAR], True
    return DEFAULT_PATH, False


def load(cli_path: str | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Read and validate the configuration; a missing default file means defaults."""
    path, explicit = resolve_path(cli_path, environ)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        if explicit:
            raise ConfigError(f"{path}: configuration file not found") from None
        return defaults()
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, expected a TOML file") from None
    except PermissionError:
        raise ConfigError(f"{path}: permission denied reading the configuration") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    # Imported here: most runs (the sleep hook, a host without a config
    # file) never parse TOML, and the parser is a noticeable part of start-up.
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10
        import tomli as tomllib
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: TOML syntax error: {exc}") from None
    return build(data, path, text)


# --- printing ------------------------------------------------------------


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return _toml_str(value)
    if isinstance(value, EscalationStep):
        return _toml_str(f"{value.signal}:{value.wait_s:g}")
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(type(value))  # pragma: no cover


def _toml_str(value: str) -> str:
    out = value.replace("\\", "\\\\").replace('"', '\\"')
    out = "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in out)
    return f'"{out}"'


def _rule_table(rule: Rule) -> str:
    return "{ " + ", ".join(
        f"{k} = {_toml_str(getattr(rule, k))}" for k in RULE_FIELDS if getattr(rule, k) is not None
    ) + " }"


def to_toml_values(values: Mapping[str, Mapping[str, Any]]) -> str:
    lines: list[str] = []
    for section, specs in SCHEMA.items():
        lines.append(f"[{section}]")
        for key, spec in specs.items():
            value = values[section][key]
            if spec.kind == "rules":
                rules: Sequence[Rule] = value
                lines.append(f"{key} = [" + ", ".join(_rule_table(r) for r in rules) + "]")
            else:
                lines.append(f"{key} = {_toml_value(value)}")
        lines.append("")
    return "\n".join(lines)


def to_toml(config: Config) -> str:
    """The effective configuration as TOML (loads back to the same Config)."""
    values = {
        section: {key: getattr(getattr(config, section), key) for key in specs}
        for section, specs in SCHEMA.items()
    }
    return to_toml_values(values)


def commented_default() -> str:
    """The commented default file that ``suspendguard install`` writes."""
    lines = [
        "# suspendguard configuration. Every key is optional; the values shown",
        "# (commented out) are the defaults. See the README for the reference.",
        "",
    ]
    for section, specs in SCHEMA.items():
        lines.append(f"[{section}]")
        for key, spec in specs.items():
            lines.append(f"# {spec.doc}")
            default = getattr(getattr(defaults(), section), key)
            if spec.kind == "rules":
                lines.append(f"# {key} = [ {{ comm = \"example\" }} ]")
            else:
                lines.append(f"# {key} = {_toml_value(default)}")
        lines.append("")
    return "\n".join(lines)

