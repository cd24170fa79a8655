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

# The longest wait any key may ask for: systemd takes more, but a suspend (or
# a resume, a log window, a question to a node) that waits more than a day is
# a mistake, and a huge value only ends up in a unit file as a long number.
DAY_S = 86400


@dataclass(frozen=True, slots=True)
class Bounds:
    """A number's valid range: from ``low`` (or above it, when ``open_low``) to ``high``."""

    low: float
    high: float
    open_low: bool = False

    def holds(self, value: float) -> bool:
        """Whether ``value`` lies in the range; nan and inf never do."""
        above = value > self.low if self.open_low else value >= self.low
        return above and value <= self.high

    def words(self) -> str:
        """The range as the error line and the docs say it."""
        if self.open_low:
            return f"> {self.low} and at most {self.high}"
        return f"from {self.low} to {self.high}"


# A wait that may be 0 (none), and one that must be longer than 0 (a timeout).
WAIT = Bounds(0, DAY_S)
TIMEOUT = Bounds(0, DAY_S, open_low=True)


@dataclass(frozen=True, slots=True)
class Spec:
    """One key of the schema; ``default`` is written as it would be in TOML."""

    default: Any
    kind: Kind
    doc: str
    choices: tuple[str, ...] = ()
    bounds: Bounds | None = None


def setting(default: Any, kind: Kind, doc: str, choices: tuple[str, ...] = (),
            bounds: Bounds | None = None) -> Any:
    """A section field that carries its key's Spec (the validated value has no default).

    Every number (int, float) has its bounds: a key without them is refused here.
    """
    if (kind in ("int", "float")) != (bounds is not None):
        raise ValueError(f"a {kind} setting {'needs' if bounds is None else 'takes no'} bounds")
    return field(metadata={"spec": Spec(default, kind, doc, choices, bounds)})
