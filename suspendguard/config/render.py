"""The configuration printed as TOML: the effective values, or the commented defaults."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from suspendguard.config.schema import (
    RULE_FIELDS,
    RULE_HELP,
    SCHEMA,
    Config,
    DrainRule,
    EscalationStep,
    LauncherRule,
    Rule,
)
from suspendguard.config.validate import validate


def to_toml(config: Config) -> str:
    """The effective configuration as TOML (loads back to the same Config)."""
    values = {
        section: {key: getattr(getattr(config, section), key) for key in specs}
        for section, specs in SCHEMA.items()
    }
    return _document(values)


def commented_default() -> str:
    """The commented default file that ``suspendguard install`` writes."""
    lines = [
        "# suspendguard configuration. Every key is optional; the values shown",
        "# (commented out) are the defaults; each comment is the key's meaning.",
        "# Reference: suspendguard.toml(5) (man 5 suspendguard.toml).",
        "",
    ]
    for section, specs in SCHEMA.items():
        lines.append(f"[{section}]")
        for key, spec in specs.items():
            lines.append(f"# {spec.doc}")
            if spec.kind == "rules":
                lines += _rules_comment(key)
            elif spec.kind == "launchers":
                lines.append(f'# {key} = [ {{ exe = "/opt/example/bin/launch", stop = "hold" }} ]')
            elif spec.kind == "drainrules":
                lines.append(f'# {key} = [ {{ uid = 1000, exe = "/usr/bin/example", '
                             'timeout_s = 90 }} ]')
            else:
                lines.append(f"# {key} = {_toml_value(validate(spec, spec.default))}")
        lines.append("")
    return "\n".join(lines)


def _document(values: Mapping[str, Mapping[str, Any]]) -> str:
    lines: list[str] = []
    for section, specs in SCHEMA.items():
        lines.append(f"[{section}]")
        for key, spec in specs.items():
            value = values[section][key]
            if spec.kind == "rules":
                rules: Sequence[Rule] = value
                lines.append(f"{key} = [" + ", ".join(_rule_table(r) for r in rules) + "]")
            elif spec.kind == "drainrules":
                drains: Sequence[DrainRule] = value
                lines.append(f"{key} = [" + ", ".join(
                    _rule_table(r.match)[:-2] + f", timeout_s = {r.timeout_s!r} }}"
                    for r in drains) + "]")
            elif spec.kind == "launchers":
                launchers: Sequence[LauncherRule] = value
                lines.append(f"{key} = [" + ", ".join(_launcher_table(r) for r in launchers)
                             + "]")
            else:
                lines.append(f"{key} = {_toml_value(value)}")
        lines.append("")
    return "\n".join(lines)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return _toml_str(value)
    if isinstance(value, EscalationStep):
        # repr: the shortest text that reads back as the same float (":g" keeps 6 digits).
        return _toml_str(f"{value.signal}:{repr(value.wait_s).removesuffix('.0')}")
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(type(value))  # pragma: no cover


def _toml_str(value: str) -> str:
    out = value.replace("\\", "\\\\").replace('"', '\\"')
    out = "".join(c if c.isprintable() else _escape(c) for c in out)
    return f'"{out}"'


def _escape(c: str) -> str:
    # TOML's \u takes exactly four hex digits; code points above U+FFFF need \U.
    code = ord(c)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _rule_table(rule: Rule) -> str:
    return "{ " + ", ".join(
        f"{k} = {_toml_value(getattr(rule, k))}" for k in RULE_FIELDS if getattr(rule, k) is not None
    ) + " }"


def _launcher_table(launcher: LauncherRule) -> str:
    extra = [f"{k} = {_toml_value(getattr(launcher, k))}" for k in ("stop", "name", "restarts")
             if getattr(launcher, k)]
    return _rule_table(launcher.match)[:-2] + ", " + ", ".join(extra) + " }"


RULES_INTRO = "# A rule matches a holder when every field it gives matches:"
# Above the first rules key of the commented default, after the match kinds.
FORGEABLE_NOTE = (
    "# A protect rule on comm or cmdline alone lets any user veto every",
    "# suspend (name a process so, open the device); an ignore rule on them",
    "# alone lets any user's job run on through it: add uid, user, unit or exe.",
)


def _rules_comment(key: str) -> list[str]:
    """The example of a rules key; before the first, each match kind and who can forge it."""
    lines = []
    if key == "protect":
        lines.append(RULES_INTRO)
        lines += [f"#   {k}: {RULE_HELP[k]}" for k in RULE_FIELDS]
        lines += FORGEABLE_NOTE
    lines.append(f"# {key} = [ {{ uid = 1000, exe = \"/usr/bin/example\" }} ]")
    return lines
