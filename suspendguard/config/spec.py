"""A key of the configuration: its default, kind and help, carried by the section's field."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

# kind is one of: str, path, int, float, bool, list, globs, choice, choices,
# signal, escalate, rules, launchers, drainrules.
Kind = Literal[
    "str", "path", "int", "float", "bool", "list", "globs",
    "choice", "choices", "signal", "escalate", "rules", "launchers", "drainrules",
]


@dataclass(frozen=True, slots=True)
class Spec:
    """One key of the schema; ``default`` is written as it would be in TOML."""

    default: Any
    kind: Kind
    doc: str
    choices: tuple[str, ...] = ()


def setting(default: Any, kind: Kind, doc: str, choices: tuple[str, ...] = ()) -> Any:
    """A section field that carries its key's Spec (the validated value has no default)."""
    return field(metadata={"spec": Spec(default, kind, doc, choices)})
